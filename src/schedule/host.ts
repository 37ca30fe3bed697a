import type { AcquireLoop } from '../core/acquire-loop.js';
import type { Lock, LockContext } from '../core/lock.js';
import type { JobLock } from '../primitives/job-lock.js';
import type { JobEvents } from './types.js';

/**
 * What the scheduler needs from the Leasehold instance it belongs to: its one store, its settings,
 * and its lock context (lease keeper and lock events), so job locks are ordinary Lock handles kept
 * by the same watchdog and abandoned by the same close().
 */
export interface SchedulerHost {
  /** The job lock on the instance's one store; undefined where jobs cannot run (Redlock, a store without JobStore). */
  readonly jobs: JobLock | undefined;
  /** Why jobs cannot run here, when `jobs` is undefined. */
  readonly noJobs: string;
  /** The instance's acquire loop: a claim is an acquisition that tries once. */
  readonly loop: AcquireLoop;
  /** The instance's label: the default of a job's `instance`, recorded next to its lease. */
  readonly instance: string;
  readonly driftFactor: number;
  readonly context: LockContext;
  /** Count a claimed job lock among the instance's held locks (close() abandons them) and announce it ('acquired'). */
  adopt(lock: Lock): void;
  emit<K extends keyof JobEvents>(event: K, ...args: JobEvents[K]): void;
  /** A job lock's lease ended (`released`: it was still ours to end). */
  onReleased(lock: Lock, released: boolean): void;
  /** A job lock could not be finished (the lease then ends by its ttl). */
  onReleaseFailed(lock: Lock, error: unknown): void;
  isClosed(): boolean;
}
