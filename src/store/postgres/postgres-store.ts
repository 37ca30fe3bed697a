import type { LockError } from '../../core/errors.js';
import { ChannelHub } from '../channel-hub.js';
import { globMatcher } from '../memory/glob.js';
import { NameCache } from '../name-cache.js';
import type * as Port from '../port.js';
import { STORE } from '../port.js';
import { QuietNames } from '../quiet-names.js';
import { storeSettings } from '../settings.js';
import {
  addressOf,
  checkListenPool,
  inTurn,
  isPgPool,
  isUnavailable,
  type PgBackend,
  type PgClient,
  type PgPool,
  type QueryConfig,
  type Result,
  type Row,
  storeError,
} from './connection.js';
import { Listener } from './listener.js';
import { channelOf, decodeHandOff, Reply, type Statement, type Statements, statements } from './queries.js';
import { migrationSql, SCHEMA_VERSION, type SchemaNames, schemaNames } from './schema.js';

/**
 * A store's settings (Port.StoreSettings: the namespace of every table, sequence, function and
 * channel it uses, its instance label, retention, waiter lease and hand-on), each defaulted when
 * omitted, and the store's own options.
 */
export interface PostgresStoreOptions extends Partial<Port.StoreSettings> {
  /** Where background failures go (the listening connection). */
  readonly onError?: ((error: unknown) => void) | undefined;
  /**
   * Where to LISTEN for hand-offs: a pool (a connection of the store's own is made from its
   * settings while anyone waits, outside the pool) or a client (its own session). Default: the
   * backend itself. Behind PgBouncer in transaction mode, give a direct connection here: LISTEN
   * needs a session of its own.
   */
  readonly listen?: PgBackend | undefined;
  /** Apply the migration on first use (checked with one read, run only when missing). Default true. */
  readonly migrate?: boolean | undefined;
  /**
   * Send the lock and job calls as named prepared statements, parsed once per connection. Default
   * true. A pooler that does not keep them (PgBouncer in transaction mode before 1.21, or without
   * `max_prepared_statements`) refuses one, and from then on the store sends them unnamed; false
   * sends them unnamed from the start.
   */
  readonly preparedStatements?: boolean | undefined;
}

/** SQLSTATEs of a schema that is not there: undefined table, undefined function. */
const MISSING_SCHEMA = new Set(['42P01', '42883']);

/**
 * SQLSTATEs of a named statement the connection does not have (26000) or has already (42P05): a
 * pooler moved the session's statements between server connections. Either is raised before the
 * statement runs, so sending it again unnamed is safe.
 */
const NOT_PREPARED = new Set(['26000', '42P05']);

/** The first characters of acquire's refusals: '-<ms left>' and '^<limit>'. */
const MINUS = 0x2d;
const CARET = 0x5e;
const RELEASE_REPLIES: readonly Port.ReleaseReply[] = ['released', 'expired', 'not-owner'];
const EXTEND_REPLIES: readonly Port.ExtendReply[] = ['extended', 'expired', 'not-owner'];

/** How an acquire takes part in the queue, as the acquire function takes it. */
function queueCode(queue: Port.AcquireRequest['queue']): number {
  if (queue === 'join') return 1;
  return queue === 'member' ? 2 : 0;
}

