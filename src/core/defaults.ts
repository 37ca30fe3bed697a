/**
 * Every default in one frozen object: the code and the tests both import it.
 */
export const DEFAULTS = Object.freeze({
  /** Lease length in ms. */
  ttl: 30_000,
  /** How long `acquire` waits for a held lock, in ms. */
  wait: 10_000,
  /** Keep the lease alive while it is held (the watchdog). */
  autoExtend: true,
  /** The watchdog extends every `ttl / extendDivisor` ms (Redisson's rhythm: a third of the lease). */
  extendDivisor: 3,
  /** Fraction of the ttl subtracted from validity for clock drift between client and server. */
  driftFactor: 0.01,
  /** Constant ms subtracted from validity on top of the drift fraction. */
  driftConstant: 2,
  /** Key prefix for every key and channel leasehold writes. */
  prefix: 'leasehold',
  /** A backend call that has not answered after this many ms fails with RedisUnavailableError. */
  commandTimeout: 2_000,
  /** What withLock / tryWithLock do when the backend is unreachable. */
  whenUnavailable: 'fail' as const,
  /** Longest lock name accepted, in UTF-16 code units. */
  maxNameLength: 512,
  /** Largest ttl / wait accepted, in ms (what a Node timer can hold). */
  maxDuration: 2_147_483_647,
  /** Bytes of randomness in an owner token (128 bits). */
  ownerTokenBytes: 16,
  /** Delay between retries of a failed watchdog extension, as a fraction of the ttl. */
  extendRetryFraction: 0.1,
  /** Extra ms added to a holder's PTTL before a waiter's fallback retry, so it lands after expiry. */
  expiryMargin: 5,
});

export type WhenUnavailable = 'fail' | 'skip' | 'run';
