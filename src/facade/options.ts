import type { UnsafeConfig, WhenUnavailable } from '../core/defaults.js';
import type { Lock } from '../core/lock.js';
import * as validate from '../core/validate.js';
import type { LockKind } from '../topology/engines.js';
import type { Replication } from '../topology/single.js';

/** Options of a `Leasehold` instance. Per-call options override `ttl`, `wait` and `autoExtend`. */
export interface LeaseholdOptions {
  /** Prefix of every key and channel. Default `'leasehold'`. */
  prefix?: string;
  /** Default lease length in ms for this instance, at least 4 (see `driftFactor`). Default 30_000. */
  ttl?: number;
  /** Default ms `acquire` waits for a held lock. Default 10_000. */
  wait?: number;
  /** Default for the watchdog (extend every ttl/3 while held). Default true. */
  autoExtend?: boolean;
  /** A backend call unanswered after this many ms fails with StoreUnavailableError. Default 2_000. */
  commandTimeout?: number;
  /** Fraction of the ttl subtracted from the client's view of validity for clock drift. Default 0.01. */
  driftFactor?: number;
  /** This instance's label, recorded next to every lease it takes (`inspect` shows it). Default `` `${os.hostname()}:${process.pid}` ``. */
  instance?: string;
  /**
   * ms a lock's fencing counter is kept after its last grant. Tokens never fall below the server's
   * clock in µs, so an expired (or lost) counter cannot repeat a token. Default 604_800_000 (7 days).
   */
  fenceRetention?: number;
  /**
   * When the server's eviction policy can drop lock keys (anything but `maxmemory-policy
   * noeviction`): `'warn'` emits one process warning (code `LEASEHOLD_EVICTION_POLICY`), `'refuse'`
   * rejects acquisitions with a LockError of code `UNSAFE_CONFIG`, `'ignore'` skips the check.
   * Checked once, on first use. Default `'warn'`.
   */
  unsafeConfig?: UnsafeConfig;
  /**
   * Replica acknowledgement: after each grant and extension, wait until this many replicas have it
   * (Redis WAIT, or WAITAOF with `durability: 'aof'`; on a Cluster, on the node that owns the lock's
   * slot). Fewer within `replicaTimeout` gives the grant back and rejects with NotReplicatedError
   * (code NOT_REPLICATED), or with `whenNotReplicated: 'keep'` keeps it, flagged on `lock.replicas`.
   * Not on Redlock or the memory store. Default 0 (no waiting: replication stays asynchronous).
   */
  replicas?: number;
  /** ms a grant or an extension waits for the replicas. Default 100. */
  replicaTimeout?: number;
  /** What confirms a write: `'replicas'` (in their memory) or `'aof'` (fsynced to the server's and the replicas' AOF). Default `'replicas'`. */
  durability?: 'replicas' | 'aof';
  /** A short confirmation: `'fail'` gives the grant back and rejects; `'keep'` keeps it, `lock.replicas` says how many confirmed. Default `'fail'`. */
  whenNotReplicated?: 'fail' | 'keep';
  /** Redlock: how many nodes must agree. Default ⌊N/2⌋+1. */
  quorum?: number;
  /**
   * Redlock: ms one node has to answer one call before it counts as failed, so a slow or frozen
   * node costs little of the lease. Default min(500, ttl / 10, commandTimeout).
   */
  nodeTimeout?: number;
}

