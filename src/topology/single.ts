import { now, validUntil } from '../core/clock.js';
import type { Attempt, ExtendOutcome, HandOffListener, LockEngine } from '../core/engine.js';
import { type CurrentHolder, NotReplicatedError } from '../core/errors.js';
import type { Primitive } from '../primitives/primitive.js';
import { bounded, timeoutsOf } from '../store/bounded.js';
import type { EvictionCheck } from '../store/eviction-check.js';
import type { ReplicationRequest, ReplicationStore, Store } from '../store/port.js';

/** Replica acknowledgement after each grant and extension, and what a short one does. */
export interface Replication extends ReplicationRequest {
  /** `fail`: give the grant back and throw NotReplicatedError; `keep`: keep it, flagged on the Lock. */
  readonly whenShort: 'fail' | 'keep';
}

export interface SingleOptions {
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
  /** The eviction-policy check made before the first acquisition. */
  readonly eviction: EvictionCheck;
  /** Wait for replicas after each grant and extension (the store must offer ReplicationStore). */
  readonly replication?: Replication | undefined;
}

/** A validity window shorter than this is no lease at all: it is given back rather than handed out. */
const LEAST_VALIDITY = 1;

/** Whether a lease valid until `until` (monotonic) can still be handed out or kept. */
function usable(until: number): boolean {
  return until - now() >= LEAST_VALIDITY;
}

/**
 * One server (a standalone Redis, a Sentinel's master, a Cluster, the memory store) running any
 * primitive: each step is one call, bounded by `commandTimeout`; a grant or an extension confirmed
 * too late to leave validity is given back; a grant that lands after we gave up is freed, and a
 * refusal that lands then, having queued us, leaves the queue.
 */
export class Single implements LockEngine {
  readonly store: Store;
  readonly #primitive: Primitive;
  readonly #owned: boolean;
  readonly #options: SingleOptions;

  constructor(primitive: Primitive, store: Store, owned: boolean, options: SingleOptions) {
    this.#primitive = primitive;
    this.store = store;
    this.#owned = owned;
    this.#options = options;
  }

  #bounded<T>(promise: Promise<T>, action: string): Promise<T> {
    return bounded(this.store, promise, action, this.#options.commandTimeout);
  }

  /** The eviction-policy check before an acquisition: undefined once it passed (or only warns). */
  gate(): Promise<void> | undefined {
    return this.#options.eviction.gate();
  }

