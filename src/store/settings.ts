import { DEFAULTS, defaultInstance } from '../core/defaults.js';
import type { HandOn, StoreSettings } from './port.js';

/**
 * How one store's own instance hands a freed lock on: reserved for the next waiter, which, queued
 * through this same store (so alive as the release runs), may be granted it outright (HandOn.direct).
 */
export const SINGLE_STORE_HAND_ON: HandOn = Object.freeze({
  reservation: DEFAULTS.reservation,
  announce: false,
  direct: true,
});

/**
 * How a freed lock is handed on where waiters do not queue on the store: announced to every
 * waiter of the lock (Redlock's nodes, whose queues could disagree; an operator's forced release,
 * which those waiters must hear too).
 */
export const ANNOUNCED_HAND_ON: HandOn = Object.freeze({ reservation: DEFAULTS.reservation, announce: true });

/**
 * A store's settings: those given over the defaults. A Leasehold gives all of them; a store made on
 * its own (operator tooling, a test) takes the defaults for the rest.
 */
export function storeSettings(given: Partial<StoreSettings> = {}): StoreSettings {
  return Object.freeze({
    prefix: given.prefix ?? DEFAULTS.prefix,
    instance: given.instance ?? defaultInstance(),
    fenceRetention: given.fenceRetention ?? DEFAULTS.fenceRetention,
    waiterLease: given.waiterLease ?? DEFAULTS.waiterLease,
    handOn: given.handOn ?? SINGLE_STORE_HAND_ON,
  });
}
