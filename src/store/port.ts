import type { LockKeys } from './keys.js';

/**
 * The port: everything a lock needs from a backend. The algorithms in core/ and locks/ call
 * only this; each backend (Redis through a client library, or memory) implements it once.
 * Every reply is a distinct outcome, never a collapsed boolean.
 */

export type AcquireReply =
  | { readonly acquired: true; readonly fence: number }
  /** `pttl`: ms the current holder's lease has left (the waiter's fallback hint). */
  | { readonly acquired: false; readonly pttl: number };

/** `expired`: no lock at all; `not-owner`: the lock is held by another owner. */
export type ReleaseReply = 'released' | 'expired' | 'not-owner';
export type ExtendReply = 'extended' | 'expired' | 'not-owner';

export interface LockState {
  /** Owner token of the current holder, or null when free. */
  readonly owner: string | null;
  /** ms left on the current lease; -2 when free. */
  readonly pttl: number;
  /** Latest fencing token issued for this lock (the holder's, while held); 0 if never acquired. */
  readonly fence: number;
}

export interface Store {
  /** Short label for messages and metrics: 'memory', 'ioredis', 'node-redis', … */
  readonly kind: string;

  /**
   * Take the lock if free, with a lease of `ttl` ms, and issue the next fencing token.
   * `minFence`: the token issued is at least this (Redlock writes back the quorum's maximum).
   */
  acquire(keys: LockKeys, owner: string, ttl: number, minFence?: number): Promise<AcquireReply>;
  /** Delete the lock if `owner` holds it; publish on the release channel when it did. */
  release(keys: LockKeys, owner: string): Promise<ReleaseReply>;
  /** Reset the lease to `ttl` ms if `owner` holds it. */
  extend(keys: LockKeys, owner: string, ttl: number): Promise<ExtendReply>;
  /** Raise the fencing counter to at least `fence` (never lowers it). Returns the counter after. */
  raiseFence(keys: LockKeys, fence: number): Promise<number>;
  /** Read the lock's current state (operator tooling and tests). */
  inspect(keys: LockKeys): Promise<LockState>;

  /**
   * Listen on a release channel. Resolves once the subscription is live, so a release after
   * that is seen. The returned function stops listening (reference counted per channel).
   */
  subscribe(channel: string, onMessage: () => void): Promise<() => void>;

  /** Stop what the store itself opened (its subscriber connection). Never closes the caller's client. */
  close(): Promise<void>;
}

/** Marks an object as a Store so `Leasehold` can tell it from a Redis client. */
export const STORE = Symbol.for('leasehold.store');

export function isStore(value: unknown): value is Store {
  return typeof value === 'object' && value !== null && (value as { [STORE]?: unknown })[STORE] === true;
}
