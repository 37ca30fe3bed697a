import type { LockLostError } from '../core/errors.js';
import type { Lock } from '../core/lock.js';

/** What a job's task is told about the run it is in. */
export interface JobRun {
  /** The job's name, which is also its lock's name. */
  readonly name: string;
  /** The tick's scheduled time (its identity, with the name); null for `runOnce` without `tick`. */
  readonly tick: Date | null;
  /** The held lock (signal, fencing token, expiresIn, extend); null when run unlocked by `whenUnavailable: 'run'`. Do not release it: the scheduler does. */
  readonly lock: Lock | null;
  /** The run's fencing token, for the resource the task writes to; null when run unlocked. */
  readonly fencingToken: number | null;
  /** This instance's name, as the run history records it. */
  readonly instance: string;
}

/** A run that holds its lock: what `assertLocked()` returns. */
export interface HeldJobRun extends JobRun {
  readonly lock: Lock;
  readonly fencingToken: number;
}

/** A job's work. `signal` aborts (with a LockLostError) if the run's lease is lost. */
export type JobTask<T = unknown> = (signal: AbortSignal, run: JobRun) => Promise<T> | T;

/**
 * Why a tick did not run here: `locked` (the job's lock is held: a run in progress, or kept by
 * lockAtLeastFor), `already-ran` (this tick or a later one was already claimed), `unavailable`
 * (the backend could not be reached, with `whenUnavailable: 'skip'`), `clock-skew` (this
 * instance's clock runs ahead of the store's by more than `clockTolerance`: the tick is not due
 * yet), `error` (the backend answered with an error, e.g. WRONGTYPE because the key is used by
 * something else).
 */
export type SkipReason = 'locked' | 'already-ran' | 'unavailable' | 'clock-skew' | 'error';

export type RunOnceResult<T> =
  | { readonly ran: true; readonly value: T }
  | { readonly ran: false; readonly reason: Exclude<SkipReason, 'error'> };

export interface JobEvent {
  readonly name: string;
  readonly tick: Date | null;
  readonly instance: string;
}

/** The scheduler's events on the Leasehold instance. */
export interface JobEvents {
  /** A run's task finished without throwing; `fencingToken` is null when it ran unlocked. `duration` in ms. */
  jobRun: [JobEvent & { readonly fencingToken: number | null; readonly duration: number }];
  /** A tick did not run on this instance, and why. */
  jobSkipped: [JobEvent & { readonly reason: SkipReason; readonly error?: unknown }];
  /** A run's task threw (or rejected). The scheduler carries on with the next tick. */
  jobFailed: [JobEvent & { readonly fencingToken: number | null; readonly duration: number; readonly error: unknown }];
  /** A run's lease was lost while its task ran; its signal aborted with `error`. */
  jobLost: [JobEvent & { readonly fencingToken: number; readonly error: LockLostError }];
}