  async attempt(name: string, owner: string, ttl: number, tries: number, queue = false): Promise<Attempt> {
    const gate = this.gate();
    if (gate) await gate;
    const sentAt = now();
    const o = this.#options;
    // Only a caller refused before is in the queue: the first attempt has nothing to leave.
    const pending = this.#primitive.acquire(this.store, name, {
      owner,
      ttl,
      queue: queue ? (tries === 0 ? 'join' : 'member') : undefined,
    });
    let reply: Awaited<typeof pending>;
    try {
      reply = await this.#bounded(pending, 'acquire');
    } catch (error) {
      pending.then((late) => this.#disown(name, owner, late.acquired, queue)).catch(() => undefined);
      throw error;
    }
    if (!reply.acquired) return { acquired: false, retryIn: reply.pttl };
    // A lock a release granted this waiter outright began before this call: it counts from then.
    const until = validUntil(reply.since ?? sentAt, ttl, o.driftFactor, o.driftConstant);
    if (!usable(until)) {
      // The grant answered too late to leave any validity: no caller may hold it. Give it back (the
      // next waiter gets it) and count the attempt as refused, so a waiting caller tries again.
      await this.release(name, owner).catch(() => undefined);
      return { acquired: false, retryIn: 0 };
    }
    const replication = o.replication;
    if (!replication) return { acquired: true, fencingToken: reply.fence, validUntil: until };
    let replicas: number;
    try {
      replicas = await this.#replicated(name, replication, 'acquire');
    } catch (error) {
      await this.release(name, owner).catch(() => undefined);
      throw error;
    }
    if (!usable(until)) {
      // The replicas took the rest of the validity: nothing left to hand out.
      await this.release(name, owner).catch(() => undefined);
      return { acquired: false, retryIn: 0 };
    }
    return { acquired: true, fencingToken: reply.fence, validUntil: until, replicas };
  }

  /**
   * An attempt's answer that came after we gave up is nobody's: a grant is freed, and a refusal
   * that queued us leaves the queue (else the entry waits out waiterLease, and a release may
   * reserve the lock for it).
   */
  async #disown(name: string, owner: string, acquired: boolean, queued: boolean): Promise<void> {
    if (acquired) await this.#primitive.release(this.store, name, owner);
    else if (queued) await this.#primitive.leave(this.store, name, owner);
  }

  /**
   * Wait for the replicas after a write to `name`: how many confirmed. A short count throws
   * NotReplicatedError unless `whenShort` keeps it.
   */
  async #replicated(name: string, replication: Replication, operation: 'acquire' | 'extend'): Promise<number> {
    const store = this.store as Store & ReplicationStore;
    const ms = this.#options.commandTimeout + replication.timeout;
    const wait = bounded(store, store.replicate(name, replication), 'replicate', ms);
    const { replicas, local } = await wait;
    const short = replicas < replication.replicas || !local;
    if (short && replication.whenShort === 'fail') {
      const detail = local ? '' : ' (the server has not written it to its own AOF)';
      throw new NotReplicatedError(
        name,
        operation,
        replicas,
        replication.replicas,
        `${detail} within ${replication.timeout} ms`,
      );
    }
    return replicas;
  }

  /** Who holds `name` now, for the message of a lease lost to another owner; undefined if unknown. */
  #holder(name: string): Promise<CurrentHolder | undefined> {
    return this.#bounded(this.store.inspect(name), 'inspect').then(
      (state) => (state.owner === null ? undefined : (state.holder ?? undefined)),
      () => undefined,
    );
  }

  async extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome> {
    const sentAt = now();
    const reply = await this.#bounded(this.#primitive.extend(this.store, name, owner, ttl), 'extend');
    if (reply === 'not-owner') return { extended: false, reason: reply, holder: await this.#holder(name) };
    if (reply !== 'extended') return { extended: false, reason: reply };
    const { driftFactor, driftConstant } = this.#options;
    const until = validUntil(sentAt, ttl, driftFactor, driftConstant);
    if (!usable(until)) {
      // Confirmed too late to count: the lease is lost to us, so free it for others at once (the
      // lease's own timer has ended it here already; the call is awaited so none outlives close()).
      await this.release(name, owner).catch(() => undefined);
      return { extended: false, reason: 'validity-elapsed' };
    }
    // A short acknowledgement of an extension throws (the watchdog retries until the validity ends).
    if (this.#options.replication) await this.#replicated(name, this.#options.replication, 'extend');
    return { extended: true, validUntil: until };
  }

  release(name: string, owner: string): Promise<boolean> {
    // A promise chain, not an async function: on every lock's path.
    try {
      return this.#bounded(this.#primitive.release(this.store, name, owner), 'release').then(isReleased);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async leave(name: string, owner: string): Promise<void> {
    await this.#bounded(this.#primitive.leave(this.store, name, owner), 'leave');
  }

  async watch(name: string, onHandOff: HandOffListener): Promise<() => void> {
    const pending = this.store.watch(name, onHandOff);
    try {
      return await this.#bounded(pending, 'subscribe');
    } catch (error) {
      // A subscription that goes live after we gave up on it is dropped at once.
      pending.then(
        (unsubscribe) => unsubscribe(),
        () => undefined,
      );
      throw error;
    }
  }

  async close(): Promise<void> {
    if (this.#owned) await this.store.close();
    timeoutsOf(this.store).stopIdle();
  }
}

/** Whether a release's reply says this call ended the lease. */
function isReleased(reply: string): boolean {
  return reply === 'released';
}
