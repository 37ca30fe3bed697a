import type { Lock, LockContext } from '../locks/lock.js';
import type { HandOn, Store } from '../store/port.js';
import type { JobEvents } from './types.js';

/**
 * What the scheduler needs from the Leasehold instance it belongs to: its one store, its settings,
 * and its lock context (lease keeper and lock events), so job locks are ordinary Lock handles kept
 * by the same watchdog and abandoned by the same close().
 */
export interface SchedulerHost {
  /** The instance's one store; undefined for Redlock (several stores), which cannot run jobs. */
  readonly store: Store | undefined;
  readonly prefix: string;
  /** The instance's label: the default of a job's `instance`, recorded next to its lease. */
  readonly instance: string;
  readonly fenceRetention: number;
  /** How a finished run's lock is handed on: as the mutex hands on a released lock. */
  readonly handOn: HandOn;
  /** The store's configuration check before a claim (the eviction policy); undefined once passed. */
  gate(): Promise<void> | undefined;
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
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
