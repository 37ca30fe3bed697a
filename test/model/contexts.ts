import type { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Each Leasehold enables an AsyncLocalStorage (its reentrant holds, a leader's work) and never
 * disables it, so on Node 20 every later async operation of the process pays for every instance
 * ever made, and a few hundred runs of a model slow down quadratically. A file whose model uses
 * reentrancy mocks node:async_hooks with `trackingAsyncHooks`; the world then disables the
 * storages made during a run when it is disposed (nothing of that run runs again).
 */

let made: AsyncLocalStorage<unknown>[] | undefined;

/** Start recording the storages made from now on (a run begins). */
export function trackContexts(): void {
  made = [];
}

/** Disable the storages made since trackContexts() (the run is over). */
export function releaseContexts(): void {
  for (const storage of made ?? []) storage.disable();
  made = undefined;
}

/** node:async_hooks with an AsyncLocalStorage that records itself while a run is tracked. */
export function trackingAsyncHooks<T extends { AsyncLocalStorage: typeof AsyncLocalStorage }>(real: T): T {
  class Tracked<S> extends real.AsyncLocalStorage<S> {
    constructor() {
      super();
      made?.push(this as AsyncLocalStorage<unknown>);
    }
  }
  return { ...real, AsyncLocalStorage: Tracked, default: { ...real, AsyncLocalStorage: Tracked } };
}
