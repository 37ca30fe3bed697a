import { AsyncLocalStorage } from 'node:async_hooks';
import { ErrorCode, LockError, LockLostError } from '../core/errors.js';
import type { HeldJobRun } from './types.js';

/** The run whose task is executing, along its async call chain; undefined inside unlocked runs. */
const current = new AsyncLocalStorage<HeldJobRun | undefined>();

/** @internal Run `fn` as the task of `run` (undefined: a run without a lock). */
export function runInScope<T>(run: HeldJobRun | undefined, fn: () => Promise<T>): Promise<T> {
  return current.run(run, fn);
}

/**
 * Throw unless called from a job's task (`schedule`, `runOnce`, or a node-cron task wrapped by the
 * coordinator's `task()`) while that run still holds its lock; with `name`, also unless the run
 * is of that job. For code that must only ever run under the lock. Returns the run, whose
 * `fencingToken` is what to hand to the resource being written.
 *
 * Throws LockError `NOT_LOCKED` outside a locked run (including runs made unlocked by
 * `whenUnavailable: 'run'`), and the LockLostError once the run's lease is lost or released.
 */
export function assertLocked(name?: string): HeldJobRun {
  const run = current.getStore();
  if (!run) {
    const what = name === undefined ? 'assertLocked()' : `assertLocked(${JSON.stringify(name)})`;
    throw new LockError(ErrorCode.NOT_LOCKED, `${what} was called outside a job's task that holds its lock`);
  }
  if (name !== undefined && run.name !== name) {
    throw new LockError(
      ErrorCode.NOT_LOCKED,
      `assertLocked(${JSON.stringify(name)}) was called in a task of job ${JSON.stringify(run.name)}`,
    );
  }
  const lost = run.lock.lostError;
  if (lost) throw lost;
  if (!run.lock.held) throw new LockLostError(run.name, 'released', run.fencingToken);
  return run;
}
