import type { Lock } from '../core/lock.js';

/**
 * Several locks held together (acquireAll): one handle over one Lock per name, each with its own
 * lease, owner and fencing token. Its signal aborts when any of them is lost; it expires with the
 * first to expire; extend and release act on every one.
 */
export class MultiLock implements AsyncDisposable {
  /** One Lock per name, in the order the names were given. */
  readonly locks: readonly Lock[];
  #controller: AbortController | undefined;

  /** @internal Created by Leasehold.acquireAll. */
  constructor(locks: readonly Lock[]) {
    this.locks = Object.freeze([...locks]);
  }

  /** The names, in the order given. */
  get names(): readonly string[] {
    return this.locks.map((lock) => lock.name);
  }

  /** Aborted, with the first lost lock's LockLostError as its reason, when any lease is lost. */
  get signal(): AbortSignal {
    if (!this.#controller) {
      const controller = new AbortController();
      this.#controller = controller;
      const signals = this.locks.map((lock) => lock.signal);
      const lost = signals.find((s) => s.aborted);
      if (lost) controller.abort(lost.reason);
      else {
        const onAbort = (event: Event) => {
          for (const s of signals) s.removeEventListener('abort', onAbort);
          controller.abort((event.target as AbortSignal).reason);
        };
        for (const s of signals) s.addEventListener('abort', onAbort, { once: true });
      }
    }
    return this.#controller.signal;
  }

  /** ms of validity left on the lock that expires first; 0 once any is lost or released. */
  expiresIn(): number {
    return Math.min(...this.locks.map((lock) => lock.expiresIn()));
  }

  /** Extend every lease (to `ttl`, default each one's own); rejects as Lock.extend does if any fails. */
  async extend(ttl?: number): Promise<void> {
    const results = await Promise.allSettled(this.locks.map((lock) => lock.extend(ttl)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * Release every lock. True if each release deleted our lock. Rejects with the first backend error
   * once every release was tried (the others are released all the same).
   */
  async release(): Promise<boolean> {
    const results = await Promise.allSettled(this.locks.map((lock) => lock.release()));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    return results.every((r) => r.status === 'fulfilled' && r.value);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
