import { describeError, StoreUnavailableError } from '../core/errors.js';
import { Timeouts } from '../core/timeout.js';
import type { StoreInfo } from './port.js';

/**
 * A store call bounded by `ms` (the instance's `commandTimeout`): unanswered by then, it fails with
 * StoreUnavailableError naming the store, its address and the client's last connection error
 * (also its `cause`). The call itself keeps running: callers that must undo a late success attach
 * to it. The one place every layer bounds a store call.
 */
export function bounded<T>(store: StoreInfo, promise: Promise<T>, action: string, ms: number): Promise<T> {
  return timeoutsOf(store).bound(promise, ms, () => {
    store.unanswered?.();
    const cause = store.lastError?.();
    const where = store.address === undefined ? '' : ` from ${store.address}`;
    const why = cause === undefined ? '' : `; last connection error: ${describeError(cause)}`;
    return new StoreUnavailableError(
      `${store.kind}: ${action} got no answer${where} within ${ms} ms (commandTimeout)${why}`,
      cause === undefined ? undefined : { cause },
    );
  });
}

/** Each store's deadlines (core/timeout.ts): the calls to one store share its timers. */
const byStore = new WeakMap<StoreInfo, Timeouts>();

/** The deadlines of calls to `store`. */
export function timeoutsOf(store: StoreInfo): Timeouts {
  let timeouts = byStore.get(store);
  if (timeouts === undefined) {
    timeouts = new Timeouts();
    byStore.set(store, timeouts);
  }
  return timeouts;
}
