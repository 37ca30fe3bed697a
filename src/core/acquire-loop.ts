import { now } from './clock.js';
import { DEFAULTS } from './defaults.js';
import { closedError } from './errors.js';
import type { Subscribe, Waiter, WaitQueues } from './waiting.js';

/**
 * The one acquire loop: try, and while refused, queue, park until a hand-off names us (or a timer
 * bounded by the holder's lease fires), try again, until granted, the wait runs out, the signal
 * aborts or the instance closes. Every primitive runs on it: it only sees an attempt function and
 * what to do with a grant nobody will use, so a mutex, a job lock or any later primitive waits,
 * times out, aborts and gives back the same way.
 */

/** What one attempt came to: a grant, or a refusal with when trying again is worth it. */
export type Try<G, R> =
  | { readonly granted: G }
  | {
      readonly refused: R;
      /** ms after which a retry is worth it (the holder's lease), or -1 if unknown. */
      readonly retryIn: number;
      /** ms before which no retry is made even when a hand-off is announced (after a split vote). */
      readonly holdOff?: number | undefined;
    };

/** One acquisition, as the loop runs it. */
export interface Acquisition<G, R> {
  readonly name: string;
  /** The owner token this acquisition holds under; hand-offs name it. */
  readonly owner: string;
  /** ms to wait while refused; 0 tries once and never queues. */
  readonly wait: number;
  readonly signal: AbortSignal | undefined;
  /**
   * One attempt. `tries` counts the earlier attempts of this acquisition; `queue`: this caller
   * will wait, so a refused attempt joins the backend's queue of waiters.
   */
  attempt(tries: number, queue: boolean): Promise<Try<G, R>>;
  /** A grant that came when nobody will use it (closed, or aborted meanwhile): give it back. */
  giveBack(granted: G): Promise<unknown>;
  /** Hear the name's hand-offs; needed when `wait` > 0. */
  readonly subscribe?: Subscribe | undefined;
  /** Leave the backend's queue after giving up, passing on a reservation; called only if an attempt queued. */
  leave?(): Promise<void>;
}

/** How an acquisition ended without an error: a grant, or the last refusal once the wait ran out. */
export type Outcome<G, R> =
  | { readonly granted: G }
  | { readonly refused: R /** ms the acquisition waited. */; readonly waited: number };

export interface LoopContext {
  readonly waits: WaitQueues;
  /** Aborted by close(): every parked acquisition rejects with its reason at once. */
  readonly closing: AbortSignal;
  isClosed(): boolean;
  /** Leaving the backend's queue failed (reported, never thrown). */
  onLeaveError(error: unknown): void;
}

export class AcquireLoop {
  readonly #context: LoopContext;
  /** Acquisitions in progress: `drained()` resolves once each has left the backend's queue. */
  #active = 0;
  #drained: (() => void) | undefined;

  constructor(context: LoopContext) {
    this.#context = context;
  }

