import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { emitSafely } from '../core/emit.js';
import { LockTimeoutError, RedisUnavailableError } from '../core/errors.js';
import type { Lock } from '../core/lock.js';

/** How a term of leadership ended. */
export type DeposedReason =
  /** The lease was lost (an extension found another owner or came too late, e.g. after a pause). */
  | 'lost'
  /** The leader's work returned: the term ends and the instance campaigns again. */
  | 'returned'
  /** The leader's work threw (the error is on the event); the instance campaigns again. */
  | 'failed'
  /** stop() was called: leadership is handed to the next candidate at once. */
  | 'stopped';

export interface LeadershipEvents {
  /** This instance leads `name` from now on, under the lock's fencing token. */
  elected: [{ readonly name: string; readonly fencingToken: number }];
  /** This instance no longer leads `name`. */
  deposed: [
    { readonly name: string; readonly fencingToken: number; readonly reason: DeposedReason; readonly error?: unknown },
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
  /** Run the leader's work inside the lock's context (reentrancy, scopes). */
  run<T>(lock: Lock, work: () => Promise<T>): Promise<T>;
}

/**
 * Leader election on a lease: campaign for the lock `name` (FIFO among the candidates), and while
 * it is held run the leader's work with a signal that aborts when leadership ends. A term lasts
 * until the work settles, the lease is lost, or stop(); then the lock is released, which hands it
 * to the next candidate at once, and (unless stopped) this instance campaigns again.
 */
export class Leadership extends EventEmitter<LeadershipEvents> {
  readonly name: string;
  readonly #stopping = new AbortController();
  #leading: Lock | undefined;
  readonly #done: Promise<void>;

  /** @internal Created by Leasehold.lead. */
  constructor(plan: LeadershipPlan, work: (signal: AbortSignal, lock: Lock) => unknown) {
    super();
    this.name = plan.name;
    this.#done = this.#campaigns(plan, work);
  }

  /** Whether this instance leads right now (holds the lock and its lease is valid). */
  get isLeader(): boolean {
    return this.#leading !== undefined && this.#leading.expiresIn() > 0;
  }

  /** The fencing token of the current term, or null when not leading. */
  get fencingToken(): number | null {
    return this.isLeader ? (this.#leading?.fencingToken ?? null) : null;
  }

  /** Stop campaigning; if leading, abort the work's signal and hand leadership on. Resolves once released. */
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
        if (error instanceof RedisUnavailableError) {
          this.#emitSafely('campaignFailed', { name: this.name, error });
          await sleep(plan.retryDelay, undefined, { signal: stopping }).catch(() => undefined);
          continue;
        }
        // Closed, or an invalid option: campaigning cannot go on.
        this.#emitSafely('campaignFailed', { name: this.name, error });
        return;
      }
      await this.#term(plan, lock, work);
    }
  }

  async #term(plan: LeadershipPlan, lock: Lock, work: (signal: AbortSignal, lock: Lock) => unknown): Promise<void> {
    const stopping = this.#stopping.signal;
    const term = new AbortController();
    const end = (reason: unknown) => term.abort(reason);
    const onLost = () => end(lock.signal.reason);
    const onStop = () => end(stopping.reason);
    lock.signal.addEventListener('abort', onLost, { once: true });
    stopping.addEventListener('abort', onStop, { once: true });
    if (lock.signal.aborted) onLost();
    if (stopping.aborted) onStop();
    this.#leading = lock;
    const base = { name: this.name, fencingToken: lock.fencingToken };
    this.#emitSafely('elected', base);
    let reason: DeposedReason = 'returned';
    let failure: unknown;
    const ended = new Promise<void>((resolve) =>
      term.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    const ran = plan
      .run(lock, async () => work(term.signal, lock))
      .then(
        () => undefined,
        (error: unknown) => {
          reason = 'failed';
          failure = error;
        },
      );
    await Promise.race([ran, ended]);
    lock.signal.removeEventListener('abort', onLost);
    stopping.removeEventListener('abort', onStop);
    if (lock.signal.aborted) reason = 'lost';
    else if (stopping.aborted) reason = 'stopped';
    term.abort(new Error('leadership term ended'));
    this.#leading = undefined;
    // Hand the lock on at once: the next candidate in line is woken by the release.
    await lock.release().catch(() => undefined);
    this.#emitSafely('deposed', failure === undefined ? { ...base, reason } : { ...base, reason, error: failure });
  }

  #emitSafely<K extends keyof LeadershipEvents>(event: K, ...args: LeadershipEvents[K]): void {
    emitSafely(() => (this.emit as (e: K, ...a: LeadershipEvents[K]) => boolean)(event, ...args));
  }
}
