import { EventEmitter } from 'node:events';
import { DEFAULTS, defaultInstance } from './core/defaults.js';
import { channels } from './core/diagnostics.js';
import { emitSafely } from './core/emit.js';
import { closedError, LockTimeoutError } from './core/errors.js';
import type { Lock } from './core/lock.js';
import { NEVER_ABORTED } from './core/never-aborted.js';
import * as validate from './core/validate.js';
import { Acquisitions } from './facade/acquisition.js';
import type { BackendOperation, LeaseholdEvents } from './facade/events.js';
import {
  type AcquireAllOptions,
  type AcquireOptions,
  type CallDefaults,
  type EntryPoint,
  LEASEHOLD_KEYS,
  type LeadOptions,
  type LeaseholdOptions,
  OPTION_KEYS,
  type Resolved,
  resolveCall,
  type TryAcquireOptions,
  type TryResult,
  type TryWithLockOptions,
  type WithLockOptions,
  type Work,
} from './facade/options.js';
import { acquireAll, runAll, runHeld, type Taken, take, type WorkHost } from './facade/with-lock.js';
import { Leadership } from './primitives/leadership.js';
import type { MultiLock } from './primitives/multi-lock.js';
import { Reentrancy } from './primitives/reentrant.js';
import type { RunRecord } from './schedule/history.js';
import type { Job } from './schedule/job.js';
import type { NodeCronCoordinator } from './schedule/node-cron.js';
import type { NodeCronCoordinatorOptions, RunOnceOptions, ScheduleOptions } from './schedule/options.js';
import { Scheduler } from './schedule/scheduler.js';
import type { JobTask, RunOnceResult } from './schedule/types.js';
import type { Backend } from './store/registry.js';
import { Engines } from './topology/engines.js';

export type { BackendOperation, LeaseholdEvents, LockEvent } from './facade/events.js';
export type {
  AcquireAllOptions,
  AcquireOptions,
  LeadOptions,
  LeaseholdOptions,
  TryAcquireOptions,
  TryResult,
  TryWithLockOptions,
  WithLockOptions,
  Work,
} from './facade/options.js';

/**
 * Locks and leases on one Redis (a client or a cluster), on several independent Redis masters
 * (Redlock, when given an array), or on a Store such as `new MemoryStore()`.
 */
