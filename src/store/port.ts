import type { HandOff, HandOffListener } from '../core/engine.js';

export type { HandOff, HandOffListener };

/**
 * The ports: what locks need from a backend, by capability and in the vocabulary of locks. Every
 * call names a lock (or a job) by its name; how a backend lays that out (Redis keys, rows, etcd
 * keys) is its own business, and a store is built for one prefix (namespace) already. A backend
 * implements LeaseStore, and each further capability it offers: FenceStore (Redlock's fencing
 * write-back), JobStore (the scheduler), AdminStore (operator tooling), ConfigStore (deployment
 * checks). `portsOf()` checks once, at construction, which ones a store has.
 * Every reply is a distinct outcome, never a collapsed boolean.
 */

export type AcquireReply =
  /**
   * `since`: a monotonic time before the lease began, when that is earlier than the call (a lock a
   * release of this store granted the caller outright while it waited); its validity counts from it.
   */
  | { readonly acquired: true; readonly fence: number; readonly since?: number }
  /** `pttl`: ms the current holder's lease has left (the waiter's fallback hint). */
  | { readonly acquired: false; readonly pttl: number };

/** `expired`: no lock at all; `not-owner`: the lock is held by another owner. */
export type ReleaseReply = 'released' | 'expired' | 'not-owner';
export type ExtendReply = 'extended' | 'expired' | 'not-owner';

export interface LockState {
  /** Owner token of the current holder, or null when free. */
  readonly owner: string | null;
  /** ms left on the current lease; -2 when free. */
  readonly pttl: number;
  /** Latest fencing token issued for this lock (the holder's, while held); 0 if none is kept. */
  readonly fence: number;
  /** Who holds it: the holder's fencing token, when it took the lock (server ms) and its instance label. */
  readonly holder: Holder | null;
  /**
   * The owner that released the lock granted with `fence`, or null (expired, or never released).
   * While held, null, or on Redis the owner whose release granted the lock to its holder outright.
   */
  readonly releasedBy: string | null;
}

/** What a store records of a grant, next to the lease. */
export interface Holder {
  readonly token: number;
  /** Server time of the grant, in ms since the epoch. */
  readonly takenAt: number;
  /** The instance label of the Leasehold that took it (default `hostname:pid`). */
  readonly instance: string;
}

/**
 * What every call of one Leasehold instance shares: a store is built with it (or bound to it, see
 * Store.bind) once, and a request carries only what varies per call.
 */
export interface StoreSettings {
  /** The namespace of every key, row or etcd key the store touches. */
  readonly prefix: string;
  /** The instance label recorded next to each lease this instance takes. */
  readonly instance: string;
  /** ms the fencing counter is kept after a lock's last grant. */
  readonly fenceRetention: number;
  /** ms a queued waiter stays queued without trying again; then it counts as dead and is dropped. */
  readonly waiterLease: number;
  /** How a freed lock is handed on, by every call that frees one. */
  readonly handOn: HandOn;
}

/** One acquisition attempt: what varies per call (the instance's own settings are the store's). */
export interface AcquireRequest {
  readonly owner: string;
  /** The lease in ms. */
  readonly ttl: number;
  /** The token issued is at least this (Redlock proposes one so its nodes agree); omitted or 0: no floor. */
  readonly minFence?: number;
  /** How this attempt takes part in the waiters' queue; see QueueMode. Omitted: never queues. */
  readonly queue?: QueueMode | undefined;
}

/** How a freed lock is handed on: the policy of every call that frees one (StoreSettings.handOn). */
export interface HandOn {
  /** ms the lock is reserved for the waiter woken. */
  readonly reservation: number;
  /**
   * Announce a hand-off to nobody in particular when nobody is queued, for waiters that do not queue
   * (Redlock's). A store may leave out the release of a lease no caller was refused by since it was
   * taken: nobody waits on it (the Redis store does).
   */
  readonly announce: boolean;
  /**
   * A release may grant the lock at once to the next waiter when that waiter queued through this
   * same store (this instance's own, so alive as the release runs): the store keeps the grant, and
   * that waiter's next acquire answers from it without a call. Omitted: the next waiter is only
   * reserved for (Redlock).
   */
  readonly direct?: boolean;
}

