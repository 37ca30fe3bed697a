import { now } from '../../core/clock.js';
import { ErrorCode, LockError, StoreUnavailableError } from '../../core/errors.js';
import { newOwnerToken } from '../../core/owner.js';
import { ChannelHub } from '../channel-hub.js';
import type * as Port from '../port.js';
import { STORE } from '../port.js';
import { QuietNames } from '../quiet-names.js';
import { storeSettings } from '../settings.js';
import {
  describeError,
  isReplyError,
  isUnavailableReply,
  type RedisConnection,
  type Subscriber,
} from './connection.js';
import { DirectGrants } from './direct-grants.js';
import { infoField } from './info.js';
import { lockKeys, nameFromLockKey } from './keys.js';
import { decodeHandOff, isChallenge } from './replies.js';
import { ScriptRunner } from './run-script.js';
import { type BoundArgs, boundArgs, SCRIPTS, type ScriptCall } from './scripts.js';

/**
 * Turn whatever a client library threw into a LockError that says what happened: an error reply
 * from a live server is a store error (never "unavailable", so `whenUnavailable: 'run'` cannot
 * run work unlocked because of, say, OOM); a connection failure is unavailable, with the client's
 * last connection error as its cause.
 */
export function storeError(connection: RedisConnection, action: string, error: unknown): LockError {
  if (error instanceof LockError) return error;
  if (isReplyError(error) && !isUnavailableReply(error)) {
    return new LockError(ErrorCode.STORE_ERROR, `${connection.kind}: ${action} failed: ${error.message}`, {
      cause: error,
    });
  }
  if (isReplyError(error)) {
    return new StoreUnavailableError(`${connection.kind}: ${action} failed: ${error.message}`, { cause: error });
  }
  const last = connection.lastError();
  const cause = last ?? error;
  const detail = describeError(error);
  const why =
    last === undefined || last === error ? detail : `${detail} (last connection error: ${describeError(last)})`;
  return new StoreUnavailableError(`${connection.kind}: ${action} on ${connection.address} failed: ${why}`, { cause });
}

/** A prefix as a literal inside a SCAN pattern: glob characters in it match only themselves. */
function globLiteral(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * A Redis store's settings (see StoreSettings; a Leasehold gives all of them, a store made on its
 * own takes the defaults for the rest: storeSettings), and where background failures go.
 */
export type RedisStoreOptions = Partial<Port.StoreSettings> & {
  /** Where background failures go (the subscriber connection). */
  readonly onError?: (error: unknown) => void;
};

/** `value`, once the promise steps now due have run (setImmediate). */
function afterThisTurn<T>(value: T): Promise<T> {
  return new Promise((resolve) => setImmediate(resolve, value));
}

/**
 * The ports on Redis, for one instance's settings: every method is one script (see scripts.ts,
 * where each is declared with its keys, arguments and reply), run through one runner.
 */
