import { now } from './clock.js';
import { DEFAULTS } from './defaults.js';
import { channels } from './diagnostics.js';
import type { HandOff, HandOffListener } from './engine.js';
import { Retrying } from './retrying.js';

/**
 * Waiting for a held lock: wake on release, one waiter at a time, with a timed fallback.
 *
 * Order across instances lives in the backend: a refused waiter joins the lock's queue there; a release
 * hands the lock to the first live waiter (reserving it a moment) and announces a HandOff naming it and up
 * to three live waiters after it. Every instance hears it; only the one whose waiter is named wakes it, so
 * one release wakes one waiter in the whole deployment (what a dead one costs the others: docs/waiting.md).
 *
 * In one instance, the waiters of one lock share one subscription to its release channel, kept a moment
 * after the last one leaves so a busy lock is not resubscribed for every wait. A failed subscription is
 * tried again while waiters remain; until it is live they retry often: they cannot hear a hand-off. A
 * hand-off to nobody in particular (a Redlock node's release, with nobody queued) wakes the instance's
 * first parked waiter. Expiry and crashed holders publish nothing, so every park is also bounded by a
 * timer: the holder's remaining lease, at most `DEFAULTS.maxPark`.
 */

export type Subscribe = (onHandOff: HandOffListener) => Promise<() => void>;

const ANYONE: HandOff = Object.freeze({ woken: null, next: [] });

const settled = (): void => undefined;

export interface WaitPolicy {
  /** ms a release reserves the lock for the waiter it woke. */
  readonly reservation: number;
  readonly onError: (error: unknown) => void;
}

class Queue {
  readonly waiters: Waiter[] = [];
  /** An empty-message wake that found nobody parked: the next waiter to park retries at once. */
  pendingWake = false;
  unsubscribe: (() => void) | undefined;
  /** Settles when the current subscription attempt is live or has failed. */
  subscribing: Promise<void> | undefined;
  /** Monotonic time the subscription went live; undefined while it is not. */
  liveAt: number | undefined;
  /** Subscribes, and subscribes again after a failure while waiters remain. */
  subscription: Retrying | undefined;
  linger: ReturnType<typeof setTimeout> | undefined;
  readonly #lapse: number;

  constructor(reservation: number) {
    this.#lapse = reservation + DEFAULTS.expiryMargin;
  }

  /** Wake whom `handOff` names; true when the waiter it names (`woken`) is here. */
  deliver({ woken, next, grantedFor }: HandOff): boolean {
    if (woken === null) {
      for (const waiter of this.waiters) if (waiter.wake()) return false;
      this.pendingWake = true;
      return false;
    }
    let here = false;
    for (const waiter of this.waiters) {
      if (waiter.owner === woken) {
        here = true;
        waiter.wakeOrRemember();
        continue;
      }
      // The i-th waiter after the woken one retries once i reservations could have lapsed; after
      // a grant outright, once its lease could have run out (unreleased, its holder dead), and the
      // reservations of those ahead of it since.
      const place = next.indexOf(waiter.owner);
      if (place < 0) continue;
      const first = grantedFor === undefined ? this.#lapse : grantedFor + DEFAULTS.expiryMargin;
      waiter.retryBy(now() + first + this.#lapse * place);
    }
    return here;
  }
}

export class Waiter {
  /** The owner token this waiter will hold the lock with; releases name it when they wake it. */
  readonly owner: string;
  readonly #queue: Queue;
  readonly #leave: (waiter: Waiter) => void;
  #parked: { wake(): void; rearm(at: number): void } | undefined;
  #left = false;
  /** Named by a release while it was not parked (mid-attempt): its next park returns at once. */
  #remembered = false;
  /** Next in line after a hand-off: retry by this time (the reservation may lapse unused). */
  #retryBy: number | undefined;
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
    this.woken = true;
    parked.wake();
    return true;
  }

  /** @internal A release named this waiter: wake it, or let its next park return at once. */
  wakeOrRemember(): void {
    if (!this.wake()) this.#remembered = true;
  }

  /** @internal A release named this waiter next in line: retry by `at` at the latest. */
  retryBy(at: number): void {
    this.#retryBy = Math.min(this.#retryBy ?? at, at);
    this.#parked?.rearm(this.#retryBy);
  }