/** How a run ended, as the history records it. `running` until the run reports back. */
export type StoredOutcome = 'running' | 'ok' | 'failed' | 'done' | 'lost' | 'abandoned';

/** One run of a job as the store keeps it; times are the server's, in ms since the epoch. */
export interface StoredRun {
  /** The run's fencing token: unique per job, increasing in the order runs were claimed. */
  readonly fence: number;
  /** The tick's scheduled time, or null for a run without tick identity. */
  readonly tick: number | null;
  /** The job's instance label (a job may name its own), recorded next to the lease. */
  readonly instance: string;
  readonly startedAt: number;
  readonly finishedAt: number | null;
  readonly outcome: StoredOutcome;
  readonly error: string | null;
}

export interface ClaimRequest {
  readonly owner: string;
  /** ms a tick may lie ahead of the store's clock before it is refused as `clock-skew`. */
  readonly clockTolerance: number;
  /** The lease in ms (lockAtMostFor). */
  readonly ttl: number;
  /** The tick's scheduled time in ms since the epoch; null claims without tick identity. */
  readonly tick: number | null;
  readonly instance: string;
  /** Runs the history keeps (the oldest beyond this are dropped). */
  readonly historyLimit: number;
}

export type ClaimReply =
  /** `startedAt`: the server's time of the claim, in ms since the epoch. */
  | { readonly claimed: true; readonly fence: number; readonly startedAt: number }
  | { readonly claimed: false; readonly reason: 'locked'; readonly pttl: number }
  | { readonly claimed: false; readonly reason: 'already-ran'; readonly lastTick: number }
  /** The tick lies further ahead of the store's clock (`now`, ms) than the tolerance: the caller's clock runs fast. */
  | { readonly claimed: false; readonly reason: 'clock-skew'; readonly now: number };

export interface FinishRequest {
  readonly owner: string;
  readonly fence: number;
  /** The `startedAt` the claim returned. */
  readonly startedAt: number;
  readonly outcome: Exclude<StoredOutcome, 'running'>;
  readonly error: string | null;
  /** ms from `startedAt` the lock must still be held for; the lease is cut to what remains. */
  readonly lockAtLeastFor: number;
}

/**
 * `kept`: the lease now ends `remaining` ms from now (lockAtLeastFor); `released`: deleted;
 * `expired` / `not-owner`: the lock was no longer ours (the run is recorded all the same).
 */
export type FinishReply =
  | { readonly lease: 'kept'; readonly remaining: number }
  | { readonly lease: 'released' | 'expired' | 'not-owner' };

export interface JobState {
  /** Whether the job's lock is held right now (by a run or by anyone else). */
  readonly held: boolean;
  /** Latest fencing token issued for the job's lock; 0 if never. */
  readonly fence: number;
  /** Latest tick claimed, or null if none. */
  readonly lastTick: number | null;
  /** Newest first. */
  readonly runs: readonly StoredRun[];
}

/**
 * What an operator's forced release did. `owner`: the holder whose lock was deleted; `woken`: the
 * waiter the lock was handed to (reserved for it), or null when nobody was queued.
 */
export type ForceReleaseReply =
  | {
      readonly result: 'released';
      readonly owner: string;
      readonly holder: Holder | null;
      readonly woken: string | null;
    }
  | { readonly result: 'not-held' };

/** A lock's waiters' queue and hand-off, read in one step (operator tooling). */
export interface QueueState {
  /** Waiters queued, across every instance. */
  readonly count: number;
  /** Owner tokens of the first waiters, in arrival order (at most the limit asked for). */
  readonly first: readonly string[];
  /** The waiter a release handed the lock to and ms its reservation has left, or null. */
  readonly reserved: { readonly owner: string; readonly pttl: number } | null;
}

/**
 * How an acquire takes part in the waiters' queue: `join` — a first attempt by a caller that will
 * wait: join the queue if refused; `member` — a later attempt by a caller already queued: also
 * leave the queue on success. Omitted: a caller that will not wait never queues.
 */
export type QueueMode = 'join' | 'member';

