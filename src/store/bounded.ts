import { describeError, StoreUnavailableError } from '../core/errors.js';
import { withTimeout } from '../core/timeout.js';
import type { StoreInfo } from './port.js';

/**
 * A store call bounded by `ms` (the instance's `commandTimeout`): unanswered by then, it fails with
 * StoreUnavailableError naming the store, its address and the client's last connection error
 * (also its `cause`). The call itself keeps running: callers that must undo a late success attach
 * to it. The one place every layer bounds a store call.
 */
export function bounded<T>(store: StoreInfo, promise: Promise<T>, action: string, ms: number): Promise<T> {
  return withTimeout(promise, ms, () => {
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
