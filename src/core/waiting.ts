import { DEFAULTS } from './defaults.js';

/**
 * Waiting for a held lock: wake on release, one waiter at a time, with a timed fallback.
 *
 * Order across instances lives in the backend: a waiter that is refused joins the lock's queue
 * there, and a release hands the lock to the first waiter (reserving it for a moment) and
 * publishes that waiter's owner token. Every instance hears the message; only the instance whose
 * waiter it names wakes it, so one release wakes one waiter in the whole deployment.
 *
 * In one instance, the waiters of one lock share one subscription to its release channel, kept
 * a moment after the last one leaves so a busy lock is not resubscribed for every wait. An empty
 * message (a release with nobody queued, a job's finish, a Redlock node) wakes the first parked
 * waiter of the instance. Expiry and crashed holders publish nothing, so every park is also
 * bounded by a timer: the holder's remaining lease, at most `DEFAULTS.maxPark`.
 */

export type Subscribe = (onMessage: (message?: string) => void) => Promise<() => void>;

class Queue {
  readonly waiters: Waiter[] = [];
  /** An empty-message wake that found nobody parked: the next waiter to park retries at once. */
  pendingWake = false;
  unsubscribe: (() => void) | undefined;
  subscribed: Promise<void> | undefined;
  linger: ReturnType<typeof setTimeout> | undefined;

  deliver(message: string): void {
    if (message === '') {
      for (const waiter of this.waiters) if (waiter.wake()) return;
      this.pendingWake = true;
      return;
    }
    for (const waiter of this.waiters) {
      if (waiter.owner === message) {
        waiter.wakeOrRemember();
        return;
      }
    }
  }
}

export class Waiter {
  /** The owner token this waiter will hold the lock with; releases name it when they wake it. */
  readonly owner: string;
  readonly #queue: Queue;
  readonly #leave: (waiter: Waiter) => void;
  #parked: (() => void) | undefined;
  #left = false;
  /** Named by a release while it was not parked (mid-attempt): its next park returns at once. */
  #remembered = false;
  /** Woken and not yet tried since. */
  woken = false;

  /** @internal */
  constructor(owner: string, queue: Queue, leave: (waiter: Waiter) => void) {
    this.owner = owner;
    this.#queue = queue;
    this.#leave = leave;
  }

  /** @internal Resolve this waiter's park if it is parked. */
  wake(): boolean {
    const parked = this.#parked;
    if (!parked) return false;
    this.#parked = undefined;
    this.woken = true;
    parked();
    return true;
  }

  /** @internal A release named this waiter: wake it, or let its next park return at once. */
  wakeOrRemember(): void {
    if (!this.wake()) this.#remembered = true;
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
    if (this.#remembered || this.#queue.pendingWake) {
      if (!this.#remembered) this.#queue.pendingWake = false;
      this.#remembered = false;
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
        Math.max(0, Math.ceil(Math.min(ms, DEFAULTS.maxPark))),
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#parked = () => {
        done();
        resolve();
      };
    });
  }

  /** Call just before each attempt: the wake, if any, is being used. */
  trying(): void {
    this.woken = false;
    this.#remembered = false;
  }

  /** Leave the queue; the last waiter out lets the subscription linger, then drops it. Idempotent. */
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

  /** True when this instance listens on `name`'s release channel already (waiters, or lingering). */
  listening(name: string): boolean {
    return this.#queues.has(name);
  }

  join(name: string, owner: string, subscribe: Subscribe): Waiter {
    let queue = this.#queues.get(name);
    if (!queue) {
      const created = new Queue();
      queue = created;
      this.#queues.set(name, created);
      created.subscribed = subscribe((message) => created.deliver(message ?? '')).then(
        (unsubscribe) => {
          if (this.#queues.get(name) === created) created.unsubscribe = unsubscribe;
          else unsubscribe();
        },
        (error: unknown) => {
          // Without a subscription the timers still work; the next waiter tries subscribing again.
          if (this.#queues.get(name) === created && created.waiters.length === 0) this.#queues.delete(name);
          this.#onError(error);
        },
      );
    }
    const target = queue;
    if (target.linger) {
      clearTimeout(target.linger);
      target.linger = undefined;
    }
    const waiter = new Waiter(owner, target, (w) => {
      const i = target.waiters.indexOf(w);
      if (i >= 0) target.waiters.splice(i, 1);
      if (target.waiters.length === 0) {
        target.pendingWake = false;
        target.linger = setTimeout(() => this.#drop(name, target), DEFAULTS.subscriptionLinger);
        target.linger.unref();
      } else if (w.woken) {
        // Woken but leaving without trying (aborted, timed out): the wake belongs to the next one.
        target.deliver('');
      }
    });
    target.waiters.push(waiter);
    return waiter;
  }

  #drop(name: string, queue: Queue): void {
    if (queue.linger) clearTimeout(queue.linger);
    queue.linger = undefined;
    if (queue.waiters.length > 0 || this.#queues.get(name) !== queue) return;
    this.#queues.delete(name);
    queue.unsubscribe?.();
    queue.unsubscribe = undefined;
  }

  /** Number of lock names with waiters right now (tests use it to prove a finished wait leaves nothing). */
  get size(): number {
    let n = 0;
    for (const queue of this.#queues.values()) if (queue.waiters.length > 0) n++;
    return n;
  }

  /** Drop every lingering subscription at once (Leasehold.close). */
  close(): void {
    for (const [name, queue] of [...this.#queues]) this.#drop(name, queue);
  }
}
