import type { LockError } from '../../core/errors.js';
import { Retrying } from '../../core/retrying.js';
import {
  inTurn,
  isPgPool,
  type PgBackend,
  type PgClient,
  type PgNotification,
  type PgPool,
  type PgSessionClient,
  sessionClientOf,
} from './connection.js';
import { quoteIdentifier } from './schema.js';

/**
 * LISTEN sessions per connection: how many listeners of this process asked for each channel, so
 * that several stores sharing one client (a caller's pg.Client given to several Leaseholds) send
 * one LISTEN and the last of them the UNLISTEN. Counts change before the statement is sent, and a
 * client runs its statements in order, so LISTEN and UNLISTEN reach the server in the order the
 * counts changed.
 */
const LISTENS = new WeakMap<PgClient, Map<string, number>>();

/** Listeners of this process with a live LISTEN on each channel (operator and test introspection). */
const LISTENING = new Map<string, number>();

/** How many stores of this process listen on `channel` now (each LISTEN confirmed by the server). */
export function listenersOf(channel: string): number {
  return LISTENING.get(channel) ?? 0;
}

function count(map: Map<string, number>, key: string, by: number): number {
  const next = (map.get(key) ?? 0) + by;
  if (next > 0) map.set(key, next);
  else map.delete(key);
  return next;
}

export interface ListenerOptions {
  /** Where a hand-off goes: the channel and its payload. */
  readonly deliver: (channel: string, payload: string) => void;
  readonly onError: (error: unknown) => void;
  /** The error to report for a failure of `action`. */
  readonly describe: (action: string, error: unknown) => LockError;
}

/** Where the listening session comes from, and where it goes when nobody listens. */
interface Sessions {
  /** The session is ours: its 'error' or 'end' means it is lost, and it is opened again. */
  readonly owned: boolean;
  open(): Promise<PgClient>;
  /** Nobody listens: the session (with nothing LISTENed left on it) is put aside. */
  idle(client: PgClient): Promise<void>;
  /** Let go of the session at once: it failed, or the store closes. */
  drop(client: PgClient, error: unknown): void;
  /** The store closes: whatever was put aside goes too. */
  close(): void;
}

/** The caller's client: its own session, never ended here. */
function callerClient(client: PgClient): Sessions {
  return {
    owned: false,
    open: async () => client,
    idle: async () => undefined,
    drop: () => undefined,
    close: () => undefined,
  };
}

/** Ignores an ended client's last words: a pg Client with no 'error' listener would throw them. */
const ignore = (): void => undefined;

/**
 * A connection of its own, made from a pool's settings (the pool's Client class and options) and
 * outside its budget: a session checked out of the pool would starve the lock's own statements of
 * a small pool (one of one connection: the release could never run). Put aside when nobody listens
 * and ended after the pool's `idleTimeoutMillis`, as the pool does with its idle connections.
 */
function ownConnection(pool: PgPool, make: () => PgSessionClient): Sessions {
  let spare: PgSessionClient | undefined;
  let reap: ReturnType<typeof setTimeout> | undefined;
  let closed = false;
  const end = (client: PgSessionClient) => {
    client.end().catch(ignore);
  };
  const unspare = () => {
    clearTimeout(reap);
    reap = undefined;
    const kept = spare;
    spare = undefined;
    return kept;
  };
  return {
    owned: true,
    open: async () => {
      const kept = unspare();
      if (kept) return kept;
      const client = make();
      client.on('error', ignore);
      // A spare that dies meanwhile is not handed out again.
      client.on('end', () => {
        if (spare === client) unspare();
      });
      try {
        await client.connect();
      } catch (error) {
        end(client);
        throw error;
      }
      if (closed) {
        end(client);
        throw new Error('the store is closed');
      }
      return client;
    },
    idle: async (client) => {
      const own = client as PgSessionClient;
      try {
        await inTurn(own, { text: 'UNLISTEN *' });
      } catch {
        end(own);
        return;
      }
      // Kept as the pool keeps an idle connection: for idleTimeoutMillis (0: until close), and not
      // at all for a pool that lets the process exit while idle.
      const options = pool.options ?? {};
      const linger = options.idleTimeoutMillis;
      if (closed || options.allowExitOnIdle === true || typeof linger !== 'number' || linger < 0) {
        end(own);
        return;
      }
      const previous = unspare();
      if (previous !== undefined && previous !== own) end(previous);
      spare = own;
      if (linger === 0) return;
      reap = setTimeout(() => {
        const kept = unspare();
        if (kept) end(kept);
      }, linger);
      reap.unref?.();
    },
    drop: (client) => end(client as PgSessionClient),
    close: () => {
      closed = true;
      const kept = unspare();
      if (kept) end(kept);
    },
  };
}

/** A session checked out of a pool while anyone listens, given back with nothing LISTENed. */
function checkedOut(pool: PgPool): Sessions {
  return {
    owned: true,
    open: () => pool.connect(),
    idle: async (client) => {
      // A session goes back to the pool listening to nothing; one that cannot say so is destroyed.
      try {
        await inTurn(client, { text: 'UNLISTEN *' });
        client.release?.();
      } catch (error) {
        client.release?.(error);
      }
    },
    drop: (client, error) => client.release?.(error),
    close: () => undefined,
  };
}

function sessionsOf(source: PgBackend): Sessions {
  if (!isPgPool(source)) return callerClient(source as unknown as PgClient);
  const pool = source as unknown as PgPool;
  const make = sessionClientOf(pool);
  return make ? ownConnection(pool, make) : checkedOut(pool);
}

