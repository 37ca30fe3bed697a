import type { RunOnceOptions, ScheduleOptions, WithLockOptions } from '../index.js';

/** @internal The token of the module's runtime, which decorated instances receive by property injection. */
export const LEASEHOLD_RUNTIME: unique symbol = Symbol.for('leasehold/nestjs:runtime');
/** @internal The property of a decorated instance that holds the runtime of its application. */
export const RUNTIME_PROPERTY: unique symbol = Symbol('leasehold/nestjs:runtime');
/** @internal The metadata key of `@ScheduledJob` on a method. */
export const SCHEDULED_JOB: unique symbol = Symbol.for('leasehold/nestjs:scheduled-job');

/** Why a decorated call did not run its method. */
export type SkippedReason = 'locked' | 'unavailable' | 'already-ran' | 'clock-skew' | 'closed';

/**
 * What a call that did not run resolves with: a value, or a function of the reason and the call's
 * arguments that returns it (called with the instance as `this`). Default undefined.
 */
export type Skipped = unknown;

/** Options of `@WithLock`: those of `withLock` (without `signal`), and what to do when the lock is held. */
export interface WithLockDecoratorOptions extends Omit<WithLockOptions, 'signal'> {
  /**
   * The lock is held by someone else: `'throw'` waits up to `wait` ms as `withLock` does, then
   * rejects with LockTimeoutError; `'skip'` never waits, does not call the method and resolves
   * `skipped`, as `tryWithLock` does (`wait` is then refused). Default `'throw'`.
   */
  onLocked?: 'throw' | 'skip';
  /** What a call resolves with when it did not run (locked with `'skip'`; unavailable with `whenUnavailable: 'skip'`). Default undefined. */
  skipped?: Skipped;
}

/** Options of `@Once`: those of `runOnce`; the tick comes from `@Cron`. */
export interface OnceOptions extends Omit<RunOnceOptions, 'tick'> {
  /** What a call resolves with when it did not run: locked, already-ran, unavailable, clock-skew, closed. Default undefined. */
  skipped?: Skipped;
}

/** @internal What `@ScheduledJob` records on a method. */
export interface ScheduledJobMetadata {
  readonly name: string;
  readonly when: string | number;
  readonly options: ScheduleOptions | undefined;
}

/** @internal What `@WithLock` records in its wrapper. */
export interface WithLockSpec {
  readonly where: string;
  readonly name: string | ((...args: never[]) => string);
  readonly skip: boolean;
  readonly options: Omit<WithLockDecoratorOptions, 'onLocked' | 'skipped'>;
  readonly skipped: Skipped;
}

/** @internal What `@Once` records in its wrapper. */
export interface OnceSpec {
  readonly where: string;
  readonly name: string | undefined;
  readonly options: Omit<OnceOptions, 'skipped'>;
  readonly skipped: Skipped;
}
