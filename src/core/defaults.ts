import { hostname } from 'node:os';

/**
 * Every default in one frozen object: the code and the tests both import it.
 */
export const DEFAULTS = Object.freeze({
  /** Lease length in ms. */
  ttl: 30_000,
  /** How long `acquire` waits for a held lock, in ms. */
  wait: 10_000,
  /** Keep the lease alive while it is held (the watchdog). */
  autoExtend: true,
  /** The watchdog extends every `ttl / extendDivisor` ms (Redisson's rhythm: a third of the lease). */
  extendDivisor: 3,
  /** Fraction of the ttl subtracted from validity for clock drift between client and server. */
  driftFactor: 0.01,
  /** Constant ms subtracted from validity on top of the drift fraction. */
  driftConstant: 2,
  /** Key prefix for every key and channel leasehold writes. */
  prefix: 'leasehold',
  /** A backend call that has not answered after this many ms fails with StoreUnavailableError. */
  commandTimeout: 2_000,
  /** What withLock / tryWithLock do when the backend is unreachable. */
  whenUnavailable: 'fail' as const,
  /** With `replicas`: ms a grant or an extension waits for the replicas to confirm it. */
  replicaTimeout: 100,
  /** With `replicas`: what confirms a write (the replicas' memory, or their and the server's AOF). */
  durability: 'replicas' as const,
  /** With `replicas`: a short confirmation fails the acquisition (`'fail'`) or is kept and flagged (`'keep'`). */
  whenNotReplicated: 'fail' as const,
  /** Longest lock name accepted, in UTF-16 code units. */
  maxNameLength: 512,
  /** Largest ttl / wait accepted, in ms (what a Node timer can hold). */
  maxDuration: 2_147_483_647,
  /** Bytes of randomness in an owner token (128 bits). */
  ownerTokenBytes: 16,
  /** Delay between retries of a failed watchdog extension, as a fraction of the ttl. */
  extendRetryFraction: 0.1,
  /** Extra ms added to a holder's PTTL before a waiter's fallback retry, so it lands after expiry. */
  expiryMargin: 5,
  /**
   * ms a release keeps the lock for the waiter it woke, so nobody barges past it; if that waiter
   * died meanwhile, the lock is free again after this.
   */
  reservation: 250,
  /** Longest a waiter sleeps before trying again when no release wakes it (a woken waiter may have died). */
  maxPark: 2_000,
  /**
   * ms a queued waiter stays in the backend's queue without trying again. Live waiters try at
   * least every `maxPark`; one that stops (killed, its leave lost) is dropped after this, and the
   * queue's keys expire when nobody renews them.
   */
  waiterLease: 6_000,
  /** While the release subscription is down, a waiter retries at least this often: it cannot hear a hand-off, and must take its reservation before it lapses. */
  unsubscribedPark: 100,
  /** First delay before a failed release subscription is tried again, doubling up to `maxPark`. */
  resubscribeDelay: 50,
  /**
   * ms the fencing counter is kept after a lock's last grant. Tokens never fall below the server's
   * clock in µs, so a counter that expires (or is lost) restarts above every token issued before.
   */
  fenceRetention: 7 * 24 * 60 * 60 * 1_000,
  /** What to do when the backend's eviction policy can drop lock keys: warn once, refuse, or ignore. */
  unsafeConfig: 'warn' as const,
  /** Scheduler: ms a tick may lie ahead of the store's clock; a claim beyond it is skipped as `clock-skew`. */
  clockTolerance: 1_000,
  /** ms a release channel stays subscribed after its last waiter left, so a busy lock does not resubscribe per wait. */
  subscriptionLinger: 1_000,
  /**
   * Redlock: longest ms one node has to answer one call, unless `nodeTimeout` is set: short beside
   * the lease (a frozen node costs little of it), long enough for a busy host's event-loop lag.
   */
  nodeTimeout: 500,
  /** Redlock: the default per-node timeout is also at most this fraction of the ttl. */
  nodeTimeoutFraction: 0.1,
  /** Redlock: base of the exponential backoff with full jitter after a split vote, in ms. */
  retryBase: 50,
  /** Redlock: ceiling of that backoff, in ms. */
  retryCap: 1_000,
  /**
   * Redlock: ms ahead of the client's clock at which it proposes a fencing token, so that nodes
   * whose clocks run up to this far ahead still issue the proposal itself and agree on it.
   */
  fenceLead: 1_000,
  /** Redlock: lock names whose latest fencing token an instance remembers, to lift lagging nodes. */
  fenceHints: 1_024,
  /** Scheduler: the lease of one run in ms (ShedLock's lockAtMostFor); extended while the task runs. */
  lockAtMostFor: 30_000,
  /** Scheduler: ms a run's lock is kept from its claim, however short the task (ShedLock's lockAtLeastFor). */
  lockAtLeastFor: 0,
  /** Scheduler: what a tick does when the backend is unreachable (fail closed: it does not run). */
  jobWhenUnavailable: 'skip' as const,
  /** Scheduler: extend a run's lease while its task runs. */
  keepAlive: true,
  /** Scheduler: runs kept in each job's history in the store. */
  historyLimit: 50,
  /** Scheduler: longest error message a run record keeps, in characters. */
  historyErrorLength: 500,
  /** Scheduler: longest instance name accepted, in characters. */
  maxInstanceLength: 200,
  /** lead: ms a term's work may take to settle after its signal aborted before the lock is released anyway. */
  leadStopTimeout: 30_000,
});

export type WhenUnavailable = 'fail' | 'skip' | 'run';

export type UnsafeConfig = 'warn' | 'refuse' | 'ignore';

/**
 * The shortest lease that leaves at least 1 ms of validity after the drift margin (ttl ×
 * driftFactor + driftConstant): a shorter one would be over before it could be used.
 */
export function minimumTtl(driftFactor: number, driftConstant: number = DEFAULTS.driftConstant): number {
  return Math.ceil((driftConstant + 1) / (1 - driftFactor));
}

/** An instance's label when it names none: `hostname:pid`. */
export function defaultInstance(): string {
  return `${hostname()}:${process.pid}`;
}
