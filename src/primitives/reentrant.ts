import { AsyncLocalStorage } from 'node:async_hooks';
import type { Lock } from '../core/lock.js';

/**
 * Reentrancy: the reentrant holds of one Leasehold, per async context (AsyncLocalStorage), never
 * per thread or process. Work that runs under a reentrant hold of a name (withLock / tryWithLock
 * with `reentrant: true`) carries it in its async context; a nested reentrant acquisition of the
 * same name from that context gets another hold of the same lease at once (Lock.reenter: the same
 * owner and fencing token, holdCount one higher). Any other context waits like everyone else.
 */
export class Reentrancy {
  readonly #context = new AsyncLocalStorage<ReadonlyMap<string, Lock>>();

  /**
   * The hold of `name` in this async context, if its handle is not released yet; a nested
   * acquisition re-enters it (Lock.reenter rejects with the LockLostError once the lease has no
   * validity left, so a dead lease is never re-entered). A released handle: none, acquire afresh.
   */
  held(name: string): Lock | undefined {
    const lock = this.#context.getStore()?.get(name);
    return lock === undefined || lock.handleReleased ? undefined : lock;
  }

  /**
   * Stop tracking: an AsyncLocalStorage left enabled makes every later async operation of the
   * process pay for it (Node 20), so a closed Leasehold's is disabled.
   */
  close(): void {
    this.#context.disable();
  }

  /** Run `work` with `lock` as the reentrant hold of its name in the work's async context. */
  run<T>(lock: Lock, work: () => T): T {
    const outer = this.#context.getStore();
    const holds = new Map(outer);
    holds.set(lock.name, lock);
    return this.#context.run(holds, work);
  }
}
