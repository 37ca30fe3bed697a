import { EventEmitter, setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { now } from './core/clock.js';
import { DEFAULTS, type UnsafeConfig, type WhenUnavailable } from './core/defaults.js';
import type { LockEngine } from './core/engine.js';
import { closedError, type LockLostError, LockTimeoutError, RedisUnavailableError } from './core/errors.js';
import { LeaseKeeper } from './core/lease-keeper.js';
import { newOwnerToken } from './core/owner.js';
import * as validate from './core/validate.js';
import { type Subscribe, WaitQueues } from './core/waiting.js';
import { Lock, type LockContext } from './locks/lock.js';
import { MutexEngine } from './locks/mutex.js';
import { RedlockEngine } from './locks/redlock.js';
import type { RunRecord } from './schedule/history.js';
import type { Job } from './schedule/job.js';
import type { NodeCronCoordinator } from './schedule/node-cron.js';
import type { NodeCronCoordinatorOptions, RunOnceOptions, ScheduleOptions } from './schedule/options.js';
import { Scheduler } from './schedule/scheduler.js';
import type { JobEvents, JobTask, RunOnceResult } from './schedule/types.js';
import { EvictionCheck } from './store/eviction-check.js';
import { type Backend, resolveStore } from './store/registry.js';

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
  /** A backend call unanswered after this many ms fails with RedisUnavailableError. Default 2_000. */
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
  /** Redlock: how many nodes must agree. Default ⌊N/2⌋+1. */
  quorum?: number;
  /**
   * Redlock: ms one node has to answer one call before it counts as failed, so a slow or frozen
   * node costs little of the lease. Default min(100, ttl / 10, commandTimeout).
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
}

export type TryAcquireOptions = Omit<AcquireOptions, 'wait'>;

export interface WithLockOptions extends AcquireOptions {
  /**
   * When the backend is unreachable: `'fail'` rejects with RedisUnavailableError (fail closed: for
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
const NEVER_ABORTED = new AbortController().signal;

interface Resolved {
  readonly ttl: number;
  readonly wait: number;
  readonly autoExtend: boolean;
  readonly signal: AbortSignal | undefined;
}

/**
 * Locks and leases on one Redis (a client or a cluster), on several independent Redis masters
 * (Redlock, when given an array), or on a Store such as `new MemoryStore()`.
 */
export class Leasehold extends EventEmitter<LeaseholdEvents> {
  readonly #engine: LockEngine;
  readonly #keeper = new LeaseKeeper();
  readonly #waits: WaitQueues;
  readonly #held = new Set<Lock>();
  readonly #ttl: number;
  readonly #wait: number;
  readonly #autoExtend: boolean;
  readonly #context: LockContext;
  #closed = false;
  readonly #common: {
    prefix: string;
    commandTimeout: number;
    driftFactor: number;
    driftConstant: number;
    instance: string;
    fenceRetention: number;
  };
  /** Aborted by close(): every parked acquisition rejects with CLOSED at once (each listens to it). */
  readonly #closing = closingController();
  /** Acquisitions in progress: close() resolves only once each has left the backend's queue. */
  #active = 0;
  #drained: (() => void) | undefined;
  #scheduler: Scheduler | undefined;

  constructor(backend: Backend | readonly Backend[], options?: LeaseholdOptions) {
    super();
    const o = validate.options(options, 'Leasehold options');
    const driftFactor = validate.optionalFraction(o.driftFactor, 'driftFactor', DEFAULTS.driftFactor);
    this.#ttl = validate.optionalTtl(o.ttl, 'ttl', driftFactor, DEFAULTS.ttl);
    this.#wait = validate.optionalDuration(o.wait, 'wait', 0, DEFAULTS.wait);
    this.#autoExtend = validate.optionalBoolean(o.autoExtend, 'autoExtend', DEFAULTS.autoExtend);
    const failed = (operation: BackendOperation) => (error: unknown) =>
      this.#emit('backendError', { error, operation });
    const onSubscriberError = failed('wait');
    const onEvictionCheckError = failed('check-eviction-policy');
    const common = {
      prefix: validate.prefix(o.prefix),
      commandTimeout: validate.optionalDuration(o.commandTimeout, 'commandTimeout', 1, DEFAULTS.commandTimeout),
      driftFactor,
      driftConstant: DEFAULTS.driftConstant,
      instance: validate.instance(o.instance, defaultInstance()),
      fenceRetention: validate.optionalDuration(o.fenceRetention, 'fenceRetention', 1, DEFAULTS.fenceRetention),
    };
    const unsafeConfig = validate.unsafeConfig(o.unsafeConfig);
    this.#common = common;
    if (Array.isArray(backend)) {
      if (backend.length === 0) throw validate.invalidBackends();
      validate.distinctBackends(backend);
      const stores = backend.map((b: unknown) => resolveStore(b, onSubscriberError));
      this.#engine = new RedlockEngine(stores, {
        ...common,
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
    } else {
      const { store, owned } = resolveStore(backend, onSubscriberError);
      const eviction = new EvictionCheck([store], unsafeConfig, onEvictionCheckError);
      this.#engine = new MutexEngine(store, owned, { ...common, eviction });
    }
    this.#waits = new WaitQueues({ reservation: DEFAULTS.reservation, onError: onSubscriberError });
    this.#context = {
      keeper: this.#keeper,
      driftFactor,
      extend: (name, owner, ttl) => this.#engine.extend(name, owner, ttl),
      release: async (lock) => {
        const released = await this.#engine.release(lock.name, lock.owner);
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

  /** Emit without letting a throwing listener break the lease state machine or a timer. */
  #emit<K extends keyof LeaseholdEvents>(event: K, ...args: LeaseholdEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: LeaseholdEvents[K]) => boolean)(event, ...args);
    } catch (error) {
      process.nextTick(() => {
        throw error;
      });
    }
  }

  #resolve(options: unknown, what: string, waits: boolean): Resolved {
    if (this.#closed) throw closedError();
    const o = validate.options(options, what);
    return {
      ttl: validate.optionalTtl(o.ttl, 'ttl', this.#common.driftFactor, this.#ttl),
      wait: waits ? validate.optionalDuration(o.wait, 'wait', 0, this.#wait) : 0,
      autoExtend: validate.optionalBoolean(o.autoExtend, 'autoExtend', this.#autoExtend),
      signal: validate.optionalSignal(o.signal),
    };
  }

  /**
   * Acquire `name`, waiting up to `wait` ms while another owner holds it (woken by its release,
   * or by a timer bounded by its remaining lease). Rejects with LockTimeoutError when the wait runs
   * out, RedisUnavailableError when the backend fails, or the signal's reason when aborted.
   */
  async acquire(name: string, options?: AcquireOptions): Promise<Lock> {
    validate.lockName(name);
    return this.#acquire(name, this.#resolve(options, 'acquire options', true));
  }

  /** One attempt, never waits: the Lock, or null when another owner holds it. */
  async tryAcquire(name: string, options?: TryAcquireOptions): Promise<Lock | null> {
    validate.lockName(name);
    const resolved = this.#resolve(options, 'tryAcquire options', false);
    try {
      return await this.#acquire(name, resolved);
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
  }

  async #acquire(name: string, o: Resolved): Promise<Lock> {
    const { signal } = o;
    if (signal?.aborted) throw signal.reason;
    const closing = this.#closing.signal;
    const owner = newOwnerToken();
    const started = now();
    const deadline = started + o.wait;
    // A caller that will wait joins the backend's queue when refused, so releases hand the lock
    // on in arrival order across every instance.
    const queue = o.wait > 0;
    const subscribe: Subscribe = (onMessage) => this.#engine.subscribe(name, onMessage);
    // Already listening on this lock: register before the first attempt, so a release that names
    // this waiter right after that attempt is not missed. Otherwise subscribe only if refused.
    let waiter = queue && this.#waits.listening(name) ? this.#waits.join(name, owner, subscribe) : undefined;
    let tries = 0;
    let acquired = false;
    /** Refused while queueing: the backend holds a queue entry for us until we leave. */
    let queued = false;
    this.#active += 1;
    try {
      const firstSentAt = now();
      const first = await this.#try(name, owner, o, started, tries++, queue);
      if (first.lock) {
        acquired = true;
        return first.lock;
      }
      if (!queue) throw new LockTimeoutError(name, 0);
      queued = true;
      let holdOffUntil = Math.min(now() + first.holdOff, deadline);
      waiter ??= this.#waits.join(name, owner, subscribe);
      await waiter.ready(signal, closing);
      // Unless the subscription was live before the first attempt was sent, a release since may
      // have gone unheard: try again at once.
      const liveSince = waiter.liveSince;
      let tryNow = liveSince === undefined || liveSince > firstSentAt;
      let retryIn = first.retryIn;
      for (;;) {
        if (tryNow) {
          // After a split vote no retry comes before the hold-off ends, even if a release is announced.
          while (now() < holdOffUntil) await waiter.park(holdOffUntil - now(), signal, closing);
          if (signal?.aborted) throw signal.reason;
          waiter.trying();
          const next = await this.#try(name, owner, o, started, tries++, queue);
          if (next.lock) {
            acquired = true;
            return next.lock;
          }
          retryIn = next.retryIn;
          holdOffUntil = Math.min(now() + next.holdOff, deadline);
        }
        tryNow = true;
        const remaining = deadline - now();
        if (remaining <= 0) throw new LockTimeoutError(name, Math.round(now() - started));
        const hint = retryIn >= 0 ? retryIn + DEFAULTS.expiryMargin : remaining;
        await waiter.park(Math.min(hint, remaining), signal, closing);
      }
    } finally {
      waiter?.leave();
      // Gave up (timed out, aborted, failed, closed): leave the backend's queue, passing on a
      // reservation, before the caller hears why, so a release right after cannot pick us.
      if (queued && !acquired && this.#engine.leave) {
        await this.#engine
          .leave(name, owner)
          .catch((error: unknown) => this.#emit('backendError', { error, operation: 'leave-queue' }));
      }
      this.#active -= 1;
      if (this.#active === 0) this.#drained?.();
    }
  }

  async #try(
    name: string,
    owner: string,
    o: Resolved,
    started: number,
    tries: number,
    queue: boolean,
  ): Promise<{ lock?: Lock; retryIn: number; holdOff: number }> {
    if (this.#closed) throw closedError();
    const attempt = await this.#engine.attempt(name, owner, o.ttl, tries, queue);
    if (!attempt.acquired) return { retryIn: attempt.retryIn, holdOff: attempt.holdOff ?? 0 };
    const holder = attempt.owner ?? owner;
    if (this.#closed || o.signal?.aborted) {
      // Won the lock but nobody will use it: give it back before reporting why.
      await this.#engine.release(name, holder).catch(() => undefined);
      if (this.#closed) throw closedError();
      throw o.signal?.reason;
    }
    const lock = new Lock(
      {
        name,
        owner: holder,
        fencingToken: attempt.fencingToken,
        ttl: o.ttl,
        validUntil: attempt.validUntil,
        autoExtend: o.autoExtend,
      },
      this.#context,
    );
    this.#held.add(lock);
    if (this.listenerCount('acquired') > 0) {
      this.#emit('acquired', { name, fencingToken: lock.fencingToken, waited: Math.round(now() - started) });
    }
    return { lock, retryIn: 0, holdOff: 0 };
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
    const [options, work] =
      typeof optionsOrWork === 'function' ? [undefined, optionsOrWork] : [optionsOrWork, maybeWork];
    validate.lockName(name);
    validate.fn(work, 'withLock work');
    const o = validate.options(options, 'withLock options');
    const whenUnavailable = validate.optionalWhenUnavailable(o.whenUnavailable, TRY_WHEN_UNAVAILABLE);
    const resolved = this.#resolve(options, 'withLock options', true);
    let lock: Lock;
    try {
      lock = await this.#acquire(name, resolved);
    } catch (error) {
      if (!(error instanceof RedisUnavailableError) || whenUnavailable === 'fail') throw error;
      if (whenUnavailable === 'skip') return undefined;
      return (work as Work<T, Lock | null>)(NEVER_ABORTED, null);
    }
    return this.#runHeld(lock, work as Work<T, Lock | null>);
  }

  /**
   * Never waits: runs `work` under the lock if it is free, else reports why it did not run.
   * With `whenUnavailable: 'fail'` (the default) an unreachable backend rejects with RedisUnavailableError.
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
    const [options, work] =
      typeof optionsOrWork === 'function' ? [undefined, optionsOrWork] : [optionsOrWork, maybeWork];
    validate.lockName(name);
    validate.fn(work, 'tryWithLock work');
    const o = validate.options(options, 'tryWithLock options');
    const whenUnavailable = validate.optionalWhenUnavailable(o.whenUnavailable, TRY_WHEN_UNAVAILABLE);
    const resolved = this.#resolve(options, 'tryWithLock options', false);
    let lock: Lock;
    try {
      lock = await this.#acquire(name, resolved);
    } catch (error) {
      if (error instanceof LockTimeoutError) return { ran: false, reason: 'locked' };
      if (!(error instanceof RedisUnavailableError) || whenUnavailable === 'fail') throw error;
      if (whenUnavailable === 'skip') return { ran: false, reason: 'unavailable' };
      return { ran: true, value: await (work as Work<T, Lock | null>)(NEVER_ABORTED, null) };
    }
    return { ran: true, value: await this.#runHeld(lock, work as Work<T, Lock | null>) };
  }

  async #runHeld<T>(lock: Lock, work: Work<T, Lock | null>): Promise<T> {
    try {
      return await work(lock.signal, lock);
    } finally {
      await lock
        .release()
        .catch((error: unknown) =>
          this.#emit('releaseFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
        );
    }
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
    const mutex = this.#engine instanceof MutexEngine ? this.#engine : undefined;
    this.#scheduler ??= new Scheduler({
      store: mutex?.store,
      handOn: mutex?.handOn ?? { reservation: DEFAULTS.reservation, announce: false },
      gate: () => mutex?.gate(),
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
    if (this.#active > 0) {
      await new Promise<void>((resolve) => {
        this.#drained = resolve;
      });
    }
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