/** What every store tells about itself, for messages. */
export interface StoreInfo {
  /** Short label for messages and metrics: 'memory', 'ioredis', 'node-redis', … */
  readonly kind: string;
  /** Where the store's server is, for messages ('127.0.0.1:6379'); absent for an in-process store. */
  readonly address?: string;
  /** The client's last connection error while it is not connected: the cause of a call left unanswered. */
  lastError?(): unknown;
  /** Where lock `name` lives in the backend, for operators ('<prefix>:{<name>}' on Redis); absent in memory. */
  locate?(name: string): string;
  /**
   * A call got no answer within `commandTimeout`. A store over a Cluster client asks it to read the
   * cluster's topology again, so calls stop going to a master that died and was replaced.
   */
  unanswered?(): void;
}

/** Leases on named locks: what every backend implements. */
export interface LeaseStore extends StoreInfo {
  /**
   * Take lock `name` if free and not reserved for another waiter, with a lease of `ttl` ms, and
   * issue the next fencing token: above every token issued before for the name, and never below
   * the store's clock in µs, so a lost counter cannot repeat a token. A caller that will wait joins
   * the waiters' queue when refused (and renews its liveness there on every attempt), so releases
   * hand the lock on in arrival order. Idempotent per owner: a lock this owner holds already is
   * success, with the token of that grant.
   */
  /** `heldAs` when a semaphore holds the name (a mutex of a semaphore's name is another kind). */
  acquire(name: string, request: AcquireRequest): Promise<AcquireReply | HeldAsReply>;
  /**
   * Delete the lock if `owner` holds it. Then hand it on: take the first live waiter, reserve the
   * lock for it for `reservation` ms, and tell every watcher (a HandOff), so exactly one waiter
   * across all instances wakes, and the next ones retry if the reservation lapses. Releasing an
   * expired lock hands it on all the same. Idempotent per owner: the same release re-sent answers
   * released, until another owner takes the lock.
   */
  release(name: string, owner: string): Promise<ReleaseReply>;
  /** Reset the lease to `ttl` ms if `owner` holds it. */
  extend(name: string, owner: string, ttl: number): Promise<ExtendReply>;
  /**
   * A waiter gives up (timed out, aborted): drop it from the queue, and if the lock was reserved
   * for it and is free, hand it to the next waiter as a release would.
   */
  leave(name: string, owner: string): Promise<void>;
  /** Read the lock's current state (operator tooling, lost-lease messages, tests). */
  inspect(name: string): Promise<LockState>;
  /**
   * Hear every hand-off of lock `name`. Resolves once listening, so a hand-off after that is
   * heard. The returned function stops listening (reference counted per name).
   */
  watch(name: string, onHandOff: HandOffListener): Promise<() => void>;
  /** Stop what the store itself opened (a subscriber connection). Never closes the caller's client. */
  close(): Promise<void>;
}

/** Redlock's fencing write-back. */
export interface FenceStore {
  /** Raise lock `name`'s fencing counter to at least `fence` (never lowers it), kept `fenceRetention` ms. Returns the counter after. */
  raiseFence(name: string, fence: number): Promise<number>;
}

/** Once-per-tick jobs: the scheduler's steps, each one step on the store. */
export interface JobStore {
  /**
   * Claim one tick of job `name` in one step. Refuses when the job's lock is held or reserved,
   * when the job's latest claimed tick is at or after `tick`, or when `tick` lies more than
   * `clockTolerance` ms ahead of the store's clock; otherwise takes the lock as `acquire` does
   * (lease `ttl` ms, next fencing token), records the tick and adds a `running` record to the
   * history. Idempotent per owner.
   */
  claimTick(name: string, request: ClaimRequest): Promise<ClaimReply>;
  /**
   * Record how a run ended and end its lease: if `owner` holds the lock and less than
   * `lockAtLeastFor` ms have passed since `startedAt` (server time), cut the lease to what remains;
   * otherwise end it and hand it on as `release` does.
   */
  finishTick(name: string, request: FinishRequest): Promise<FinishReply>;
  /** The job's lock state, latest tick and newest `limit` runs, read in one step. */
  readJob(name: string, limit: number): Promise<JobState>;
  /**
   * Operator tooling: forget the job's latest tick and its run history. The lock and its fencing
   * counter are left as they are, so a later run's token is still above every earlier one.
   */
  forgetJob(name: string): Promise<void>;
}