  /**
   * Resolves once the release subscription is live, or has failed (the timed fallback still works);
   * rejects with the reason of whichever signal aborts first.
   */
  ready(...signals: readonly (AbortSignal | undefined)[]): Promise<void> {
    const subscribing = this.#queue.subscribing;
    if (subscribing === undefined) return Promise.resolve();
    for (const signal of signals) if (signal?.aborted) return Promise.reject(signal.reason);
    if (signals.every((s) => s === undefined)) return subscribing;
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        for (const signal of signals) signal?.removeEventListener('abort', onAbort);
      };
      function onAbort(this: AbortSignal) {
        done();
        reject(this.reason);
      }
      for (const signal of signals) signal?.addEventListener('abort', onAbort, { once: true });
      subscribing.then(() => {
        done();
        resolve();
      });
    });
  }

  /** Monotonic time since which the release subscription is live; undefined while it is not. */
  get liveSince(): number | undefined {
    return this.#queue.liveAt;
  }

  /**
   * Sleep until woken by a release, for at most `ms`, or reject with the reason of whichever
   * signal aborts first. Leaves no timer and no listener behind whichever way it ends.
   */
  park(ms: number, ...signals: readonly (AbortSignal | undefined)[]): Promise<void> {
    for (const signal of signals) if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#remembered || this.#queue.pendingWake) {
      if (!this.#remembered) this.#queue.pendingWake = false;
      this.#remembered = false;
      this.woken = true;
      return Promise.resolve();
    }
    // Without a live subscription a hand-off cannot be heard: retry soon instead.
    const cap = this.#queue.liveAt === undefined ? DEFAULTS.unsubscribedPark : DEFAULTS.maxPark;
    let at = now() + Math.min(ms, cap);
    if (this.#retryBy !== undefined) at = Math.min(at, this.#retryBy);
    return new Promise<void>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout>;
      const arm = () => {
        timer = setTimeout(finish, Math.max(0, Math.ceil(at - now())));
      };
      const done = () => {
        clearTimeout(timer);
        for (const signal of signals) signal?.removeEventListener('abort', onAbort);
        this.#parked = undefined;
      };
      const finish = () => {
        done();
        resolve();
      };
      function onAbort(this: AbortSignal) {
        done();
        reject(this.reason);
      }
      arm();
      for (const signal of signals) signal?.addEventListener('abort', onAbort, { once: true });
      this.#parked = {
        wake: finish,
        rearm: (by) => {
          if (by >= at) return;
          at = by;
          clearTimeout(timer);
          arm();
        },
      };
    });
  }

  /** Call just before each attempt: the wake, if any, is being used. */
  trying(): void {
    this.woken = false;
    this.#remembered = false;
    this.#retryBy = undefined;
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
  readonly #policy: WaitPolicy;
  #closed = false;

  constructor(policy: WaitPolicy) {
    this.#policy = policy;
  }

  /** True when this instance listens on `name`'s release channel already (waiters, or lingering). */
  listening(name: string): boolean {
    return this.#queues.has(name);
  }

  join(name: string, owner: string, subscribe: Subscribe): Waiter {
    let queue = this.#queues.get(name);
    if (!queue) {
      queue = new Queue(this.#policy.reservation);
      this.#queues.set(name, queue);
      this.#subscribe(name, queue, subscribe);
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
        if (target.liveAt === undefined) {
          // Not subscribed (failed, or still trying): nothing to keep; stop retrying.
          this.#drop(name, target);
          return;
        }
        target.linger = setTimeout(() => this.#drop(name, target), DEFAULTS.subscriptionLinger);
        target.linger.unref();
      } else if (w.woken) {
        // Woken but leaving without trying (aborted, timed out): the wake belongs to the next one.
        target.deliver(ANYONE);
      }
    });
    target.waiters.push(waiter);
    return waiter;
  }

  /** Subscribe `queue` to its release channel; on failure, try again (backing off) while it has waiters. */
  #subscribe(name: string, queue: Queue, subscribe: Subscribe): void {
    const onHandOff: HandOffListener = (handOff) => {
      if (channels.handoff.hasSubscribers) channels.handoff.publish({ name, ...handOff });
      return queue.deliver(handOff);
    };
    queue.subscription = new Retrying({
      attempt: () => {
        const trying = subscribe(onHandOff).then((unsubscribe) => {
          if (this.#queues.get(name) !== queue || this.#closed) {
            unsubscribe();
            return;
          }
          queue.unsubscribe = unsubscribe;
          queue.liveAt = now();
        });
        queue.subscribing = trying.then(settled, settled);
        return trying;
      },
      onError: this.#policy.onError,
      going: () => this.#queues.get(name) === queue && !this.#closed && queue.waiters.length > 0,
    });
    queue.subscription.start();
  }

  #drop(name: string, queue: Queue): void {
    if (queue.linger) clearTimeout(queue.linger);
    queue.linger = undefined;
    if (queue.waiters.length > 0 || this.#queues.get(name) !== queue) return;
    queue.subscription?.stop();
    this.#queues.delete(name);
    queue.liveAt = undefined;
    queue.unsubscribe?.();
    queue.unsubscribe = undefined;
  }

  /** Drop every lingering subscription at once (Leasehold.close, once no waiter is left). */
  close(): void {
    this.#closed = true;
    for (const [name, queue] of [...this.#queues]) this.#drop(name, queue);
  }
}
