import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { emitSafely } from '../core/emit.js';
import { LockTimeoutError, StoreUnavailableError } from '../core/errors.js';
import type { Lock } from '../core/lock.js';

/** How a term of leadership ended. */
export type DeposedReason =
  /** The lease was lost (an extension found another owner or came too late, e.g. after a pause). */
  | 'lost'
  /** The leader's work returned: the term ends and the instance campaigns again. */
  | 'returned'
  /** The leader's work threw (the error is on the event); the instance campaigns again. */
  | 'failed'
  /** stop() was called: leadership is handed to the next candidate once the work has settled. */
  | 'stopped';

export interface LeadershipEvents {
  /** This instance leads `name` from now on, under the lock's fencing token. */
  elected: [{ readonly name: string; readonly fencingToken: number }];
  /** This instance no longer leads `name`; the term's work has settled (or overran) and the lock is released. */
  deposed: [
    { readonly name: string; readonly fencingToken: number; readonly reason: DeposedReason; readonly error?: unknown },
  ];
  /**
   * The term ended (`reason`) but its work had not settled `stopTimeout` ms after its signal
   * aborted: the lock is released all the same, so this work may still run while another instance
   * leads. This instance does not campaign again until it settles.
   */
  overran: [
    {
      readonly name: string;
      readonly fencingToken: number;
      readonly reason: Exclude<DeposedReason, 'returned' | 'failed'>;
      readonly stopTimeout: number;
    },
  ];
  /** A campaign could not reach the backend; it tries again after a pause. */
  campaignFailed: [{ readonly name: string; readonly error: unknown }];
}

export interface LeadershipPlan {
  readonly name: string;
  /** One campaign: wait for the lock (rejects with LockTimeoutError when the wait runs out, or the signal's reason). */
  campaign(signal: AbortSignal): Promise<Lock>;
  /** ms between campaigns after a backend failure. */
  readonly retryDelay: number;
  /** ms a term's work may take to settle once its signal aborted before the lock is released anyway. */
  readonly stopTimeout: number;
  /** Run the leader's work inside the lock's context (reentrancy, scopes). */
  run<T>(lock: Lock, work: () => Promise<T>): Promise<T>;
}

/**
 * Leader election on a lease: campaign for the lock `name` (FIFO among the candidates), and while
 * it is held run the leader's work with a signal that aborts when leadership ends. A term lasts
 * until the work settles, the lease is lost, or stop(). The lock is released (which hands it to
 * the next candidate at once) only when the work has settled, or `stopTimeout` after its signal
 * aborted (`overran`); an instance never campaigns while its previous term's work still runs.
 */
export class Leadership extends EventEmitter<LeadershipEvents> {
  readonly name: string;
  readonly #stopping = new AbortController();
  #leading: { readonly lock: Lock; readonly signal: AbortSignal } | undefined;
  readonly #done: Promise<void>;

  /** @internal Created by Leasehold.lead. */
  constructor(plan: LeadershipPlan, work: (signal: AbortSignal, lock: Lock) => unknown) {
    super();
    this.name = plan.name;
    this.#done = this.#campaigns(plan, work);
  }

  /** Whether this instance leads right now: it holds the lock, its lease is valid and the term's signal has not aborted. */
  get isLeader(): boolean {
    const leading = this.#leading;
    return leading !== undefined && !leading.signal.aborted && leading.lock.expiresIn() > 0;
  }