export interface AcquireOptions {
  /** Lease length in ms: at least 4, the least that leaves validity after the drift margin. Default 30_000 (or the instance's `ttl`). */
  ttl?: number;
  /** ms to wait while another owner holds the lock; 0 tries once. Default 10_000 (or the instance's `wait`). */
  wait?: number;
  /** Aborts the wait: `acquire` rejects with the signal's reason and leaves nothing behind. */
  signal?: AbortSignal;
  /** Extend the lease every ttl/3 while held. Default true (or the instance's `autoExtend`). */
  autoExtend?: boolean;
  /**
   * Reentrant: inside the work of a reentrant `withLock` / `tryWithLock` of `name` on this
   * Leasehold (its async context), return at once another hold of the same lease (same owner and
   * fencingToken, `holdCount` one higher; the lease ends when every hold is released). From any
   * other async context it waits like any acquisition. Default false.
   */
  reentrant?: boolean;
  /**
   * A counting semaphore: at most `limit` holders of `name` at once (an integer ≥ 1), each with its
   * own lease, owner and fencing token, waiting in arrival order; a lease that runs out frees its
   * permit. Every acquisition of the name must give the limit it is held with (INVALID_ARGUMENT
   * names both otherwise). One store only (not Redlock). Default: none, a mutex.
   */
  limit?: number;
  /**
   * A read-write lock: `'shared'` holders coexist; an `'exclusive'` holder excludes all (it is the
   * mutex of the same name, so a plain acquire excludes shared holders and they exclude it). Writers
   * are not starved: once an exclusive waiter is queued, later shared requests queue behind it, and
   * the shared waiters at the head of the queue are admitted together. One store only (not Redlock).
   * Default `'exclusive'`.
   */
  mode?: validate.LockMode;
  /** Replica acknowledgement for this call, over the instance's (see LeaseholdOptions.replicas); 0 turns it off. */
  replicas?: number;
  replicaTimeout?: number;
  durability?: 'replicas' | 'aof';
  whenNotReplicated?: 'fail' | 'keep';
}

export type TryAcquireOptions = Omit<AcquireOptions, 'wait'>;

/** Options of `acquireAll` / `withLocks`: several exclusive locks, each with its own lease. */
export type AcquireAllOptions = Omit<AcquireOptions, 'reentrant' | 'limit' | 'mode'>;

/** Options of `lead`: the lease of each term, and how long stop() waits for the term's work. */
export interface LeadOptions extends Pick<AcquireOptions, 'ttl' | 'autoExtend'> {
  /**
   * ms `stop()` (and a lost term) waits for the term's work to settle after its signal aborted,
   * before the lock is released anyway and the overrun reported. Default 30_000.
   */
  stopTimeout?: number;
}

export interface WithLockOptions extends AcquireOptions {
  /**
   * When the backend is unreachable: `'fail'` rejects with StoreUnavailableError (fail closed: for
   * work that must not run twice); `'skip'` does not run the work; `'run'` runs it unlocked (for
   * idempotent work only; `lock` is then null). Default `'fail'`.
   */
  whenUnavailable?: WhenUnavailable;
}

export type TryWithLockOptions = Omit<WithLockOptions, 'wait'>;

export type TryResult<T> = { ran: true; value: T } | { ran: false; reason: 'locked' | 'unavailable' };

/** The work run under a lock: `signal` aborts if the lease is lost. */
export type Work<T, L = Lock> = (signal: AbortSignal, lock: L) => Promise<T> | T;

/** The options each entry point takes: any other key is refused, naming it. */
export const LEASEHOLD_KEYS = [
  'prefix',
  'ttl',
  'wait',
  'autoExtend',
  'commandTimeout',
  'driftFactor',
  'instance',
  'fenceRetention',
  'unsafeConfig',
  'replicas',
  'replicaTimeout',
  'durability',
  'whenNotReplicated',
  'quorum',
  'nodeTimeout',
] as const satisfies readonly (keyof LeaseholdOptions)[];
const ALL_KEYS = [
  'ttl',
  'wait',
  'signal',
  'autoExtend',
  'replicas',
  'replicaTimeout',
  'durability',
  'whenNotReplicated',
] as const satisfies readonly (keyof AcquireAllOptions)[];
const ACQUIRE_KEYS = [...ALL_KEYS, 'reentrant', 'limit', 'mode'] as const satisfies readonly (keyof AcquireOptions)[];
const WITH_LOCK_KEYS = [...ACQUIRE_KEYS, 'whenUnavailable'] as const satisfies readonly (keyof WithLockOptions)[];
const LEAD_KEYS = ['ttl', 'autoExtend', 'stopTimeout'] as const satisfies readonly (keyof LeadOptions)[];
const withoutWait = (keys: readonly string[]): readonly string[] => keys.filter((k) => k !== 'wait');
export const OPTION_KEYS = {
  acquire: ACQUIRE_KEYS,
  tryAcquire: withoutWait(ACQUIRE_KEYS),
  withLock: WITH_LOCK_KEYS,
  tryWithLock: withoutWait(WITH_LOCK_KEYS),
  acquireAll: ALL_KEYS,
  withLocks: ALL_KEYS,
  lead: LEAD_KEYS,
} as const;
export type EntryPoint = keyof typeof OPTION_KEYS;