/** Operator tooling. */
export interface AdminStore {
  /**
   * Names of the locks whose name matches the glob `match` (`*`, `?`, `[…]`, backslash escapes),
   * each at most once, in no order. A name may belong to a lock that expires before the caller reads
   * it. `count` is a hint of how many entries to look at per round trip.
   */
  scanLocks(match: string, count: number): AsyncIterable<string>;
  /**
   * Delete the lock whoever holds it, then hand it on exactly as `release` does. Never touches the
   * fencing counter, so the next token is still above the deleted holder's. This breaks mutual
   * exclusion for that holder until its next extension fails.
   */
  forceRelease(name: string): Promise<ForceReleaseReply>;
  /** The waiters' queue (its length and first `limit` owner tokens) and any reservation. */
  queued(name: string, limit: number): Promise<QueueState>;
}

/** Deployment checks. */
export interface ConfigStore {
  /**
   * The eviction policy of every server behind this store (`maxmemory-policy`, as INFO memory
   * reports it), or null where it cannot be read.
   */
  evictionPolicies(): Promise<readonly (string | null)[]>;
}

/**
 * A store as `new Leasehold(store)` takes it: leases, and whichever further capabilities it has.
 * `bind(settings)`: the same store seen with a Leasehold's settings (its prefix, instance label,
 * retention, hand-on), for a store object the caller made and shares between Leaseholds (the memory
 * store); without it the store is used as it is, with the settings it was made with.
 */
export interface Store
  extends LeaseStore,
    Partial<FenceStore>,
    Partial<JobStore>,
    Partial<AdminStore>,
    Partial<ConfigStore>,
    Partial<SharedStore>,
    Partial<ReplicationStore> {
  bind?(settings: StoreSettings): Store;
}

/** A store's capabilities, each present only when every one of its methods is. */
export interface StorePorts {
  readonly lease: LeaseStore;
  readonly fence: FenceStore | undefined;
  readonly jobs: JobStore | undefined;
  readonly admin: AdminStore | undefined;
  readonly config: ConfigStore | undefined;
  readonly shared: SharedStore | undefined;
  readonly replication: ReplicationStore | undefined;
}

function has<T>(store: Store, methods: readonly string[]): T | undefined {
  const all = methods.every((m) => typeof (store as unknown as Record<string, unknown>)[m] === 'function');
  return all ? (store as unknown as T) : undefined;
}

/** Which capabilities `store` offers, checked once. */
export function portsOf(store: Store): StorePorts {
  return {
    lease: store,
    fence: has<FenceStore>(store, ['raiseFence']),
    jobs: has<JobStore>(store, ['claimTick', 'finishTick', 'readJob', 'forgetJob']),
    admin: has<AdminStore>(store, ['scanLocks', 'forceRelease', 'queued']),
    config: has<ConfigStore>(store, ['evictionPolicies']),
    shared: has<SharedStore>(store, ['acquireShared', 'extendShared', 'releaseShared', 'leaveShared', 'inspectShared']),
    replication: has<ReplicationStore>(store, ['replicate']),
  };
}

/** Marks an object as a Store so `Leasehold` can tell it from a Redis client. */
export const STORE = Symbol.for('leasehold.store');

export function isStore(value: unknown): value is Store {
  return typeof value === 'object' && value !== null && (value as { [STORE]?: unknown })[STORE] === true;
}

/**
 * A hold on a lock that admits several holders at once: one of `limit` permits of a semaphore, or
 * (limit 0) a shared hold of a read-write lock. A name is one lock whatever holds it: its exclusive
 * holder is the LeaseStore's (a mutex, a job lock, or a read-write lock's exclusive mode), which
 * excludes every shared hold and is excluded by any; the holds share the lock's fencing counter and
 * its waiters' queue.
 */
export interface SharedRequest extends Omit<AcquireRequest, 'minFence'> {
  /** Holders admitted at once: a semaphore's permits (≥ 1), or 0 for a read-write lock's shared holds (no bound). */
  readonly limit: number;
}