  /** Resolves once no acquisition is in progress (close() waits for it). */
  drained(): Promise<void> {
    if (this.#active === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.#drained = resolve;
    });
  }

  /**
   * Whether the caller may send an acquisition's first attempt itself, so that an uncontended one
   * runs straight through (no loop, closures or queue bookkeeping): not when the signal aborted or
   * the instance closed (run() says why), nor when a caller that will wait already hears `name`'s
   * hand-offs (run() registers it before that attempt). When it may, the acquisition counts as in
   * progress from here: the caller ends it with `end()` after a grant (see `unwanted`) or an error,
   * or passes a refusal to `resume()`, which ends it.
   */
  straight(name: string, queue: boolean, signal: AbortSignal | undefined): boolean {
    if (signal?.aborted || this.#context.isClosed()) return false;
    if (queue && this.#context.waits.listening(name)) return false;
    this.#active += 1;
    return true;
  }

  /** An acquisition begun by `straight()` ended without `resume()`. */
  end(): void {
    this.#active -= 1;
    if (this.#active === 0) this.#drained?.();
  }

  /** Why a grant that came now will not be used (the instance closed, or `signal` aborted), if so: give it back, then throw this. */
  unwanted(signal: AbortSignal | undefined): unknown {
    if (this.#context.isClosed()) return closedError();
    return signal?.aborted ? signal.reason : undefined;
  }

  /** One attempt, and what it came to. */
  async #try<G, R>(a: Acquisition<G, R>, tries: number, queue: boolean): Promise<Try<G, R>> {
    if (this.#context.isClosed()) throw closedError();
    const result = await a.attempt(tries, queue);
    if (!('granted' in result)) return result;
    const unwanted = this.unwanted(a.signal);
    if (unwanted !== undefined) {
      // Won, but nobody will use it: give it back before reporting why.
      await a.giveBack(result.granted).catch(() => undefined);
      throw unwanted;
    }
    return result;
  }

  async run<G, R>(a: Acquisition<G, R>): Promise<Outcome<G, R>> {
    const { name, owner, signal } = a;
    if (signal?.aborted) throw signal.reason;
    const { waits } = this.#context;
    const started = now();
    // A caller that will wait joins the backend's queue when refused, so releases hand the lock
    // on in arrival order across every instance.
    const queue = a.wait > 0 && a.subscribe !== undefined;
    // Already listening on this lock: register before the first attempt, so a release that names
    // this waiter right after that attempt is not missed. Otherwise subscribe only if refused.
    const waiter = queue && waits.listening(name) ? waits.join(name, owner, subscribeOf(a)) : undefined;
    this.#active += 1;
    const firstSentAt = now();
    let first: Try<G, R>;
    try {
      first = await this.#try(a, 0, queue);
    } catch (error) {
      waiter?.leave();
      this.end();
      throw error;
    }
    return this.resume(a, first, firstSentAt, started, waiter);
  }

  /**
   * The acquisition from its first attempt's result `first` (sent at `firstSentAt`; the call
   * began at `started`) on: a grant ends it; a refusal queues, parks and tries again until granted
   * or the wait runs out. Ends the acquisition begun by run() or `straight()`.
   */
  async resume<G, R>(
    a: Acquisition<G, R>,
    first: Try<G, R>,
    firstSentAt: number,
    started: number,
    registered?: Waiter,
  ): Promise<Outcome<G, R>> {
    const { name, owner, signal } = a;
    const { waits, closing } = this.#context;
    const deadline = started + a.wait;
    const queue = a.wait > 0 && a.subscribe !== undefined;
    let waiter = registered;
    let tries = 1;
    let granted = false;
    /** Refused while queueing: the backend holds a queue entry for us until we leave. */
    let queued = false;
    try {
      let last = first;
      if ('granted' in last) {
        granted = true;
        return last;
      }
      if (!queue) return { refused: last.refused, waited: 0 };
      queued = true;
      let holdOffUntil = Math.min(now() + (last.holdOff ?? 0), deadline);
      waiter ??= waits.join(name, owner, subscribeOf(a));
      await waiter.ready(signal, closing);
      // Unless the subscription was live before the first attempt was sent, a release since may
      // have gone unheard: try again at once.
      const liveSince = waiter.liveSince;
      let tryNow = liveSince === undefined || liveSince > firstSentAt;
      for (;;) {
        if (tryNow) {
          // After a split vote no retry comes before the hold-off ends, even if a hand-off is announced.
          while (now() < holdOffUntil) await waiter.park(holdOffUntil - now(), signal, closing);
          if (signal?.aborted) throw signal.reason;
          // Getting ready (a subscription that was slow to go live) may have used up the wait: no
          // attempt starts after the deadline, so a call settles at most one attempt past its wait.
          if (now() >= deadline) return { refused: last.refused, waited: Math.round(now() - started) };
          waiter.trying();
          const next = await this.#try(a, tries++, queue);
          if ('granted' in next) {
            granted = true;
            return next;
          }
          last = next;
          holdOffUntil = Math.min(now() + (next.holdOff ?? 0), deadline);
        }
        tryNow = true;
        const remaining = deadline - now();
        if (remaining <= 0) return { refused: last.refused, waited: Math.round(now() - started) };
        const hint = last.retryIn >= 0 ? last.retryIn + DEFAULTS.expiryMargin : remaining;
        await waiter.park(Math.min(hint, remaining), signal, closing);
      }
    } finally {
      waiter?.leave();
      // Gave up (timed out, aborted, failed, closed): leave the backend's queue, passing on a
      // reservation, before the caller hears why, so a release right after cannot pick us.
      if (queued && !granted && a.leave) await a.leave().catch(this.#context.onLeaveError);
      this.end();
    }
  }
}

/** The acquisition's way to hear hand-offs: its own, or none (a caller that does not queue). */
function subscribeOf<G, R>(a: Acquisition<G, R>): Subscribe {
  return a.subscribe ?? (() => Promise.resolve(() => {}));
}
