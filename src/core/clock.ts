import { performance } from 'node:perf_hooks';

/** Monotonic milliseconds. Leases are never measured with Date.now(): wall clocks jump. */
export function now(): number {
  return performance.now();
}

/**
 * What a client may assume of a lease it asked for at `sentAt`: the server started the ttl no
 * earlier than `sentAt`, so validity ends at `sentAt + ttl`, less a margin for clock drift.
 */
export function validUntil(sentAt: number, ttl: number, driftFactor: number, driftConstant: number): number {
  return sentAt + ttl - (ttl * driftFactor + driftConstant);
}
