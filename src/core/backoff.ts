/**
 * Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2^attempt)].
 * Randomness desynchronises contenders that failed together.
 */
export function backoff(attempt: number, base: number, cap: number, random: () => number = Math.random): number {
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}
