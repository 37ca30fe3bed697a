import { exponential } from './backoff.js';
import { DEFAULTS } from './defaults.js';

export interface RetryingOptions {
  /**
   * One try. A rejection is tried again after the backoff; `'again'` is tried again at once (the
   * backoff starting over); anything else ends the loop.
   */
  readonly attempt: () => Promise<unknown>;
  /** Told of each failed try, but not of one that ends after stop(). */
  readonly onError: (error: unknown) => void;
  /** Asked before each retry: false ends the loop until start() or later() begins it again. */
  readonly going?: () => boolean;
}

/**
 * Something tried until it is done: a subscription, a watch, a delete. While tries fail, each
 * waits before the next: `DEFAULTS.resubscribeDelay`, doubling up to `DEFAULTS.maxPark` (no
 * jitter: each loop belongs to one lock or one session), and back to the first delay once a try
 * succeeds. At most one try runs or waits at a time; the wait's timer is unref'd, so a retry never
 * holds the process open. After stop() nothing runs, nothing is reported and no timer is left.
 */
export class Retrying {
  readonly #options: RetryingOptions;
  /** Waits since the last success: the next wait is the backoff's `#waits`-th delay. */
  #waits = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  /** later() was called while a try ran: after a success, wait and try once more. */
  #again = false;
  #stopped = false;

  constructor(options: RetryingOptions) {
    this.#options = options;
  }

  /** Try now, unless a try runs or waits already. */
  start(): void {
    if (this.#stopped || this.#running || this.#timer !== undefined) return;
    this.#try();
  }

  /** Try after the backoff (a lost subscription), unless a try waits already or runs (then after it). */
  later(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    if (this.#running) this.#again = true;
    else this.#wait();
  }

  /** Stop for good: no further try, no report, no timer. Idempotent. */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #going(): boolean {
    return !this.#stopped && (this.#options.going?.() ?? true);
  }

  #try(): void {
    this.#running = true;
    let trying: Promise<unknown>;
    try {
      trying = this.#options.attempt();
    } catch (error) {
      trying = Promise.reject(error);
    }
    trying.then(
      (outcome) => {
        this.#running = false;
        if (this.#stopped) return;
        this.#waits = 0;
        if (outcome === 'again') {
          this.#again = false;
          if (this.#going()) this.#try();
        } else if (this.#again) {
          this.#again = false;
          this.#wait();
        }
      },
      (error: unknown) => {
        this.#running = false;
        if (this.#stopped) return;
        this.#again = false;
        this.#options.onError(error);
        this.#wait();
      },
    );
  }

  #wait(): void {
    if (!this.#going()) return;
    const delay = exponential(this.#waits++, DEFAULTS.resubscribeDelay, DEFAULTS.maxPark);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#going()) this.#try();
    }, delay);
    this.#timer.unref?.();
  }
}
