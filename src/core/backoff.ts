/** The `attempt`-th delay of an exponential backoff: `base * 2^attempt`, at most `cap`. */
export function exponential(attempt: number, base: number, cap: number): number {
  return Math.min(cap, base * 2 ** Math.min(attempt, 30));
}

/**
 * Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2^attempt)].
 * Randomness desynchronises contenders that failed together.
 */
export function backoff(attempt: number, base: number, cap: number, random: () => number = Math.random): number {
  return Math.floor(random() * exponential(attempt, base, cap));
}
