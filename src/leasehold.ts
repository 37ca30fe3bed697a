import { EventEmitter, setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { AcquireLoop } from './core/acquire-loop.js';
import { now } from './core/clock.js';
import { DEFAULTS, type UnsafeConfig, type WhenUnavailable } from './core/defaults.js';
import { type AcquireContext, channels, outcomeOf, trace, traced, tracing } from './core/diagnostics.js';
import { emitSafely } from './core/emit.js';
import type { Attempt, LockEngine } from './core/engine.js';
import {
  closedError,
  invalidArgument,
  type LockLostError,
  LockTimeoutError,
  StoreUnavailableError,
  workFailure,
} from './core/errors.js';
import { LeaseKeeper } from './core/lease-keeper.js';
import { Lock, type LockContext } from './core/lock.js';
import { NEVER_ABORTED } from './core/never-aborted.js';
import { newOwnerToken } from './core/owner.js';
import * as validate from './core/validate.js';
import { WaitQueues } from './core/waiting.js';
import { JobLock } from './primitives/job-lock.js';
import { Leadership } from './primitives/leadership.js';
import { MultiLock } from './primitives/multi-lock.js';
import { mutex } from './primitives/mutex.js';
import { Reentrancy } from './primitives/reentrant.js';
import { semaphore, sharedMode } from './primitives/shared.js';
import type { RunRecord } from './schedule/history.js';
import type { Job } from './schedule/job.js';
import type { NodeCronCoordinator } from './schedule/node-cron.js';
import type { NodeCronCoordinatorOptions, RunOnceOptions, ScheduleOptions } from './schedule/options.js';
import { Scheduler } from './schedule/scheduler.js';
import type { JobEvents, JobTask, RunOnceResult } from './schedule/types.js';
import { EvictionCheck } from './store/eviction-check.js';
import { type HandOn, type JobStore, portsOf, type Store } from './store/port.js';
import { type Backend, resolveStore } from './store/registry.js';
import { Quorum } from './topology/quorum.js';
import { type Replication, Single } from './topology/single.js';

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

export interface LockEvent {
  readonly name: string;
  readonly fencingToken: number;
}

/**
 * What leasehold was doing when a background call to the backend failed:
 * - `acquire`, `extend`, `release`: that call on one Redlock node (the call itself may still succeed on a quorum);
 * - `wait`: listening for releases while an acquire waits (the subscriber connection);
 * - `leave-queue`: an acquire that gave up (timed out, aborted, closed) leaving the waiters' queue;
 * - `check-eviction-policy`: reading the server's `maxmemory-policy` (see `unsafeConfig`);
 * - `close`: `close()` stopping a connection leasehold opened (a subscriber).
 */
export type BackendOperation =
  | 'acquire'
  | 'extend'
  | 'release'
  | 'wait'
  | 'leave-queue'
  | 'check-eviction-policy'
  | 'close';

/** The actions a Redlock node's call is reported under, in the words of BackendOperation. */
const REDLOCK_OPERATIONS: Readonly<Record<string, BackendOperation>> = {
  acquire: 'acquire',
  'raise-fence': 'acquire',
  extend: 'extend',
  release: 'release',
  subscribe: 'wait',
  close: 'close',
};

/** Events a Leasehold instance emits. No event is called 'error': a missing listener never crashes the process. */
export interface LeaseholdEvents {
  acquired: [LockEvent & { readonly waited: number }];
  released: [LockEvent & { readonly released: boolean }];
  extended: [LockEvent & { readonly expiresIn: number }];
  lost: [LockEvent & { readonly error: LockLostError }];
  /** A watchdog extension failed; it retries until the lease's validity runs out. */
  extendFailed: [LockEvent & { readonly error: unknown }];
  /** withLock could not release after the work (the lease then ends by its ttl). */
  releaseFailed: [LockEvent & { readonly error: unknown }];
  /**
   * A background failure, not thrown to any caller: the subscriber connection, a waiter leaving the
   * queue, the eviction-policy check, one Redlock node's call. `operation` says which, in the words
   * of the API.
   */
  backendError: [{ readonly error: unknown; readonly operation: BackendOperation }];
  /** Scheduler: a run's task finished without throwing. */
  jobRun: JobEvents['jobRun'];
  /** Scheduler: a tick did not run on this instance (`reason`: locked, already-ran, unavailable, error). */
  jobSkipped: JobEvents['jobSkipped'];
  /** Scheduler: a run's task threw; the job carries on with its next tick. */
  jobFailed: JobEvents['jobFailed'];
  /** Scheduler: a run's lease was lost while its task ran (its signal aborted). */
  jobLost: JobEvents['jobLost'];
}

function closingController(): AbortController {
  const controller = new AbortController();
  // One listener per parked waiter of this instance: any number is expected.
  setMaxListeners(0, controller.signal);
  return controller;
}

function defaultInstance(): string {
  return `${hostname()}:${process.pid}`;
}

const TRY_WHEN_UNAVAILABLE: readonly WhenUnavailable[] = ['fail', 'skip', 'run'];

/** The options each entry point takes: any other key is refused, naming it. */
const LEASEHOLD_KEYS = [
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
const OPTION_KEYS = {
  acquire: ACQUIRE_KEYS,
  tryAcquire: withoutWait(ACQUIRE_KEYS),
  withLock: WITH_LOCK_KEYS,
  tryWithLock: withoutWait(WITH_LOCK_KEYS),
  acquireAll: ALL_KEYS,
  withLocks: ALL_KEYS,
  lead: LEAD_KEYS,
} as const;
type EntryPoint = keyof typeof OPTION_KEYS;

/** A call that turns replica acknowledgement off (`replicas: 0`) on an instance that has it on. */
const NO_REPLICATION: Replication = Object.freeze({
  replicas: 0,
  timeout: 0,
  durability: 'replicas',
  whenShort: 'keep',
});

function replicasOnRedlock(): Error {
  return invalidArgument(
    '`replicas` is for one deployment with replicas (Sentinel, a Cluster): Redlock rests on independent ' +
      'masters instead, and a grant there is confirmed by a quorum of them',
  );
}

/** Why a Redlock instance runs no jobs. */
const NO_JOBS_ON_REDLOCK =
  'scheduled jobs need a Leasehold on one store (a Redis client, a Redis Cluster or a MemoryStore); ' +
  'this instance is Redlock over several independent masters, where a tick marker has no single home';

/** An engine's attempt that won the lock. */
type Granted = Extract<Attempt, { acquired: true }>;

/** What withLock / tryWithLock go on with: the lock, or what whenUnavailable chose. */
type Taken<T> =
  | { readonly kind: 'held'; readonly lock: Lock; readonly work: Work<T, Lock | null>; readonly reentrant: boolean }
  | { readonly kind: 'skip' }
  | { readonly kind: 'unlocked'; readonly work: Work<T, Lock | null> };

interface Resolved {
  readonly ttl: number;
  readonly wait: number;
  readonly autoExtend: boolean;
  readonly signal: AbortSignal | undefined;
  readonly reentrant: boolean;
  /** A semaphore's permits, or undefined. */
  readonly limit: number | undefined;
  readonly mode: validate.LockMode;
  /** The call's own replica acknowledgement, when it set any of the options; else the instance's applies. */
  readonly replication: Replication | undefined;
}

/** A primitive's engine on this instance, and the context its Lock handles call back through. */
interface Variant {
  readonly kind: string;
  readonly engine: LockEngine;
  readonly context: LockContext;
}

/** Why Redlock runs no lock of several holders, by what the call asked for. */
function notOnRedlock(limit: number | 'shared'): Error {
  if (limit === 'shared') {
    return invalidArgument(
      "`mode: 'shared'` (a read-write lock) is not available on Redlock: its waiters do not queue on the " +
        'masters, and writer preference rests on that queue (a stream of readers would starve writers); ' +
        'use one Redis, a Redis Cluster or a MemoryStore',
    );
  }
  return invalidArgument(
    `\`limit: ${limit}\` (a semaphore) is not available on Redlock: a majority vote over independent masters ` +
      'does not bound a count (with 3 masters and 2 permits, three holders can each win two masters); ' +
      'use one Redis, a Redis Cluster or a MemoryStore',
  );
}

/**
 * Locks and leases on one Redis (a client or a cluster), on several independent Redis masters
 * (Redlock, when given an array), or on a Store such as `new MemoryStore()`.
 */
export class Leasehold extends EventEmitter<LeaseholdEvents> {
  readonly #engine: LockEngine;
  /** The job lock on the one store, when there is one store and it can run jobs. */
  readonly #jobs: JobLock | undefined;
  readonly #noJobs: string;
  readonly #keeper = new LeaseKeeper();
  readonly #waits: WaitQueues;
  readonly #loop: AcquireLoop;
  readonly #reentrancy = new Reentrancy();
  readonly #held = new Set<Lock>();
  readonly #ttl: number;
  readonly #wait: number;
  readonly #autoExtend: boolean;
  readonly #context: LockContext;
  /** The engine of a lock of several holders (`limit`, or `mode: 'shared'`) on the same store, or why there is none. */
  readonly #engineFor: (limit: number | 'shared' | undefined, replication: Replication | undefined) => LockEngine;
  /** The instance's replica acknowledgement (its options), which a call's own options override. */
  readonly #replication: Replication | undefined;
  /** Those engines, made on first use, by what they run; none owns the store. */
  readonly #variants = new Map<number | 'shared' | string, Variant>();
  #closed = false;
  readonly #common: {
    commandTimeout: number;
    driftFactor: number;
    driftConstant: number;
    instance: string;
    fenceRetention: number;
  };
  /** Aborted by close(): every parked acquisition rejects with CLOSED at once (each listens to it). */
  readonly #closing = closingController();
  #scheduler: Scheduler | undefined;

  constructor(backend: Backend | readonly Backend[], options?: LeaseholdOptions) {
    super();
    const o = validate.options(options, 'Leasehold options', LEASEHOLD_KEYS);
    const driftFactor = validate.optionalFraction(o.driftFactor, 'driftFactor', DEFAULTS.driftFactor);
    this.#ttl = validate.optionalTtl(o.ttl, 'ttl', driftFactor, DEFAULTS.ttl);
    this.#wait = validate.optionalDuration(o.wait, 'wait', 0, DEFAULTS.wait);
    this.#autoExtend = validate.optionalBoolean(o.autoExtend, 'autoExtend', DEFAULTS.autoExtend);
    const failed = (operation: BackendOperation) => (error: unknown) =>
      this.#emit('backendError', { error, operation });
    const onSubscriberError = failed('wait');
    const onEvictionCheckError = failed('check-eviction-policy');
    const prefix = validate.prefix(o.prefix);
    const common = {
      commandTimeout: validate.optionalDuration(o.commandTimeout, 'commandTimeout', 1, DEFAULTS.commandTimeout),
      driftFactor,
      driftConstant: DEFAULTS.driftConstant,
      instance: validate.instance(o.instance, defaultInstance()),
      fenceRetention: validate.optionalDuration(o.fenceRetention, 'fenceRetention', 1, DEFAULTS.fenceRetention),
      waiterLease: DEFAULTS.waiterLease,
    };
    const unsafeConfig = validate.unsafeConfig(o.unsafeConfig);
    const replication = validate.replication(o);
    this.#replication = replication;
    this.#common = common;
    const backendOptions = { prefix, onError: onSubscriberError };
    if (Array.isArray(backend)) {
      if (backend.length === 0) throw validate.invalidBackends();
      if (replication) throw replicasOnRedlock();
      validate.distinctBackends(backend);
      const stores = backend.map((b: unknown) => resolveStore(b, backendOptions));
      this.#engine = new Quorum(mutex, stores, {
        ...common,
        reservation: DEFAULTS.reservation,
        quorum: validate.quorum(o.quorum, stores.length),
        nodeTimeout: o.nodeTimeout === undefined ? undefined : validate.duration(o.nodeTimeout, 'nodeTimeout', 1),
        // A node's failed call, named by its round's action when the engine passes it.
        onBackendError: (error: unknown, action: string) => {
          this.#emit('backendError', { error, operation: REDLOCK_OPERATIONS[action] ?? 'acquire' });
        },
        eviction: new EvictionCheck(
          stores.map((n) => n.store),
          unsafeConfig,
          onEvictionCheckError,
        ),
      });
      this.#noJobs = NO_JOBS_ON_REDLOCK;
      this.#engineFor = (limit) => {
        if (limit === undefined) throw replicasOnRedlock();
        throw notOnRedlock(limit);
      };
    } else {
      const { store, owned } = resolveStore(backend, backendOptions);
      const eviction = new EvictionCheck([store], unsafeConfig, onEvictionCheckError);
      // Every waiter of one store is queued there and named by the hand-off: a release with
      // nobody queued has nobody to tell.
      // A release grants the lock outright to a waiter of this same instance (see HandOn.direct).
      const handOn: HandOn = Object.freeze({
        reservation: DEFAULTS.reservation,
        announce: false,
        direct: true,
      });
      const noReplicas = () => invalidArgument(`\`replicas\`: the ${store.kind} store has no replicas to wait for`);
      if (replication && portsOf(store).replication === undefined) throw noReplicas();
      const single = { ...common, handOn, eviction, replication };
      this.#engine = new Single(mutex, store, owned, single);
      this.#engineFor = (limit, replicas) => {
        if (replicas && portsOf(store).replication === undefined) throw noReplicas();
        const options = { ...single, replication: replicas };
        if (limit === undefined) return new Single(mutex, store, false, options);
        const primitive = limit === 'shared' ? sharedMode(handOn) : semaphore(limit, handOn);
        if (!primitive.supports(store)) {
          throw invalidArgument(
            `this ${store.kind} store cannot run a ${primitive.kind}: it has no shared holds ` +
              '(acquireShared, extendShared, releaseShared, leaveShared, inspectShared); Redis and the MemoryStore have them',
          );
        }
        return new Single(primitive, store, false, options);
      };
      const runsJobs = portsOf(store).jobs !== undefined;
      const jobOptions = { ...common, handOn, gate: () => eviction.gate() };
      this.#jobs = runsJobs ? new JobLock(store as Store & JobStore, jobOptions) : undefined;
      this.#noJobs = `this ${store.kind} store cannot run scheduled jobs (it has no claimTick/finishTick/readJob)`;
    }
    this.#waits = new WaitQueues({ reservation: DEFAULTS.reservation, onError: onSubscriberError });
    this.#loop = new AcquireLoop({
      waits: this.#waits,
      closing: this.#closing.signal,
      isClosed: () => this.#closed,
      onLeaveError: (error) => this.#emit('backendError', { error, operation: 'leave-queue' }),
    });
    this.#context = this.#contextFor(this.#engine);
  }

  /** What the Lock handles of `engine` call back through: its extend and release, and this instance's events. */
  #contextFor(engine: LockEngine): LockContext {
    return {
      keeper: this.#keeper,
      driftFactor: this.#common.driftFactor,
      instance: this.#common.instance,
      extend: (name, owner, ttl) => engine.extend(name, owner, ttl),
      release: async (lock) => {
        const released = await engine.release(lock.name, lock.owner);
        if (this.listenerCount('released') > 0) {
          this.#emit('released', { name: lock.name, fencingToken: lock.fencingToken, released });
        }
        return released;
      },
      onLost: (lock, error) => this.#emit('lost', { name: lock.name, fencingToken: lock.fencingToken, error }),
      onExtended: (lock) =>
        this.#emit('extended', { name: lock.name, fencingToken: lock.fencingToken, expiresIn: lock.expiresIn() }),
      onExtendError: (lock, error) =>
        this.#emit('extendFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
      onDone: (lock) => {
        this.#held.delete(lock);
      },
    };
  }

  /** The engine and Lock context for what `o` asks for: the mutex, a semaphore or a read-write lock's shared mode. */
  #variant(o: Resolved): Variant {
    const limit = o.mode === 'shared' ? 'shared' : o.limit;
    const asked = o.replication ?? this.#replication;
    const replication = asked && asked.replicas > 0 ? asked : undefined;
    // A call's own replica settings differ from the instance's: an engine of their own.
    const own = o.replication !== undefined && JSON.stringify(replication) !== JSON.stringify(this.#replication);
    if (limit === undefined && !own) return { kind: 'mutex', engine: this.#engine, context: this.#context };
    // One engine per kind and replica setting, on the same store(s), made on first use.
    const key = own ? `${limit ?? 'mutex'} ${JSON.stringify(replication ?? null)}` : (limit as number | 'shared');
    let variant = this.#variants.get(key);
    if (!variant) {
      const engine = this.#engineFor(limit, replication);
      const kind = limit === undefined ? 'mutex' : limit === 'shared' ? 'read-write lock' : 'semaphore';
      variant = { kind, engine, context: this.#contextFor(engine) };
      this.#variants.set(key, variant);
    }
    return variant;
  }

  /** Emit without letting a throwing listener break the lease state machine or a timer. */
  #emit<K extends keyof LeaseholdEvents>(event: K, ...args: LeaseholdEvents[K]): void {
    if (event === 'backendError' && channels.backendError.hasSubscribers) {
      const [{ error, operation }] = args as LeaseholdEvents['backendError'];
      channels.backendError.publish({ instance: this.#common.instance, operation, error });
    }
    emitSafely(() => (this.emit as (e: K, ...a: LeaseholdEvents[K]) => boolean)(event, ...args));
  }

  #resolve(options: unknown, entry: EntryPoint, waits: boolean): Resolved {
    if (this.#closed) throw closedError();
    const o = validate.options(options, `${entry} options`, OPTION_KEYS[entry]);
    const reentrant = validate.optionalBoolean(o.reentrant, 'reentrant', false);
    const kind = validate.lockKind(o.limit, o.mode, reentrant);
    return {
      ttl: validate.optionalTtl(o.ttl, 'ttl', this.#common.driftFactor, this.#ttl),
      wait: waits ? validate.optionalDuration(o.wait, 'wait', 0, this.#wait) : 0,
      autoExtend: validate.optionalBoolean(o.autoExtend, 'autoExtend', this.#autoExtend),
      signal: validate.optionalSignal(o.signal),
      reentrant,
      limit: kind.limit,
      mode: kind.mode,
      replication: this.#callReplication(o),
    };
  }

  /** A call's replica options over the instance's; undefined when the call sets none of them. */
  #callReplication(o: Record<string, unknown>): Replication | undefined {
    const own = ['replicas', 'replicaTimeout', 'durability', 'whenNotReplicated'].some((k) => o[k] !== undefined);
    if (!own) return undefined;
    const base = this.#replication;
    const merged = {
      replicas: o.replicas ?? base?.replicas,
      replicaTimeout: o.replicaTimeout ?? base?.timeout,
      durability: o.durability ?? base?.durability,
      whenNotReplicated: o.whenNotReplicated ?? base?.whenShort,
    };
    return validate.replication(merged) ?? NO_REPLICATION;
  }

  /**
   * Acquire `name`, waiting up to `wait` ms while another owner holds it (woken by its release,
   * or by a timer bounded by its remaining lease). Rejects with LockTimeoutError when the wait runs
   * out, StoreUnavailableError when the backend fails, or the signal's reason when aborted.
   */
  async acquire(name: string, options?: AcquireOptions): Promise<Lock> {
    validate.lockName(name);
    return this.#acquire(name, this.#resolve(options, 'acquire', true));
  }

  /** One attempt, never waits: the Lock, or null when another owner holds it. */
  async tryAcquire(name: string, options?: TryAcquireOptions): Promise<Lock | null> {
    validate.lockName(name);
    const resolved = this.#resolve(options, 'tryAcquire', false);
    try {
      return await this.#acquire(name, resolved);
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
  }

  #acquire(name: string, o: Resolved): Promise<Lock> {
    if (o.reentrant) {
      const held = this.#reentrancy.held(name);
      if (held) {
        try {
          return Promise.resolve(held.reenter());
        } catch (error) {
          return Promise.reject(error);
        }
      }
    }
    const started = now();
    const instance = this.#common.instance;
    let variant: Variant;
    try {
      variant = this.#variant(o);
    } catch (error) {
      return Promise.reject(error);
    }
    // Nobody listening: no context, no closures, the acquisition as it is.
    if (!traced(tracing.acquire)) return this.#take1(name, o, started, variant);
    return trace(
      tracing.acquire,
      (): AcquireContext => ({ name, instance, wait: o.wait, ttl: o.ttl, kind: variant.kind }),
      () => this.#take1(name, o, started, variant),
      (ctx, lock) => {
        ctx.owner = lock.owner;
        ctx.fencingToken = lock.fencingToken;
        ctx.waited = Math.round(now() - started);
        ctx.outcome = 'acquired';
      },
      (ctx, error) => {
        ctx.waited = Math.round(now() - started);
        ctx.outcome = outcomeOf(error);
      },
    );
  }

  async #take1(name: string, o: Resolved, started: number, { engine, context }: Variant): Promise<Lock> {
    const owner = newOwnerToken();
    const outcome = await this.#loop.run<Granted, null>({
      name,
      owner,
      wait: o.wait,
      signal: o.signal,
      attempt: async (tries, queue) => {
        const attempt = await engine.attempt(name, owner, o.ttl, tries, queue);
        return attempt.acquired ? { granted: attempt } : { refused: null, ...attempt };
      },
      giveBack: (attempt) => engine.release(name, attempt.owner ?? owner),
      adopt: (grant) => {
        const adopted = engine.adopt?.(owner, o.ttl, grant);
        return adopted?.acquired ? adopted : undefined;
      },
      subscribe: (onHandOff) => engine.watch(name, onHandOff),
      leave: async () => engine.leave?.(name, owner),
    });
    if ('refused' in outcome) throw new LockTimeoutError(name, outcome.waited);
    const attempt = outcome.granted;
    const lock = new Lock(
      {
        name,
        owner: attempt.owner ?? owner,
        fencingToken: attempt.fencingToken,
        ttl: o.ttl,
        validUntil: attempt.validUntil,
        autoExtend: o.autoExtend,
        replicas: attempt.replicas,
      },
      context,
    );
    this.#held.add(lock);
    if (this.listenerCount('acquired') > 0) {
      this.#emit('acquired', { name, fencingToken: lock.fencingToken, waited: Math.round(now() - started) });
    }
    return lock;
  }

  /**
   * Acquire (waiting per `wait`), run `work`, always release. The lease is extended while the work
   * runs, and `signal` aborts if it is lost. The work's own error is never replaced by a release
   * error; a failed release after the work is reported as a `releaseFailed` event, not thrown
   * (throwing would invite a caller to retry work that already ran).
   */
  withLock<T>(name: string, work: Work<T>): Promise<T>;
  withLock<T>(name: string, options: WithLockOptions & { whenUnavailable?: 'fail' }, work: Work<T>): Promise<T>;
  withLock<T>(
    name: string,
    options: WithLockOptions & { whenUnavailable: 'run' },
    work: Work<T, Lock | null>,
  ): Promise<T>;
  withLock<T>(
    name: string,
    options: WithLockOptions & { whenUnavailable: 'skip' },
    work: Work<T>,
  ): Promise<T | undefined>;
  withLock<T>(name: string, options: WithLockOptions, work: Work<T, Lock | null>): Promise<T | undefined>;
  async withLock<T>(
    name: string,
    optionsOrWork: WithLockOptions | Work<T, never>,
    maybeWork?: Work<T, never>,
  ): Promise<T | undefined> {
    const taken = await this.#take(name, optionsOrWork, maybeWork, 'withLock', true);
    if (taken.kind === 'held') return this.#runHeld(taken.lock, taken.work, taken.reentrant);
    if (taken.kind === 'skip') return undefined;
    return taken.work(NEVER_ABORTED, null);
  }

  /**
   * Never waits: runs `work` under the lock if it is free, else reports why it did not run.
   * With `whenUnavailable: 'fail'` (the default) an unreachable backend rejects with StoreUnavailableError.
   */
  tryWithLock<T>(name: string, work: Work<T>): Promise<TryResult<T>>;
  tryWithLock<T>(
    name: string,
    options: TryWithLockOptions & { whenUnavailable?: 'fail' | 'skip' },
    work: Work<T>,
  ): Promise<TryResult<T>>;
  tryWithLock<T>(name: string, options: TryWithLockOptions, work: Work<T, Lock | null>): Promise<TryResult<T>>;
  async tryWithLock<T>(
    name: string,
    optionsOrWork: TryWithLockOptions | Work<T, never>,
    maybeWork?: Work<T, never>,
  ): Promise<TryResult<T>> {
    let taken: Taken<T>;
    try {
      taken = await this.#take(name, optionsOrWork, maybeWork, 'tryWithLock', false);
    } catch (error) {
      if (error instanceof LockTimeoutError) return { ran: false, reason: 'locked' };
      throw error;
    }
    if (taken.kind === 'held') {
      return { ran: true, value: await this.#runHeld(taken.lock, taken.work, taken.reentrant) };
    }
    if (taken.kind === 'skip') return { ran: false, reason: 'unavailable' };
    return { ran: true, value: await taken.work(NEVER_ABORTED, null) };
  }

  /**
   * withLock and tryWithLock up to the work: the arguments checked, the lock acquired, or what
   * `whenUnavailable` says to do when the backend is unreachable.
   */
  async #take<T>(
    name: string,
    optionsOrWork: WithLockOptions | Work<T, never>,
    maybeWork: Work<T, never> | undefined,
    what: 'withLock' | 'tryWithLock',
    waits: boolean,
  ): Promise<Taken<T>> {
    const [options, work] =
      typeof optionsOrWork === 'function' ? [undefined, optionsOrWork] : [optionsOrWork, maybeWork];
    validate.lockName(name);
    validate.optionsOrWork(optionsOrWork, what);
    validate.fn(work, `${what} work`);
    const resolved = this.#resolve(options, what, waits);
    const o = options as Record<string, unknown> | undefined;
    const whenUnavailable = validate.optionalWhenUnavailable(o?.whenUnavailable, TRY_WHEN_UNAVAILABLE);
    const run = work as Work<T, Lock | null>;
    try {
      const lock = await this.#acquire(name, resolved);
      return { kind: 'held', lock, work: run, reentrant: resolved.reentrant };
    } catch (error) {
      if (!(error instanceof StoreUnavailableError) || whenUnavailable === 'fail') throw error;
      return whenUnavailable === 'skip' ? { kind: 'skip' } : { kind: 'unlocked', work: run };
    }
  }

  async #runHeld<T>(lock: Lock, work: Work<T, Lock | null>, reentrant = false): Promise<T> {
    try {
      // A reentrant hold carries the lease in the work's async context, for nested acquisitions.
      if (reentrant) return await this.#reentrancy.run(lock, async () => work(lock.signal, lock));
      return await work(lock.signal, lock);
    } catch (error) {
      throw workFailure(error, lock.signal);
    } finally {
      await lock
        .release()
        .catch((error: unknown) =>
          this.#emit('releaseFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
        );
    }
  }

  /**
   * Acquire every lock of `names` (all or nothing), waiting up to `wait` ms in all. The names are
   * taken in one fixed global order (sorted), so two callers asking for overlapping sets in any
   * order cannot wait on each other in a cycle; when one lock cannot be had in time, those taken
   * are released before the error reaches the caller. Each lock has its own owner and fencing token.
   */
  async acquireAll(names: readonly string[], options?: AcquireAllOptions): Promise<MultiLock> {
    const list = validate.lockNames(names);
    const o = this.#resolve(options, 'acquireAll', true);
    const deadline = now() + o.wait;
    const order = [...list].sort();
    const taken = new Map<string, Lock>();
    try {
      for (const name of order) {
        const wait = Math.max(0, Math.round(deadline - now()));
        taken.set(name, await this.#acquire(name, { ...o, wait }));
      }
    } catch (error) {
      await Promise.allSettled([...taken.values()].map((lock) => lock.release()));
      throw error;
    }
    return new MultiLock(list.map((name) => taken.get(name) as Lock));
  }

  /**
   * acquireAll, run `work`, always release every lock. `signal` aborts when any lease is lost. A
   * failed release after the work is a `releaseFailed` event per lock, never thrown.
   */
  async withLocks<T>(
    names: readonly string[],
    options: AcquireAllOptions | undefined,
    work: (signal: AbortSignal, all: MultiLock) => Promise<T> | T,
  ): Promise<T> {
    validate.fn(work, 'withLocks work');
    validate.options(options, 'withLocks options', OPTION_KEYS.withLocks);
    const all = await this.acquireAll(names, options);
    try {
      return await work(all.signal, all);
    } catch (error) {
      throw workFailure(error, all.signal);
    } finally {
      await Promise.all(
        all.locks.map((lock) =>
          lock
            .release()
            .catch((error: unknown) =>
              this.#emit('releaseFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
            ),
        ),
      );
    }
  }

  /**
   * Leader election on the lock `name`: campaign (FIFO among the candidates of every instance), and
   * while this instance leads run `work` with a signal that aborts when leadership ends (the lease
   * lost, or stop()). A term lasts until the work settles, the lease is lost or stop() is called;
   * the lock is released once the work has settled (at most `stopTimeout` after its signal aborted;
   * past it the lock is released anyway and `overran` is emitted), which hands leadership to the
   * next candidate at once, and unless stopped this instance campaigns again once its work has
   * settled. Options: `ttl`, `autoExtend` (as for acquire) and `stopTimeout`.
   */
  lead(name: string, work: (signal: AbortSignal, lock: Lock) => unknown, options?: LeadOptions): Leadership {
    validate.lockName(name);
    validate.fn(work, 'lead work');
    const o = this.#resolve(options, 'lead', false);
    const stopTimeout = validate.optionalDuration(options?.stopTimeout, 'stopTimeout', 0, DEFAULTS.leadStopTimeout);
    const campaignWait = Math.max(this.#wait, 1);
    return new Leadership(
      {
        name,
        campaign: (signal) => this.#acquire(name, { ...o, wait: campaignWait, signal, reentrant: false }),
        retryDelay: DEFAULTS.resubscribeDelay,
        stopTimeout,
        run: (lock, fn) => this.#reentrancy.run(lock, fn),
      },
      work,
    );
  }

  /**
   * Run `task` at every tick of `when` (a cron expression, 5 fields or 6 with seconds; or an
   * interval in ms, aligned to the epoch) on exactly one of the instances that schedule the same
   * job name: at each tick, the instance that claims the tick in the store runs it, the others
   * skip it (`jobSkipped`). A tick is identified by the job's name and its scheduled time, so an
   * instance that fires late never runs a tick another instance already ran. A task's error is a
   * `jobFailed` event and never stops the job. Single-store instances only (not Redlock).
   */
  schedule<T>(name: string, when: string | number, task: JobTask<T>, options?: ScheduleOptions): Job {
    return this.#schedulerFor().schedule(name, when, task, options);
  }

  /**
   * Run `task` once under the job lock `name` unless another instance holds it (or, with `tick`,
   * already ran that tick). Resolves `{ ran: false, reason }` when it did not run; rejects with
   * the task's own error when it threw.
   */
  async runOnce<T>(name: string, task: JobTask<T>, options?: RunOnceOptions): Promise<RunOnceResult<T>> {
    return this.#schedulerFor().runOnce<T>(name, task, options);
  }

  /** The runs of job `name` across every instance, newest first (default limit 50). */
  async jobHistory(name: string, limit?: number): Promise<RunRecord[]> {
    return this.#schedulerFor().history(name, limit);
  }

  /** A node-cron v4 run coordinator on this instance: each fire of a named distributed task runs once. */
  nodeCronCoordinator(options?: NodeCronCoordinatorOptions): NodeCronCoordinator {
    return this.#schedulerFor().nodeCronCoordinator(options);
  }

  #schedulerFor(): Scheduler {
    if (this.#closed) throw closedError();
    this.#scheduler ??= new Scheduler({
      jobs: this.#jobs,
      noJobs: this.#noJobs,
      loop: this.#loop,
      ...this.#common,
      context: this.#context,
      adopt: (lock) => {
        this.#held.add(lock);
        this.#emit('acquired', { name: lock.name, fencingToken: lock.fencingToken, waited: 0 });
      },
      // JobEvents[K] is LeaseholdEvents[K] for every job event; TypeScript cannot see it for a generic K.
      emit: (event, ...args) => this.#emit(event, ...(args as LeaseholdEvents[typeof event])),
      onReleased: (lock, released) =>
        this.#emit('released', { name: lock.name, fencingToken: lock.fencingToken, released }),
      onReleaseFailed: (lock, error) =>
        this.#emit('releaseFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
      isClosed: () => this.#closed,
    });
    return this.#scheduler;
  }

  /** Locks this instance holds right now. */
  get heldCount(): number {
    return this.#held.size;
  }

  /** @internal For tests: timers kept and wait queues open. */
  get internals(): { timers: number; waitQueues: number; held: number } {
    return { timers: this.#keeper.size, waitQueues: this.#waits.size, held: this.#held.size };
  }

  /**
   * Reject every acquisition still waiting with LockError `CLOSED` and wait until each has left the
   * backend's queue; stop every watchdog timer (held locks' signals abort with reason 'closed';
   * their leases end by ttl); close the subscriber connection this instance opened. Never closes
   * the caller's client, so `await locks.close(); await client.quit()` leaves nothing behind.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort(closedError());
    this.#scheduler?.close();
    await this.#loop.drained();
    this.#keeper.stopAll();
    for (const lock of [...this.#held]) lock.abandon();
    this.#held.clear();
    this.#waits.close();
    await this.#engine.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
