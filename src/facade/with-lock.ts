import { now } from '../core/clock.js';
import { LockLostError, StoreUnavailableError, workFailure } from '../core/errors.js';
import type { Lock } from '../core/lock.js';
import { NEVER_ABORTED } from '../core/never-aborted.js';
import * as validate from '../core/validate.js';
import { MultiLock } from '../primitives/multi-lock.js';
import type { Reentrancy } from '../primitives/reentrant.js';
import { type EntryPoint, type Resolved, TRY_WHEN_UNAVAILABLE, type WithLockOptions, type Work } from './options.js';

/** What the `with…` calls need of the instance. */
export interface WorkHost {
  resolve(options: unknown, entry: EntryPoint, waits: boolean): Resolved;
  acquire(name: string, o: Resolved): Promise<Lock>;
  readonly reentrancy: Reentrancy;
  /** A release after the work failed: reported (`releaseFailed`), never thrown. */
  onReleaseFailed(lock: Lock, error: unknown): void;
}

/** What withLock / tryWithLock go on with: the lock, or what whenUnavailable chose. */
export type Taken<T> =
  | { readonly kind: 'held'; readonly lock: Lock; readonly work: Work<T, Lock | null>; readonly reentrant: boolean }
  | { readonly kind: 'skip' }
  | { readonly kind: 'unlocked'; readonly work: Work<T, Lock | null> };

/**
 * withLock and tryWithLock up to the work: the arguments checked, the lock acquired, or what
 * `whenUnavailable` says to do when the backend is unreachable.
 */
export async function take<T>(
  host: WorkHost,
  name: string,
  optionsOrWork: WithLockOptions | Work<T, never>,
  maybeWork: Work<T, never> | undefined,
  what: 'withLock' | 'tryWithLock',
): Promise<Taken<T>> {
  const [options, work] = typeof optionsOrWork === 'function' ? [undefined, optionsOrWork] : [optionsOrWork, maybeWork];
  validate.lockName(name);
  validate.optionsOrWork(optionsOrWork, what);
  validate.fn(work, `${what} work`);
  const resolved = host.resolve(options, what, what === 'withLock');
  const o = options as Record<string, unknown> | undefined;
  const whenUnavailable = validate.optionalWhenUnavailable(o?.whenUnavailable, TRY_WHEN_UNAVAILABLE);
  const run = work as Work<T, Lock | null>;
  try {
    const lock = await host.acquire(name, resolved);
    return { kind: 'held', lock, work: run, reentrant: resolved.reentrant };
  } catch (error) {
    if (!(error instanceof StoreUnavailableError) || whenUnavailable === 'fail') throw error;
    return whenUnavailable === 'skip' ? { kind: 'skip' } : { kind: 'unlocked', work: run };
  }
}

const sourceOf = Function.prototype.toString;
/** An arrow function that declares no parameter (it cannot read what it is called with). */
const NO_PARAMETERS = /^(?:async\s*)?\(\s*\)\s*=>/;

/**
 * The signal to hand `work`: the lock's, unless `work` is an arrow function that declares no
 * parameter and so can never read it (a signal costs Node a few µs to make: one per call adds up).
 * Anything else (`...args`, `arguments`, a bound or wrapped function) gets the lock's own.
 */
function signalFor(work: Work<unknown, Lock | null>, lock: Lock): AbortSignal {
  return work.length === 0 && NO_PARAMETERS.test(sourceOf.call(work)) ? NEVER_ABORTED : lock.signal;
}

/** Run the work under its lock and always release it; a lost lease's error wins over the work's. */
export async function runHeld<T>(
  host: WorkHost,
  lock: Lock,
  work: Work<T, Lock | null>,
  reentrant: boolean,
): Promise<T> {
  try {
    // A reentrant hold carries the lease in the work's async context, for nested acquisitions.
    if (reentrant) return await host.reentrancy.run(lock, async () => work(signalFor(work, lock), lock));
    return await work(signalFor(work, lock), lock);
  } catch (error) {
    throw workFailure(error, lock.signal);
  } finally {
    await lock.release().catch((error: unknown) => host.onReleaseFailed(lock, error));
  }
}

/**
 * Every lock of `names`, all or nothing, within one `wait`: taken in one fixed global order
 * (sorted), so callers asking for overlapping sets cannot wait on each other in a cycle; those
 * taken are released before an error reaches the caller.
 */
export async function acquireAll(host: WorkHost, names: readonly string[], o: Resolved): Promise<MultiLock> {
  const deadline = now() + o.wait;
  const taken = new Map<string, Lock>();
  try {
    for (const name of [...names].sort()) {
      const wait = Math.max(0, Math.round(deadline - now()));
      taken.set(name, await host.acquire(name, { ...o, wait }));
    }
  } catch (error) {
    await Promise.allSettled([...taken.values()].map((lock) => lock.release()));
    throw error;
  }
  // A lock taken early may have run out while the call waited for the next (a short lease without
  // the watchdog, a blocked event loop): the set is never handed out with a lease of no validity.
  const lost = [...taken.values()].find((lock) => !lock.held);
  if (lost) {
    await Promise.allSettled([...taken.values()].map((lock) => lock.release()));
    throw lost.lostError ?? new LockLostError(lost.name, 'validity-elapsed', lost.fencingToken);
  }
  return new MultiLock(names.map((name) => taken.get(name) as Lock));
}

/** Run the work under every lock and always release them all. */
export async function runAll<T>(
  host: WorkHost,
  all: MultiLock,
  work: (signal: AbortSignal, all: MultiLock) => Promise<T> | T,
): Promise<T> {
  try {
    return await work(all.signal, all);
  } catch (error) {
    throw workFailure(error, all.signal);
  } finally {
    await Promise.all(
      all.locks.map((lock) => lock.release().catch((error: unknown) => host.onReleaseFailed(lock, error))),
    );
  }
}