export const TRY_WHEN_UNAVAILABLE: readonly WhenUnavailable[] = ['fail', 'skip', 'run'];

/** A call's options, checked and with the instance's defaults filled in. */
export interface Resolved {
  readonly ttl: number;
  readonly wait: number;
  readonly autoExtend: boolean;
  readonly signal: AbortSignal | undefined;
  readonly reentrant: boolean;
  /** The kind of lock asked for (the mutex, a semaphore's permits, a read-write lock's shared hold). */
  readonly kind: LockKind;
  /** The call's own replica acknowledgement, when it set any of the options; else the instance's applies. */
  readonly replication: Replication | undefined;
}

/** What a call falls back on: the instance's own settings. */
export interface CallDefaults {
  readonly ttl: number;
  readonly wait: number;
  readonly autoExtend: boolean;
  readonly driftFactor: number;
  readonly replication: Replication | undefined;
}

/** A call that turns replica acknowledgement off (`replicas: 0`) on an instance that has it on. */
const NO_REPLICATION: Replication = Object.freeze({
  replicas: 0,
  timeout: 0,
  durability: 'replicas',
  whenShort: 'keep',
});

const MUTEX: LockKind = Object.freeze({});
const SHARED: LockKind = Object.freeze({ shared: true });

/** What a kind of lock is called in diagnostics. */
export function kindName(kind: LockKind): string {
  if (kind.shared) return 'read-write lock';
  return kind.limit === undefined ? 'mutex' : 'semaphore';
}

/** Check the options of a call to `entry` and fill in the instance's defaults. */
export function resolveCall(options: unknown, entry: EntryPoint, waits: boolean, d: CallDefaults): Resolved {
  const o = validate.options(options, `${entry} options`, OPTION_KEYS[entry]);
  const reentrant = validate.optionalBoolean(o.reentrant, 'reentrant', false);
  const { limit, mode } = validate.lockKind(o.limit, o.mode, reentrant);
  const kind: LockKind = mode === 'shared' ? SHARED : limit === undefined ? MUTEX : { limit };
  return {
    ttl: validate.optionalTtl(o.ttl, 'ttl', d.driftFactor, d.ttl),
    wait: waits ? validate.optionalDuration(o.wait, 'wait', 0, d.wait) : 0,
    autoExtend: validate.optionalBoolean(o.autoExtend, 'autoExtend', d.autoExtend),
    signal: validate.optionalSignal(o.signal),
    reentrant,
    kind,
    replication: callReplication(o, d.replication),
  };
}

/** A call's replica options over the instance's; undefined when the call sets none of them. */
function callReplication(o: Record<string, unknown>, base: Replication | undefined): Replication | undefined {
  const own = ['replicas', 'replicaTimeout', 'durability', 'whenNotReplicated'].some((k) => o[k] !== undefined);
  if (!own) return undefined;
  const merged = {
    replicas: o.replicas ?? base?.replicas,
    replicaTimeout: o.replicaTimeout ?? base?.timeout,
    durability: o.durability ?? base?.durability,
    whenNotReplicated: o.whenNotReplicated ?? base?.whenShort,
  };
  return validate.replication(merged) ?? NO_REPLICATION;
}