export class Leasehold extends EventEmitter<LeaseholdEvents> {
  readonly #engines: Engines;
  readonly #locks: Acquisitions;
  readonly #reentrancy = new Reentrancy();
  /** What a call falls back on: the instance's ttl, wait, autoExtend, drift and replicas. */
  readonly #defaults: CallDefaults;
  readonly #instance: string;
  /** What the `with…` calls and acquireAll use of this instance (facade/with-lock.ts). */
  readonly #work: WorkHost = {
    resolve: (options, entry, waits) => this.#resolve(options, entry, waits),
    acquire: (name, o) => this.#locks.acquire(name, o),
    reentrancy: this.#reentrancy,
    onReleaseFailed: (lock, error) =>
      this.#emit('releaseFailed', { name: lock.name, fencingToken: lock.fencingToken, error }),
  };
  #closed = false;
  #scheduler: Scheduler | undefined;

  constructor(backend: Backend | readonly Backend[], options?: LeaseholdOptions) {
    super();
    const o = validate.options(options, 'Leasehold options', LEASEHOLD_KEYS);
    const driftFactor = validate.optionalFraction(o.driftFactor, 'driftFactor', DEFAULTS.driftFactor);
    const replication = validate.replication(o);
    this.#defaults = {
      ttl: validate.optionalTtl(o.ttl, 'ttl', driftFactor, DEFAULTS.ttl),
      wait: validate.optionalDuration(o.wait, 'wait', 0, DEFAULTS.wait),
      autoExtend: validate.optionalBoolean(o.autoExtend, 'autoExtend', DEFAULTS.autoExtend),
      driftFactor,
      replication,
    };
    this.#instance = validate.instance(o.instance, defaultInstance());
    this.#engines = new Engines(
      backend,
      {
        prefix: validate.prefix(o.prefix),
        commandTimeout: validate.optionalDuration(o.commandTimeout, 'commandTimeout', 1, DEFAULTS.commandTimeout),
        driftFactor,
        instance: this.#instance,
        fenceRetention: validate.optionalDuration(o.fenceRetention, 'fenceRetention', 1, DEFAULTS.fenceRetention),
        unsafeConfig: validate.unsafeConfig(o.unsafeConfig),
        replication,
        quorum: o.quorum,
        nodeTimeout: o.nodeTimeout === undefined ? undefined : validate.duration(o.nodeTimeout, 'nodeTimeout', 1),
      },
      {
        onBackendError: (error, operation) =>
          this.#emit('backendError', { error, operation: operation as BackendOperation }),
      },
    );
    this.#locks = new Acquisitions(this.#engines, {
      instance: this.#instance,
      driftFactor,
      reentrancy: this.#reentrancy,
      emit: (event, ...args) => this.#emit(event, ...args),
      hears: (event) => this.listenerCount(event) > 0,
    });
  }

  /** Emit without letting a throwing listener break the lease state machine or a timer. */
  #emit<K extends keyof LeaseholdEvents>(event: K, ...args: LeaseholdEvents[K]): void {
    if (event === 'backendError' && channels.backendError.hasSubscribers) {
      const [{ error, operation }] = args as LeaseholdEvents['backendError'];
      channels.backendError.publish({ instance: this.#instance, operation, error });
    }
    emitSafely(() => (this.emit as (e: K, ...a: LeaseholdEvents[K]) => boolean)(event, ...args));
  }

  #resolve(options: unknown, entry: EntryPoint, waits: boolean): Resolved {
    if (this.#closed) throw closedError();
    return resolveCall(options, entry, waits, this.#defaults);
  }

  /**
   * Acquire `name`, waiting up to `wait` ms while another owner holds it (woken by its release,
   * or by a timer bounded by its remaining lease). Rejects with LockTimeoutError when the wait runs
   * out, StoreUnavailableError when the backend fails, or the signal's reason when aborted.
   */
  async acquire(name: string, options?: AcquireOptions): Promise<Lock> {
    validate.lockName(name);
    return this.#locks.acquire(name, this.#resolve(options, 'acquire', true));
  }

  /** One attempt, never waits: the Lock, or null when another owner holds it. */
  async tryAcquire(name: string, options?: TryAcquireOptions): Promise<Lock | null> {
    validate.lockName(name);
    const resolved = this.#resolve(options, 'tryAcquire', false);
    try {
      return await this.#locks.acquire(name, resolved);
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
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
    const taken = await take(this.#work, name, optionsOrWork, maybeWork, 'withLock');
    if (taken.kind === 'held') return runHeld(this.#work, taken.lock, taken.work, taken.reentrant);
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
      taken = await take(this.#work, name, optionsOrWork, maybeWork, 'tryWithLock');
    } catch (error) {
      if (error instanceof LockTimeoutError) return { ran: false, reason: 'locked' };
      throw error;
    }
    if (taken.kind === 'held') {
      return { ran: true, value: await runHeld(this.#work, taken.lock, taken.work, taken.reentrant) };
    }
    if (taken.kind === 'skip') return { ran: false, reason: 'unavailable' };
    return { ran: true, value: await taken.work(NEVER_ABORTED, null) };
  }

  /**
   * Acquire every lock of `names` (all or nothing), waiting up to `wait` ms in all. The names are
   * taken in one fixed global order (sorted), so two callers asking for overlapping sets in any
   * order cannot wait on each other in a cycle; when one lock cannot be had in time, those taken
   * are released before the error reaches the caller. Each lock has its own owner and fencing token.
   */
  async acquireAll(names: readonly string[], options?: AcquireAllOptions): Promise<MultiLock> {
    const list = validate.lockNames(names);
    return acquireAll(this.#work, list, this.#resolve(options, 'acquireAll', true));
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
    return runAll(this.#work, await this.acquireAll(names, options), work);
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
    const campaignWait = Math.max(this.#defaults.wait, 1);
    return new Leadership(
      {
        name,
        campaign: (signal) => this.#locks.acquire(name, { ...o, wait: campaignWait, signal, reentrant: false }),
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
      jobs: this.#engines.jobs,
      noJobs: this.#engines.noJobs,
      loop: this.#locks.loop,
      instance: this.#instance,
      driftFactor: this.#defaults.driftFactor,
      context: this.#locks.contextFor(this.#engines.mutex),
      adopt: (lock) => this.#locks.adopt(lock),
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
    return this.#locks.heldCount;
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
    this.#scheduler?.close();
    await this.#locks.close();
    this.#reentrancy.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
