/**
 * Waiting for a held lock: wake on release, one waiter at a time, with a timed fallback.
 *
 * All waiters of one lock name in one instance form a FIFO queue that shares one subscription
 * to the lock's release channel. A release message wakes the first parked waiter only (the rest
 * stay parked: no thundering herd). If none is parked at that moment (all are mid-attempt), the
 * wake is kept so the next waiter to park retries at once instead of sleeping through it.
 * Expiry and crashed holders publish nothing, so every park is also bounded by a timer: the
 * holder's remaining lease, or what is left of the wait.
 */

export type Subscribe = (onRelease: () => void) => Promise<() => void>;

interface Parked {
  resolve(): void;
}

class Queue {
  readonly waiters: Waiter[] = [];
  pendingWake = false;
  unsubscribe: (() => void) | undefined;
  subscribed: Promise<void> | undefined;

  wakeOne(): void {
    for (const waiter of this.waiters) {
      if (waiter.wake()) return;
    }
    this.pendingWake = true;
  }
}

export class Waiter {
  readonly #queue: Queue;
  readonly #leave: (waiter: Waiter) => void;
  #parked: Parked | undefined;
  #left = false;
  /** Woken by a release and not yet tried since. */
  woken = false;

  /** @internal */
  constructor(queue: Queue, leave: (waiter: Waiter) => void) {
    this.#queue = queue;
    this.#leave = leave;
  }

  /** @internal Resolve this waiter's park if it is parked. */
  wake(): boolean {
    const parked = this.#parked;
    if (!parked) return false;
    this.#parked = undefined;
    this.woken = true;
    parked.resolve();
    return true;
  }

  /** Resolves once the release subscription is live (or has failed: the timed fallback still works). */
  ready(): Promise<void> {
    return this.#queue.subscribed ?? Promise.resolve();
  }

  /**
   * Sleep until woken by a release, for at most `ms`, or reject with the signal's reason.
   * Leaves no timer and no listener behind whichever way it ends.
   */
  park(ms: number, signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#queue.pendingWake) {
      this.#queue.pendingWake = false;
      this.woken = true;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#parked = undefined;
      };
      const onAbort = () => {
        done();
        reject(signal?.reason);
      };
      const timer = setTimeout(
        () => {
          done();
          resolve();
        },
        Math.max(0, Math.ceil(ms)),
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#parked = {
        resolve: () => {
          done();
          resolve();
        },
      };
    });
  }

  /** Call just before each attempt: the wake, if any, is being used. */
  trying(): void {
    this.woken = false;
  }

  /** Leave the queue; the last waiter out drops the subscription. Idempotent. */
  leave(): void {
    if (this.#left) return;
    this.#left = true;
    this.#leave(this);
  }
}

/** The wait queues of one Leasehold instance, keyed by lock name. */
export class WaitQueues {
  readonly #queues = new Map<string, Queue>();
  readonly #onError: (error: unknown) => void;

  constructor(onError: (error: unknown) => void) {
    this.#onError = onError;
  }

  /** True when this instance already has waiters for `name`: a newcomer queues behind them. */
  has(name: string): boolean {
    return this.#queues.has(name);
  }

  join(name: string, subscribe: Subscribe): Waiter {
    let queue = this.#queues.get(name);
    if (!queue) {
      const created = new Queue();
      queue = created;
      this.#queues.set(name, created);
      created.subscribed = subscribe(() => created.wakeOne()).then(
        (unsubscribe) => {
          if (this.#queues.get(name) === created) created.unsubscribe = unsubscribe;
          else unsubscribe();
        },
        (error: unknown) => this.#onError(error),
      );
    }
    const target = queue;
    const waiter = new Waiter(target, (w) => {
      const i = target.waiters.indexOf(w);
      if (i >= 0) target.waiters.splice(i, 1);
      if (target.waiters.length === 0 && this.#queues.get(name) === target) {
        this.#queues.delete(name);
        target.unsubscribe?.();
        target.unsubscribe = undefined;
      } else if (w.woken) {
        // Woken but leaving without trying (aborted, timed out): the wake belongs to the next one.
        target.wakeOne();
      }
    });
    target.waiters.push(waiter);
    return waiter;
  }

  /** Number of lock names with waiters (tests use it to prove an aborted wait leaves nothing). */
  get size(): number {
    return this.#queues.size;
  }
}