  /** The fencing token of the current term, or null when not leading. */
  get fencingToken(): number | null {
    return this.isLeader ? (this.#leading?.lock.fencingToken ?? null) : null;
  }

  /**
   * Stop campaigning; if leading, abort the work's signal and, once the work has settled (at most
   * `stopTimeout` ms later), hand leadership on. Resolves once released.
   */
  async stop(): Promise<void> {
    this.#stopping.abort(new Error('leadership stopped'));
    await this.#done;
  }

  async #campaigns(plan: LeadershipPlan, work: (signal: AbortSignal, lock: Lock) => unknown): Promise<void> {
    const stopping = this.#stopping.signal;
    while (!stopping.aborted) {
      let lock: Lock;
      try {
        lock = await plan.campaign(stopping);
      } catch (error) {
        if (stopping.aborted) return;
        if (error instanceof LockTimeoutError) continue;
        if (error instanceof StoreUnavailableError) {
          this.#emitSafely('campaignFailed', { name: this.name, error });
          await sleep(plan.retryDelay, undefined, { signal: stopping }).catch(() => undefined);
          continue;
        }
        // Closed, or an invalid option: campaigning cannot go on.
        this.#emitSafely('campaignFailed', { name: this.name, error });
        return;
      }
      const { unsettled } = await this.#term(plan, lock, work);
      // The work overran its term: no new term here while it runs (stop() need not wait for it).
      if (unsettled) await Promise.race([unsettled, aborted(stopping)]);
    }
  }

  /** One term; resolves once the lock is released, with the work's promise if it had not settled by then. */
  async #term(
    plan: LeadershipPlan,
    lock: Lock,
    work: (signal: AbortSignal, lock: Lock) => unknown,
  ): Promise<{ readonly unsettled: Promise<void> | undefined }> {
    const stopping = this.#stopping.signal;
    const term = new AbortController();
    const end = (reason: unknown) => term.abort(reason);
    const onLost = () => end(lock.signal.reason);
    const onStop = () => end(stopping.reason);
    lock.signal.addEventListener('abort', onLost, { once: true });
    stopping.addEventListener('abort', onStop, { once: true });
    if (lock.signal.aborted) onLost();
    if (stopping.aborted) onStop();
    this.#leading = { lock, signal: term.signal };
    const base = { name: this.name, fencingToken: lock.fencingToken };
    this.#emitSafely('elected', base);
    let threw = false;
    let failure: unknown;
    let settled = false;
    const ended = aborted(term.signal);
    const ran = plan
      .run(lock, async () => work(term.signal, lock))
      .then(
        () => undefined,
        (error: unknown) => {
          threw = true;
          failure = error;
        },
      )
      .finally(() => {
        settled = true;
      });
    await Promise.race([ran, ended]);
    lock.signal.removeEventListener('abort', onLost);
    stopping.removeEventListener('abort', onStop);
    // Decided as the term ends: a work that rejects afterwards (on its aborted signal) does not change it.
    const reason: DeposedReason = lock.signal.aborted
      ? 'lost'
      : stopping.aborted
        ? 'stopped'
        : threw
          ? 'failed'
          : 'returned';
    term.abort(new Error('leadership term ended'));
    if (!settled && (reason === 'lost' || reason === 'stopped')) {
      // Keep the lock (its watchdog still runs) until the work has settled, so the next leader's
      // work never starts beside it; bounded, so a work that ignores its signal cannot keep it.
      if (!(await settles(ran, plan.stopTimeout))) {
        this.#emitSafely('overran', { ...base, reason, stopTimeout: plan.stopTimeout });
      }
    }
    this.#leading = undefined;
    // Hand the lock on at once: the next candidate in line is woken by the release.
    await lock.release().catch(() => undefined);
    this.#emitSafely('deposed', failure === undefined ? { ...base, reason } : { ...base, reason, error: failure });
    // Wrapped: an async function returning the promise itself would wait for it.
    return { unsettled: settled ? undefined : ran };
  }

  #emitSafely<K extends keyof LeadershipEvents>(event: K, ...args: LeadershipEvents[K]): void {
    emitSafely(() => (this.emit as (e: K, ...a: LeadershipEvents[K]) => boolean)(event, ...args));
  }
}

/** Resolves when `signal` aborts. */
function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** Whether `work` settles within `ms`. */
async function settles(work: Promise<void>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