export class RedisStore
  implements Port.Store, Port.FenceStore, Port.JobStore, Port.AdminStore, Port.ConfigStore, Port.SharedStore
{
  readonly [STORE] = true;
  readonly kind: string;
  readonly #prefix: string;
  readonly #connection: RedisConnection;
  readonly #scripts: ScriptRunner;
  readonly #onError: (error: unknown) => void;
  /** The publish command once known: standalone is always PUBLISH, a cluster asks its version once. */
  #publish: string | undefined;
  #publishing: Promise<string> | undefined;
  #subscriber: Subscriber | undefined;
  #hub: ChannelHub<Port.HandOff> | undefined;
  /**
   * This store's mark on the waiters it queues: a release through this same store may grant the
   * lock to one of them outright (they are this instance's, so alive), and tell it from the reply.
   */
  readonly #room = newOwnerToken().slice(0, 12);
  /** Locks a release here granted outright to this instance's waiters, until each waiter's next call. */
  readonly #grants = new DirectGrants();
  /** Quiet names (store/quiet-names.ts): taken with one key, freed by free.lua before release.lua. */
  readonly #quiet = new QuietNames();
  /** The ARGV every call sends from the store's settings (instance, retention, hand-on, room). */
  readonly #bound: BoundArgs;

  constructor(connection: RedisConnection, { onError = () => {}, ...given }: RedisStoreOptions = {}) {
    const settings = storeSettings(given);
    this.#connection = connection;
    this.#prefix = settings.prefix;
    this.#bound = boundArgs(settings, this.#room);
    this.#scripts = new ScriptRunner(connection);
    this.kind = connection.kind;
    this.#onError = onError;
    if (!connection.cluster) this.#publish = 'PUBLISH';
  }

  /** The last connection error of the client, for a call that got no answer in time. */
  lastError(): unknown {
    return this.#connection.lastError();
  }

  get address(): string {
    return this.#connection.address;
  }

  /** Cluster on Redis ≥ 7 publishes on the lock's own shard (SPUBLISH); elsewhere plain PUBLISH. */
  #publishCommand(): Promise<string> {
    if (this.#publish !== undefined) return Promise.resolve(this.#publish);
    this.#publishing ??= this.#connection.serverMajorVersion().then(
      (major) => {
        this.#publish = major >= 7 ? 'SPUBLISH' : 'PUBLISH';
        return this.#publish;
      },
      (error: unknown) => {
        this.#publishing = undefined;
        throw storeError(this.#connection, 'INFO server', error);
      },
    );
    return this.#publishing;
  }

  /**
   * Run `script` on lock `name` and decode its reply: the one path of every call. A promise chain,
   * not an async function: this is on every lock operation's path.
   */
  #call<Request, Reply, Out = Reply>(
    script: ScriptCall<Request, Reply>,
    name: string,
    request: Request,
    then?: (reply: Reply) => Out | Promise<Out>,
  ): Promise<Out> {
    // A client whose reconnections are being refused would only queue the call: say so at once.
    const down = this.#connection.down();
    if (down) {
      const error = new StoreUnavailableError(`${this.kind}: ${script.name} failed: ${down.message}`, {
        cause: down.cause ?? down,
      });
      return Promise.reject(error);
    }
    const publish = script.handsOn ? this.#publish : '';
    if (publish === undefined) return this.#publishCommand().then(() => this.#call(script, name, request, then));
    const { keys, args } = script.input(this.#prefix, name, request, publish, this.#bound);
    const decode = then === undefined ? script.reply.decode : (raw: unknown) => then(script.reply.decode(raw));
    return this.#scripts.run(script, keys, args).then(decode as (raw: unknown) => Out, (error: unknown) => {
      throw storeError(this.#connection, script.name, error);
    });
  }

  /**
   * A queued waiter's retry answers from a lock a release here granted it outright, if one did
   * (the lease counts from before that release was sent), without a call. A grant its retry took
   * from the server instead (sent before the release's reply came) drops the one kept.
   */
  acquire(name: string, request: Port.AcquireRequest): Promise<Port.AcquireReply | Port.HeldAsReply> {
    if (request.queue === 'join' && this.#quiet.has(name)) return this.#acquireQuiet(name, request);
    if (request.queue !== 'member') return this.#call(SCRIPTS.acquire, name, request);
    const kept = this.#grants.take(name, request.owner);
    if (kept !== undefined) return Promise.resolve({ acquired: true, fence: kept.fence, since: kept.since });
    return this.#call(SCRIPTS.acquire, name, request, (reply) => {
      if (reply.acquired) this.#grants.take(name, request.owner);
      return reply;
    });
  }

  /**
   * A quiet name (store/quiet-names.ts) is asked for as by a caller that does not queue: one key,
   * no queue's arguments. Refused, it is asked for again as the caller asked, which queues it.
   */
  #acquireQuiet(name: string, request: Port.AcquireRequest): Promise<Port.AcquireReply | Port.HeldAsReply> {
    const { owner, ttl, minFence } = request;
    const alone: Port.AcquireRequest = minFence === undefined ? { owner, ttl } : { owner, ttl, minFence };
    return this.#call(SCRIPTS.acquire, name, alone, (reply) => {
      if (reply.acquired || 'heldAs' in reply) return reply;
      this.#quiet.forget(name);
      return this.#call(SCRIPTS.acquire, name, request);
    });
  }

  /**
   * A quiet name is freed by free.lua (one key, the owner); whatever that cannot settle, and any
   * other name, goes through release.lua (#release).
   */
  release(name: string, owner: string): Promise<Port.ReleaseReply> {
    const sentAt = now();
    // A holder releasing has no use for a grant still kept for it (its own attempt took the lock).
    if (this.#grants.size > 0) this.#grants.take(name, owner);
    if (this.#quiet.has(name)) {
      return this.#call(SCRIPTS.free, name, owner, (freed) => {
        if (freed) return 'released';
        this.#quiet.forget(name);
        return this.#release(name, owner, sentAt);
      });
    }
    return this.#release(name, owner, sentAt);
  }

  /**
   * release.lua: it frees, hands on, or says why not; a release that told nobody (woke no waiter,
   * announced nothing) notes the name quiet. The reply names the waiters the release woke (or
   * carries the announcement, ''): this instance's own are woken from it at once, rather than when
   * the publication comes back on the subscriber connection (which is then its echo, and dropped).
   * A waiter that queued through this store may have been granted the lock outright: kept for its
   * next acquire. If it does not wait here (it gave up meanwhile, and its leave did not reach the
   * server), the grant is given back at once, so it costs the others no more than a reservation
   * would. A direct grant whose message names only waiters that queued here is not published
   * (`published` false): told from the reply alone, with no echo to drop. A release that woke a
   * waiter here answers on the next turn of the event loop: the waiter's way to the lock (promise
   * steps only) runs first, rather than interleaved with whatever the releasing caller does next.
   */
  #release(name: string, owner: string, sentAt: number): Promise<Port.ReleaseReply> {
    return this.#call(SCRIPTS.release, name, owner, ({ outcome, told, granted, published }) => {
      if (told.length === 0) {
        if (outcome === 'released') this.#quiet.note(name);
        return outcome;
      }
      const hub = this.#hub;
      const channel = lockKeys(this.#prefix, name).channel;
      let woke = false;
      for (const [i, message] of told.entries()) {
        if (i > 0 || granted === null) {
          if (hub?.deliverOnce(channel, message, decodeHandOff)) woke = true;
          continue;
        }
        const handOff = decodeHandOff(message);
        const woken = handOff.woken as string;
        const here = published
          ? hub?.deliverOnce(channel, message, () => handOff, true)
          : hub?.deliver(channel, handOff);
        if (here) {
          this.#grants.keep(name, woken, { fence: granted, since: sentAt });
          woke = true;
        } else {
          this.release(name, woken).catch(this.#onError);
        }
      }
      return woke ? afterThisTurn(outcome) : outcome;
    });
  }

  /** A waiter that leaves holding a grant kept here gives it back on the server (leave.lua). */
  leave(name: string, owner: string): Promise<void> {
    if (this.#grants.size > 0) this.#grants.take(name, owner);
    return this.#call(SCRIPTS.leave, name, owner);
  }

  extend(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#call(SCRIPTS.extend, name, { owner, ttl });
  }

  acquireShared(name: string, request: Port.SharedRequest): Promise<Port.SharedAcquireReply> {
    return this.#call(SCRIPTS.acquireShared, name, request);
  }

  extendShared(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#call(SCRIPTS.extendShared, name, { owner, ttl });
  }

  releaseShared(name: string, owner: string): Promise<Port.ReleaseReply> {
    return this.#call(SCRIPTS.releaseShared, name, owner);
  }

  leaveShared(name: string, owner: string): Promise<void> {
    return this.#call(SCRIPTS.leaveShared, name, owner);
  }

  inspectShared(name: string): Promise<Port.SharedState> {
    return this.#call(SCRIPTS.inspectShared, name, undefined);
  }

  raiseFence(name: string, fence: number): Promise<number> {
    return this.#call(SCRIPTS.raiseFence, name, fence);
  }

  inspect(name: string): Promise<Port.LockState> {
    return this.#call(SCRIPTS.inspect, name, undefined);
  }

  claimTick(name: string, request: Port.ClaimRequest): Promise<Port.ClaimReply> {
    return this.#call(SCRIPTS.claimTick, name, request);
  }

  finishTick(name: string, request: Port.FinishRequest): Promise<Port.FinishReply> {
    return this.#call(SCRIPTS.finishTick, name, request);
  }

  readJob(name: string, limit: number): Promise<Port.JobState> {
    return this.#call(SCRIPTS.readJob, name, limit);
  }

  async forgetJob(name: string): Promise<void> {
    await this.#call(SCRIPTS.forgetJob, name, undefined);
  }

  async replicate(
    name: string,
    request: Port.ReplicationRequest,
  ): Promise<{ readonly replicas: number; readonly local: boolean }> {
    const key = lockKeys(this.#prefix, name).lock;
    const { replicas, timeout } = request;
    const aof = request.durability === 'aof';
    const args = aof ? ['WAITAOF', 1, replicas, timeout] : ['WAIT', replicas, timeout];
    let reply: unknown;
    try {
      reply = await this.#connection.alongside(key, args);
    } catch (error) {
      throw storeError(this.#connection, String(args[0]), error);
    }
    if (!aof) return { replicas: Number(reply), local: true };
    const [local, confirmed] = Array.isArray(reply) ? reply : [0, 0];
    return { replicas: Number(confirmed), local: Number(local) >= 1 };
  }

  /** A call got no answer in time: on a Cluster, the client reads the topology again. */
  unanswered(): void {
    this.#connection.refreshTopology?.();
  }

  /** The lock's Redis key, for operators. */
  locate(name: string): string {
    return lockKeys(this.#prefix, name).lock;
  }

  forceRelease(name: string): Promise<Port.ForceReleaseReply> {
    return this.#call(SCRIPTS.forceRelease, name, undefined);
  }

  queued(name: string, limit: number): Promise<Port.QueueState> {
    return this.#call(SCRIPTS.queued, name, limit);
  }

  async *scanLocks(match: string, count: number): AsyncGenerator<string> {
    if (this.#connection.cluster) {
      // A keyless script runs on whichever node the client picks: it would list one shard's locks.
      throw new LockError(
        ErrorCode.STORE_ERROR,
        `${this.kind}: listing locks is supported on a standalone server only`,
      );
    }
    const pattern = `${globLiteral(this.#prefix)}:{${match}}`;
    // SCAN may return a key twice across pages; callers get each name once.
    const seen = new Set<string>();
    let cursor = '0';
    do {
      const page = await this.#call(SCRIPTS.scanLocks, '', { cursor, pattern, count });
      cursor = page.cursor;
      for (const key of page.keys) {
        // A lock key ends with the brace that closes its name; the fencing counter, queue,
        // reservation, markers, tick marker and history all end with their own suffix.
        const name = nameFromLockKey(this.#prefix, key);
        if (name === null || seen.has(name)) continue;
        seen.add(name);
        yield name;
      }
    } while (cursor !== '0');
  }

  async evictionPolicies(): Promise<readonly (string | null)[]> {
    let infos: string[];
    try {
      infos = await this.#connection.infoOfMasters('memory');
    } catch (error) {
      throw storeError(this.#connection, 'INFO memory', error);
    }
    return infos.map((info) => infoField(info, 'maxmemory_policy') ?? null);
  }

  async watch(name: string, onHandOff: Port.HandOffListener): Promise<() => void> {
    const hub = this.#hub ?? (await this.#openHub());
    const stop = await hub.subscribe(lockKeys(this.#prefix, name).channel, onHandOff);
    // Dropping a kept grant is always safe: its waiter's next acquire finds the lock its own.
    return () => {
      stop();
      this.#grants.forget(name);
    };
  }

  /** The subscriber connection and its hub, opened on the first watch (once for concurrent ones). */
  async #openHub(): Promise<ChannelHub<Port.HandOff>> {
    const sharded = (await this.#publishCommand()) === 'SPUBLISH';
    if (this.#hub) return this.#hub;
    // Each message is decoded once, however many waiters of this instance hear it. One that names
    // waiters may have been delivered from a release's reply already (see release); a challenge
    // never is, and the same one may come again at once, so each is delivered.
    const subscriber = this.#connection.openSubscriber(sharded, (ch, message) =>
      message === '' || isChallenge(message)
        ? hub.deliver(ch, decodeHandOff(message))
        : hub.deliverOnce(ch, message, decodeHandOff),
    );
    this.#subscriber = subscriber;
    // The subscriber connection lives only while someone waits: an idle one would keep the
    // process alive after the caller closed its own client.
    const hub: ChannelHub<Port.HandOff> = new ChannelHub<Port.HandOff>(
      {
        subscribe: (ch) =>
          subscriber.subscribe(ch).catch((e: unknown) => Promise.reject(storeError(this.#connection, 'SUBSCRIBE', e))),
        // The last channel's unsubscribe may still be on its way when the connection closes (the
        // hub idle, below, or the store closed), which drops every subscription anyway: failing
        // then is no failure.
        unsubscribe: (ch) =>
          subscriber.unsubscribe(ch).catch((e: unknown) => {
            if (this.#subscriber === subscriber) throw e;
          }),
      },
      this.#onError,
      () => {
        if (this.#hub !== hub) return;
        this.#hub = undefined;
        this.#subscriber = undefined;
        subscriber.close().catch(this.#onError);
      },
    );
    this.#hub = hub;
    return hub;
  }

  async close(): Promise<void> {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    this.#hub?.clear();
    this.#hub = undefined;
    this.#connection.dispose();
    if (subscriber) await subscriber.close();
  }
}
