import type { LockLostError } from '../core/errors.js';
import type { JobEvents } from '../schedule/types.js';

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
