import type { CurrentHolder, LostReason } from './errors.js';

/**
 * A release (or a waiter leaving) handed a lock on. `woken`: the waiter the lock is reserved for,
 * or null when it was announced to any waiter (nobody queued, or a Redlock node's release);
 * `next`: up to three live waiters queued after it, in order (the i-th retries once i
 * reservations could have lapsed). `grantedFor`: the lock was not reserved but granted to `woken`
 * outright, for this many ms: those next retry once that lease could have run out instead.
 */
export interface HandOff {
  readonly woken: string | null;
  readonly next: readonly string[];
  readonly grantedFor?: number;
}

/**
 * Hears a lock's hand-offs. An instance's waiting code answers true when the waiter the hand-off
 * names (`woken`) waits here, so a store that granted it the lock outright knows it will be taken;
 * a listener that only watches answers nothing.
 */
export type HandOffListener = (handOff: HandOff) => unknown;

/**
 * What `Leasehold` needs from a topology: one store (the mutex) or several (Redlock).
 * The engine speaks in outcomes and validity deadlines on the monotonic clock; the lease keeper
 * and the waiting logic above it are the same for every topology.
 */
export type Attempt =
  | {
      readonly acquired: true;
      readonly fencingToken: number;
      readonly validUntil: number;
      /**
       * The owner token the lease is held under, when the engine gave this attempt one of its own
       * (Redlock: a late grant of an earlier attempt, given back when it lands, must not count
       * for this one). The lock's owner from then on.
       */
      readonly owner?: string;
      /** Replicas that confirmed the grant, when replica acknowledgement was asked for. */
      readonly replicas?: number;
    }
  /**
   * `retryIn`: ms after which trying again is worth it (the holder's lease), or -1 if unknown.
   * `holdOff`: ms before which no retry is made even when a release is announced (Redlock after a
   * split vote: the contenders' own clean-up releases would wake them all at once, in step again).
   */
  | { readonly acquired: false; readonly retryIn: number; readonly holdOff?: number };

export type ExtendOutcome =
  | { readonly extended: true; readonly validUntil: number }
  | { readonly extended: false; readonly reason: LostReason; readonly holder?: CurrentHolder | undefined };

export interface LockEngine {
  /**
   * One acquisition attempt; `tries` counts the earlier attempts of the same acquisition (the
   * backoff exponent). Throws StoreUnavailableError / QuorumError when the backend fails.
   */
  attempt(name: string, owner: string, ttl: number, tries: number, queue?: boolean): Promise<Attempt>;
  /**
   * A waiter gives up: leave the backend's queue of waiters (`queue` attempts joined it), passing
   * on a reservation a release made for it. Engines without a queue need not implement it.
   */
  leave?(name: string, owner: string): Promise<void>;
  /** Extend the lease of `owner` to `ttl` ms from now. Throws when the backend fails. */
  extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome>;
  /** Release; true when this call deleted our lock. Throws when the backend fails. */
  release(name: string, owner: string): Promise<boolean>;
  /** Hear the hand-offs of `name`; resolves when listening. Returns the function that stops it. */
  watch(name: string, onHandOff: HandOffListener): Promise<() => void>;
  close(): Promise<void>;
}