/** The literal start of a glob, to narrow a scan: everything before its first special character. */
function literalStart(glob: string): string {
  const special = glob.search(/[*?[\\]/);
  return special < 0 ? glob : glob.slice(0, special);
}

/**
 * The ports on PostgreSQL, for one prefix: every call is one statement on the pool or client
 * (one transaction, one round trip), leases on the database's clock, tokens from a sequence,
 * hand-offs by NOTIFY on one channel per lock, heard on one listening connection per store.
 */
export class PostgresStore implements Port.Store, Port.JobStore, Port.AdminStore, Port.SharedStore {
  readonly [STORE] = true;
  readonly kind = 'postgres';
  readonly address: string;
  /** One statement on the pool, or on the client once its statements before have settled (inTurn). */
  readonly #query: (config: QueryConfig) => Promise<Result>;
  readonly #settings: Port.StoreSettings;
  readonly #prefix: string;
  readonly #names: SchemaNames;
  readonly #sql: Statements;
  readonly #migrate: boolean;
  readonly #onError: (error: unknown) => void;
  readonly #listenOn: PgBackend;
  #ready: Promise<void> | undefined;
  /** The schema was found or made: calls go straight to their statement. */
  #prepared = false;
  /** Named prepared statements are sent (until a pooler refuses one). */
  #named: boolean;
  /** Each lock's channel, hashed once per name. */
  readonly #channels = new NameCache((name) => channelOf(this.#prefix, name));
  /** Quiet names (store/quiet-names.ts): their acquire and release try the lock's UPDATE alone first. */
  readonly #quiet = new QuietNames();
  #lastError: unknown;
  #listener: Listener | undefined;
  #hub: ChannelHub<Port.HandOff> | undefined;

  constructor(
    db: PgBackend,
    { onError = () => {}, listen, migrate = true, preparedStatements = true, ...given }: PostgresStoreOptions = {},
  ) {
    if (isPgPool(db)) {
      const pool = db as unknown as PgPool;
      this.#query = (config) => pool.query(config);
    } else {
      const client = db as unknown as PgClient;
      this.#query = (config) => inTurn(client, config);
    }
    this.#settings = storeSettings(given);
    this.#prefix = this.#settings.prefix;
    this.#names = schemaNames(this.#prefix);
    this.#sql = statements(this.#names);
    this.#migrate = migrate;
    this.#named = preparedStatements;
    this.#onError = onError;
    this.#listenOn = listen ?? db;
    checkListenPool(db, this.#listenOn);
    this.address = addressOf(db);
  }

  /** The schema's objects for this store's prefix (quoted identifiers). */
  get names(): SchemaNames {
    return this.#names;
  }

  /** The last connection error, while calls fail for want of the database. */
  lastError(): unknown {
    return this.#lastError;
  }

  #error(action: string, error: unknown): LockError {
    const failure = storeError(this.kind, this.address, action, error);
    const state = (error as { code?: unknown } | null)?.code;
    if (typeof state === 'string' && MISSING_SCHEMA.has(state)) {
      failure.message += `: the schema of prefix ${JSON.stringify(this.#prefix)} is missing or out of date (run migrationSql(prefix), or let the store migrate on first use)`;
    }
    return failure;
  }

  /** The schema, checked once (one read) and created when missing; a failed check is tried again on the next call. */
  #prepare(): Promise<void> {
    this.#ready ??= (async () => {
      if (this.#migrate) {
        const { rows } = await this.#query({ text: this.#sql.version.text, values: [this.#names.locks] });
        // One simple-protocol query: its statements run as one transaction.
        if (rows[0]?.version !== SCHEMA_VERSION) await this.#query({ text: migrationSql(this.#prefix) });
      }
      this.#prepared = true;
    })().catch((error: unknown) => {
      this.#ready = undefined;
      if (isUnavailable(error)) this.#lastError = error;
      throw this.#error('migrate', error);
    });
    return this.#ready;
  }

  /** Send one statement: named while named ones are kept. */
  #send({ name, text }: Statement, values: readonly unknown[]): Promise<Result> {
    return this.#query(name !== undefined && this.#named ? { name, text, values } : { text, values });
  }

  /**
   * Run one statement and decode its rows: the one path of every call. A refused name switches the
   * store to unnamed statements for good, and the call is sent again unnamed.
   */
  #call<T>(
    action: string,
    statement: Statement,
    values: readonly unknown[],
    decode: (rows: Row[], reply: Reply, count: number) => T | Promise<T>,
  ): Promise<T> {
    const sent = this.#prepared
      ? this.#send(statement, values)
      : this.#prepare().then(() => this.#send(statement, values));
    return sent.then(
      ({ rows, rowCount }) => {
        this.#lastError = undefined;
        return decode(rows, new Reply(this.kind, action), rowCount ?? rows.length);
      },
      (error: unknown) => {
        if (statement.name !== undefined && NOT_PREPARED.has((error as { code?: unknown } | null)?.code as string)) {
          this.#named = false;
          return this.#call(action, { text: statement.text }, values, decode);
        }
        if (isUnavailable(error)) this.#lastError = error;
        throw this.#error(action, error);
      },
    );
  }

  /**
   * A lock is taken by the UPDATE alone (take) when this store's last release of the name found
   * nobody behind it; when that takes nothing, or for any other name, the attempt function decides
   * (with acquire's UPDATE in front for a caller not queued already, as one statement).
   */
  acquire(name: string, r: Port.AcquireRequest): Promise<Port.AcquireReply | Port.HeldAsReply> {
    const { instance, fenceRetention, waiterLease } = this.#settings;
    const minFence = r.minFence ?? 0;
    const values = [name, r.owner, r.ttl, minFence, queueCode(r.queue), instance, fenceRetention, waiterLease];
    if (r.queue === 'member') return this.#attempt(this.#sql.attempt, values);
    if (!this.#quiet.has(name)) return this.#attempt(this.#sql.acquire, values);
    const taken = [name, r.owner, r.ttl, minFence, instance, fenceRetention];
    return this.#call('acquire', this.#sql.take, taken, (rows, reply) => {
      if (rows.length > 0) return { acquired: true, fence: reply.int(reply.row(rows).reply, 'reply') };
      this.#quiet.forget(name);
      return this.#attempt(this.#sql.attempt, values);
    });
  }

  /** The attempt function's reply: '<token>', '-<ms left>' or '^<limit>' (schema.ts). */
  #attempt(statement: Statement, values: unknown[]): Promise<Port.AcquireReply | Port.HeldAsReply> {
    return this.#call('acquire', statement, values, (rows, reply) => {
      const text = reply.text(reply.row(rows).reply, 'reply');
      const mark = text.charCodeAt(0);
      if (mark === MINUS) return { acquired: false, pttl: reply.int(text.slice(1), 'reply') };
      if (mark === CARET) return { acquired: false, heldAs: reply.int(text.slice(1), 'reply') };
      return { acquired: true, fence: reply.int(text, 'reply') };
    });
  }

  #channelOf(name: string): string {
    return this.#channels.get(name);
  }

  /** The store's hand-on, as every call that frees a lock passes it: reservation, announce, the lock's channel. */
  #handOnArgs(name: string): unknown[] {
    const { reservation, announce } = this.#settings.handOn;
    return [reservation, announce, this.#channelOf(name)];
  }

  /**
   * A lease is freed by the UPDATE alone (free) when this store's last release of the name found
   * nobody behind it; when that frees nothing, the release function decides. Any other release
   * is one statement that does both, and tells whether anyone was behind (then the name is kept
   * off the quiet list until a release finds nobody again).
   */
  release(name: string, owner: string): Promise<Port.ReleaseReply> {
    const values = [name, owner, ...this.#handOnArgs(name)];
    if (this.#settings.handOn.announce || !this.#quiet.has(name)) {
      return this.#call('release', this.#sql.release, values, (rows, reply) => {
        const text = reply.row(rows).reply;
        if (text !== 'freed') return reply.oneOf(text, 'reply', RELEASE_REPLIES);
        this.#quiet.note(name);
        return 'released';
      });
    }
    return this.#call('release', this.#sql.free, [name, owner], (_rows, _reply, freed) => {
      if (freed > 0) return 'released';
      this.#quiet.forget(name);
      return this.#call('release', this.#sql.releaseAlone, values, (rows, reply) =>
        reply.oneOf(reply.row(rows).reply, 'reply', RELEASE_REPLIES),
      );
    });
  }

  extend(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#call('extend', this.#sql.extend, [name, owner, ttl], (rows, reply) =>
      reply.oneOf(reply.row(rows).reply, 'reply', EXTEND_REPLIES),
    );
  }

  leave(name: string, owner: string): Promise<void> {
    const values = [name, owner, ...this.#handOnArgs(name)];
    return this.#call('leave', this.#sql.leave, values, (rows, reply) => {
      reply.bool(reply.row(rows).reply, 'reply');
    });
  }

  inspect(name: string): Promise<Port.LockState> {
    return this.#call('inspect', this.#sql.inspect, [name], (rows, reply) => {
      const row = reply.row(rows);
      // Shared holds' mark ('^<limit>') is no owner: inspectShared lists them.
      const mark = typeof row.owner === 'string' && reply.holder(row.owner, 'owner').shared !== null;
      const held = reply.flag(row.live, 'live') && !reply.flag(row.reserved, 'reserved') && !mark;
      const counted = reply.flag(row.counted, 'counted');
      const releasedBy = counted ? reply.textOrNull(row.released_by, 'released_by') : null;
      const fence = counted ? reply.int(row.fence, 'fence') : 0;
      const holder =
        held && counted && releasedBy === null
          ? {
              token: fence,
              takenAt: reply.int(row.taken_at, 'taken_at'),
              instance: reply.textOrNull(row.instance, 'instance') ?? '',
            }
          : null;
      return {
        owner: held ? reply.text(row.owner, 'owner') : null,
        pttl: held ? reply.int(row.pttl, 'pttl') : -2,
        fence,
        holder,
        releasedBy,
      };
    });
  }

  acquireShared(name: string, r: Port.SharedRequest): Promise<Port.SharedAcquireReply> {
    const { instance, fenceRetention, waiterLease } = this.#settings;
    const values = [
      name,
      r.owner,
      r.ttl,
      r.limit,
      queueCode(r.queue),
      instance,
      fenceRetention,
      waiterLease,
      ...this.#handOnArgs(name),
    ];
    return this.#call('acquire-shared', this.#sql.acquireShared, values, (rows, reply): Port.SharedAcquireReply => {
      const row = reply.row(rows);
      const code = reply.int(row.code, 'code');
      const value = reply.int(row.value, 'value');
      if (code === 1) return { acquired: true, fence: value };
      if (code === 0) return { acquired: false, pttl: value };
      if (code === -1) return { acquired: false, heldAs: value };
      throw reply.bad(`code = ${code}`);
    });
  }

  extendShared(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#call('extend-shared', this.#sql.extendShared, [name, owner, ttl], (rows, reply) =>
      reply.oneOf(reply.row(rows).reply, 'reply', EXTEND_REPLIES),
    );
  }

  releaseShared(name: string, owner: string): Promise<Port.ReleaseReply> {
    const values = [name, owner, ...this.#handOnArgs(name)];
    return this.#call('release-shared', this.#sql.releaseShared, values, (rows, reply) =>
      reply.oneOf(reply.row(rows).reply, 'reply', RELEASE_REPLIES),
    );
  }

  leaveShared(name: string, owner: string): Promise<void> {
    const values = [name, owner, ...this.#handOnArgs(name)];
    return this.#call('leave-shared', this.#sql.leaveShared, values, (rows, reply) => {
      reply.bool(reply.row(rows).reply, 'reply');
    });
  }

  inspectShared(name: string): Promise<Port.SharedState> {
    return this.#call('inspect-shared', this.#sql.inspectShared, [name], (rows, reply): Port.SharedState => {
      const row = reply.row(rows);
      const live = reply.flag(row.live, 'live');
      const owner = live ? reply.textOrNull(row.owner, 'owner') : null;
      if (owner !== null && reply.flag(row.reserved, 'reserved')) {
        return { mode: 'free', limit: null, holds: [], reserved: owner.split(' ') };
      }
      const limit = owner === null ? null : reply.holder(owner, 'owner').shared;
      if (limit === null) {
        return { mode: owner === null ? 'free' : 'exclusive', limit: null, holds: [], reserved: [] };
      }
      return {
        mode: limit === 0 ? 'shared' : 'semaphore',
        limit: limit === 0 ? null : limit,
        ...reply.holds(row.holds),
      };
    });
  }

  claimTick(name: string, r: Port.ClaimRequest): Promise<Port.ClaimReply> {
    const { fenceRetention } = this.#settings;
    const values = [name, r.owner, r.ttl, r.tick, r.instance, r.historyLimit, fenceRetention, r.clockTolerance];
    return this.#call('claim-tick', this.#sql.claimTick, values, (rows, reply): Port.ClaimReply => {
      const row = reply.row(rows);
      const code = reply.int(row.code, 'code');
      const value = reply.int(row.value, 'value');
      if (code === 1) return { claimed: true, fence: reply.int(row.token, 'token'), startedAt: value };
      if (code === 0) return { claimed: false, reason: 'locked', pttl: value };
      if (code === -1) return { claimed: false, reason: 'already-ran', lastTick: value };
      if (code === -2) return { claimed: false, reason: 'clock-skew', now: value };
      throw reply.bad(`code = ${code}`);
    });
  }

  finishTick(name: string, r: Port.FinishRequest): Promise<Port.FinishReply> {
    const values = [
      name,
      r.owner,
      r.fence,
      r.startedAt,
      r.outcome,
      r.error,
      r.lockAtLeastFor,
      ...this.#handOnArgs(name),
    ];
    return this.#call('finish-tick', this.#sql.finishTick, values, (rows, reply): Port.FinishReply => {
      const row = reply.row(rows);
      const code = reply.int(row.code, 'code');
      if (code === 1) return { lease: 'kept', remaining: reply.int(row.remaining, 'remaining') };
      if (code === 2) return { lease: 'released' };
      if (code === 0) return { lease: 'expired' };
      if (code === -1) return { lease: 'not-owner' };
      throw reply.bad(`code = ${code}`);
    });
  }

  readJob(name: string, limit: number): Promise<Port.JobState> {
    return this.#call('read-job', this.#sql.readJob, [name, Math.max(0, limit)], (rows, reply) => {
      const row = reply.row(rows);
      return {
        held: reply.bool(row.held, 'held'),
        fence: reply.int(row.fence, 'fence'),
        lastTick: reply.intOrNull(row.tick, 'tick'),
        runs: reply.runs(row.runs),
      };
    });
  }

  forgetJob(name: string): Promise<void> {
    return this.#call('forget-job', this.#sql.forgetJob, [name], () => undefined);
  }

  /** Where lock `name` lives: its row of the locks table. */
  locate(name: string): string {
    return `${this.#names.locks} row ${JSON.stringify(name)}`;
  }

  forceRelease(name: string): Promise<Port.ForceReleaseReply> {
    const values = [name, ...this.#handOnArgs(name)];
    return this.#call('force-release', this.#sql.forceRelease, values, (rows, reply): Port.ForceReleaseReply => {
      const row = reply.row(rows);
      if (!reply.bool(row.released, 'released')) return { result: 'not-held' };
      const token = reply.intOrNull(row.holder_token, 'holder_token');
      const holder =
        token === null
          ? null
          : {
              token,
              takenAt: reply.int(row.holder_taken_at, 'holder_taken_at'),
              instance: reply.textOrNull(row.holder_instance, 'holder_instance') ?? '',
            };
      return {
        result: 'released',
        owner: reply.text(row.holder, 'holder'),
        holder,
        woken: reply.textOrNull(row.woken, 'woken'),
      };
    });
  }

  queued(name: string, limit: number): Promise<Port.QueueState> {
    return this.#call('queued', this.#sql.queued, [name, Math.max(0, limit)], (rows, reply) => {
      const row = reply.row(rows);
      const owner = reply.textOrNull(row.reserved, 'reserved');
      return {
        count: reply.int(row.count, 'count'),
        first: reply.texts(row.first, 'first'),
        reserved: owner === null ? null : { owner, pttl: reply.int(row.pttl, 'pttl') },
      };
    });
  }

  /**
   * Held locks whose names match the glob, a page of `count` names (by name order) per statement.
   * The glob is matched here, with Redis's semantics (as the memory store matches it); its literal
   * start narrows what the database returns.
   */
  async *scanLocks(match: string, count: number): AsyncGenerator<string> {
    const matches = globMatcher(match);
    const start = literalStart(match);
    const page = Math.min(Math.max(1, Math.floor(count) || 1), 1_000);
    let after = '';
    for (;;) {
      const names = await this.#call('scan-locks', this.#sql.scan, [after, start, page], (rows, reply) =>
        rows.map((row) => reply.text(row.name, 'name')),
      );
      for (const name of names) if (matches(name)) yield name;
      const last = names.at(-1);
      if (last === undefined || names.length < page) return;
      after = last;
    }
  }

  async watch(name: string, onHandOff: (handOff: Port.HandOff) => void): Promise<() => void> {
    return this.#openHub().subscribe(this.#channelOf(name), onHandOff);
  }

  /** The listening connection and its hub, made on the first watch; the session is opened on the first LISTEN. */
  #openHub(): ChannelHub<Port.HandOff> {
    if (this.#hub) return this.#hub;
    const listener = new Listener(this.#listenOn, {
      // Each payload is decoded once, however many waiters of this store hear it.
      deliver: (channel, payload) => hub.deliver(channel, decodeHandOff(payload)),
      onError: this.#onError,
      describe: (action, error) => this.#error(action, error),
    });
    // The session is held only while someone waits: an idle one would keep a pool's connection.
    const hub: ChannelHub<Port.HandOff> = new ChannelHub<Port.HandOff>(
      { subscribe: (ch) => listener.listen(ch), unsubscribe: (ch) => listener.unlisten(ch) },
      this.#onError,
      () => listener.idle(),
    );
    this.#listener = listener;
    this.#hub = hub;
    return hub;
  }

  /** Stops listening; never ends the caller's pool or client. */
  async close(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    this.#hub?.clear();
    this.#hub = undefined;
    await listener?.close();
  }
}
