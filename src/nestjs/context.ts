import { AsyncLocalStorage } from 'node:async_hooks';
import { ErrorCode, type JobRun, type Lock, LockError } from '../index.js';

/** What a method decorated with `@WithLock`, `@Once` or `@ScheduledJob` runs inside. */
export interface LockScope {
  /** The held lock; null when the work runs unlocked (`whenUnavailable: 'run'`). */
  readonly lock: Lock | null;
  /** Aborts when the lease is lost or the application starts shutting down. */
  readonly signal: AbortSignal;
  /** The job run, for `@Once` and `@ScheduledJob`. */
  readonly run: JobRun | null;
}

const scopes = new AsyncLocalStorage<LockScope>();

/** Run `fn` where `heldLock()` and `lockSignal()` answer for `scope`. */
export function inScope<T>(scope: LockScope, fn: () => T): T {
  return scopes.run(scope, fn);
}

function current(what: string): LockScope {
  const scope = scopes.getStore();
  if (!scope) {
    throw new LockError(
      ErrorCode.NOT_LOCKED,
      `${what}() is called outside a method decorated with @WithLock, @Once or @ScheduledJob (or outside its async call chain)`,
    );
  }
  return scope;
}

/**
 * The lock held by the enclosing `@WithLock`, `@Once` or `@ScheduledJob` method (along its async
 * call chain): its `fencingToken` is what the resource should check. Throws a LockError of code
 * `NOT_LOCKED` outside one, or when the method runs unlocked by `whenUnavailable: 'run'`.
 */
export function heldLock(): Lock {
  const { lock } = current('heldLock');
  if (!lock) throw new LockError(ErrorCode.NOT_LOCKED, "this call runs without a lock (whenUnavailable: 'run')");
  return lock;
}

/**
 * The signal of the enclosing `@WithLock`, `@Once` or `@ScheduledJob` method: it aborts when the
 * lease is lost (reason: a LockLostError) or when the application starts shutting down (reason:
 * a LockError of code `CLOSED`). Pass it to `fetch`, database drivers and timers, so that the
 * work stops and the lock is released at once. Throws `NOT_LOCKED` outside such a method.
 */
export function lockSignal(): AbortSignal {
  return current('lockSignal').signal;
}