/**
 * The name is held as another kind of lock: `heldAs` is the limit it was taken with (a semaphore's
 * permits, 0 for a read-write lock's shared holds), or -1 when it is held exclusively (a mutex, an
 * exclusive hold, a job's run) and a semaphore was asked for. Nothing changed.
 */
export type HeldAsReply = { readonly acquired: false; readonly heldAs: number };

export type SharedAcquireReply = AcquireReply | HeldAsReply;

/** One shared hold, as operator tooling shows it. */
export interface SharedHold extends Holder {
  readonly owner: string;
  /** ms its lease has left. */
  readonly pttl: number;
}

/** Who holds a lock that admits several holders, read in one step. */
export interface SharedState {
  /**
   * `semaphore` and `shared` (a read-write lock's shared holds): held by `holds`; `exclusive`: held
   * by one owner (LeaseStore.inspect tells which); `free`: neither (perhaps reserved for a waiter).
   */
  readonly mode: 'free' | 'exclusive' | 'shared' | 'semaphore';
  /** A semaphore's permits; null for any other mode. */
  readonly limit: number | null;
  /** The live holds, oldest lease end first. */
  readonly holds: readonly SharedHold[];
  /** Waiters a hand-off admitted and that have not taken their hold yet (a permit, or a place among shared holders). */
  readonly reserved: readonly string[];
}

/**
 * Locks of several holders (semaphores, read-write locks), by name. Each hold has its own lease,
 * owner token and fencing token (from the lock's one counter: above every token issued before for
 * the name, never below the store's clock in µs). Holds whose lease ran out are reclaimed on the
 * store's clock. Waiting is the lock's FIFO queue: a shared request refused joins it, and writers
 * are not starved: while an exclusive waiter is queued, later shared requests queue behind it, and
 * shared waiters at the head of the queue are admitted together. `LeaseStore.inspect` shows a lock
 * held by shared holds with no owner; `inspectShared` lists them.
 */
export interface SharedStore {
  /**
   * Take a shared hold for `request.owner` if the lock is not held exclusively nor reserved for
   * others, a permit is free (limit > 0) and no exclusive waiter is queued ahead; when refused, a
   * caller that will wait joins the queue. Idempotent per owner. A name held as another kind
   * (another limit) answers `heldAs` and changes nothing.
   */
  acquireShared(name: string, request: SharedRequest): Promise<SharedAcquireReply>;
  /** Reset `owner`'s hold to `ttl` ms if it is live. */
  extendShared(name: string, owner: string, ttl: number): Promise<ExtendReply>;
  /**
   * End `owner`'s hold, and hand on what it freed: the lock itself to the first waiter once no hold
   * is left, or free permits to the shared waiters at the head. Idempotent per owner until the
   * next acquisition of the name.
   */
  releaseShared(name: string, owner: string): Promise<ReleaseReply>;
  /** A shared waiter gives up: leave the queue, passing on a place a hand-off reserved for it. */
  leaveShared(name: string, owner: string): Promise<void>;
  /** The lock's shared holds and reservations (operator tooling, tests). */
  inspectShared(name: string): Promise<SharedState>;
}

/** How a write is confirmed beyond the server that took it (`replicas`, `replicaTimeout`, `durability`). */
export interface ReplicationRequest {
  /** Replicas that must confirm. */
  readonly replicas: number;
  /** ms to wait for them. */
  readonly timeout: number;
  /**
   * `replicas`: the replicas have it in memory (Redis WAIT); `aof`: the server and the replicas
   * wrote it to their append-only file (Redis WAITAOF, Redis 7.2 and later).
   */
  readonly durability: 'replicas' | 'aof';
}

/** Replica acknowledgement of a lock's last write: a store whose server replicates. */
export interface ReplicationStore {
  /**
   * After this store's last write to lock `name` (a grant, an extension): wait until `replicas`
   * replicas confirmed it or `timeout` ms passed, on the connection that wrote it (on a Cluster,
   * the node that owns the name's slot). `replicas`: how many confirmed; `local`: for `aof`,
   * whether the server's own AOF has it (always true for `replicas`).
   */
  replicate(name: string, request: ReplicationRequest): Promise<{ readonly replicas: number; readonly local: boolean }>;
}