/**
 * The one listening connection of a store. On a pool it is a connection of its own, made from the
 * pool's settings while anyone listens (a pool without them, not pg's: a session checked out of
 * it), opened again with every channel LISTENed again when the server drops it. On a client it is
 * that client's own session (the caller's: never ended here). Every step runs in turn, so a
 * LISTEN, an UNLISTEN and the session's hand-back never overtake one another.
 */
export class Listener {
  readonly #sessions: Sessions;
  readonly #options: ListenerOptions;
  /** The session now, once opened. */
  #client: PgClient | undefined;
  /** Channels LISTENed on the session (restored on a new one). */
  readonly #channels = new Set<string>();
  #queue: Promise<unknown> = Promise.resolve();
  #closed = false;
  /** Once the session is lost: a new one, every channel LISTENed again; retried while that fails. */
  readonly #restore: Retrying;
  readonly #onNotification = (message: PgNotification) => this.#options.deliver(message.channel, message.payload ?? '');
  readonly #onLost = (error?: Error) => this.#lost(error ?? new Error('the listening connection ended'));

  constructor(source: PgBackend, options: ListenerOptions) {
    this.#sessions = sessionsOf(source);
    this.#options = options;
    this.#restore = new Retrying({
      attempt: () => this.#run(() => this.#restoreSession()),
      // Waiters go on meanwhile on their timers (bounded by the holder's lease).
      onError: options.onError,
      going: () => !this.#closed && this.#channels.size > 0,
    });
  }

  /** The session is ours to end or give back; else the caller's client. */
  get #owned(): boolean {
    return this.#sessions.owned;
  }

  #run<T>(step: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(step);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  listen(channel: string): Promise<void> {
    return this.#run(async () => {
      const client = await this.#session();
      await this.#listenOn(client, channel);
      this.#channels.add(channel);
      count(LISTENING, channel, 1);
    });
  }

  unlisten(channel: string): Promise<void> {
    return this.#run(async () => {
      if (!this.#channels.delete(channel)) return;
      count(LISTENING, channel, -1);
      const client = this.#client;
      if (client) await this.#unlistenOn(client, channel);
    });
  }

  /** Nobody listens any more: put the session aside (ours), or stop hearing the client's notifications. */
  idle(): void {
    this.#run(async () => {
      if (this.#channels.size === 0) await this.#detach();
    }).catch(this.#options.onError);
  }

  /**
   * Stop listening at once, without waiting behind a step in progress (a connection to a frozen
   * server would hold it up): a session of ours is ended, so nothing it LISTENed survives; on the
   * caller's client this store's channels are UNLISTENed.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#restore.stop();
    this.#sessions.close();
    const channels = [...this.#channels];
    this.#channels.clear();
    for (const channel of channels) count(LISTENING, channel, -1);
    const client = this.#client;
    this.#client = undefined;
    if (!client) return;
    this.#unhook(client);
    if (this.#owned) {
      LISTENS.delete(client);
      this.#sessions.drop(client, true);
      return;
    }
    for (const channel of channels) this.#unlistenOn(client, channel).catch(() => undefined);
  }

  async #session(): Promise<PgClient> {
    if (this.#client) return this.#client;
    if (this.#closed) throw this.#options.describe('LISTEN', new Error('the store is closed'));
    const client = await this.#sessions.open();
    if (this.#closed) {
      this.#sessions.drop(client, true);
      throw this.#options.describe('LISTEN', new Error('the store is closed'));
    }
    client.on('notification', this.#onNotification);
    if (this.#owned) {
      client.on('error', this.#onLost);
      client.on('end', this.#onLost);
    }
    this.#client = client;
    return client;
  }

  async #listenOn(client: PgClient, channel: string): Promise<void> {
    const listens = LISTENS.get(client) ?? new Map<string, number>();
    LISTENS.set(client, listens);
    if (count(listens, channel, 1) > 1) return;
    try {
      await inTurn(client, { text: `LISTEN ${quoteIdentifier(channel)}` });
    } catch (error) {
      count(listens, channel, -1);
      throw this.#options.describe('LISTEN', error);
    }
  }

  async #unlistenOn(client: PgClient, channel: string): Promise<void> {
    const listens = LISTENS.get(client);
    if (!listens || count(listens, channel, -1) > 0) return;
    await inTurn(client, { text: `UNLISTEN ${quoteIdentifier(channel)}` });
  }

  #unhook(client: PgClient): void {
    client.off('notification', this.#onNotification);
    client.off('error', this.#onLost);
    client.off('end', this.#onLost);
  }

  async #detach(): Promise<void> {
    const client = this.#client;
    if (!client) return;
    this.#client = undefined;
    this.#unhook(client);
    if (!this.#owned) return;
    LISTENS.delete(client);
    await this.#sessions.idle(client);
  }

  /** Our session died (the server restarted, the connection was cut): open another, LISTEN again. */
  #lost(error: Error): void {
    if (!this.#dropSession(error)) return;
    this.#options.onError(this.#options.describe('LISTEN', error));
    this.#restore.later();
  }

  /** A new session with every channel LISTENed again (once the last was lost), unless nothing is to restore. */
  async #restoreSession(): Promise<void> {
    if (this.#closed || this.#client || this.#channels.size === 0) return;
    try {
      const client = await this.#session();
      for (const channel of this.#channels) await this.#listenOn(client, channel);
    } catch (error) {
      this.#dropSession(error);
      throw error;
    }
  }

  /** Let go of the session at once, as failed: false when there was none. */
  #dropSession(error: unknown): boolean {
    const client = this.#client;
    if (!client) return false;
    this.#client = undefined;
    this.#unhook(client);
    LISTENS.delete(client);
    this.#sessions.drop(client, error);
    return true;
  }
}
