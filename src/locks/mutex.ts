import { now, validUntil } from '../core/clock.js';
import type { Attempt, ExtendOutcome, LockEngine } from '../core/engine.js';
import { RedisUnavailableError } from '../core/errors.js';
import { withTimeout } from '../core/timeout.js';
import { type LockKeys, lockKeys } from '../store/keys.js';
import type { Store } from '../store/port.js';

export interface MutexEngineOptions {
  readonly prefix: string;
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
}

/** The fenced mutex on one store: each step is one script, bounded by `commandTimeout`. */
export class MutexEngine implements LockEngine {
  readonly store: Store;
  readonly #owned: boolean;
  readonly #options: MutexEngineOptions;

  constructor(store: Store, owned: boolean, options: MutexEngineOptions) {
    this.store = store;
    this.#owned = owned;
    this.#options = options;
  }

  keys(name: string): LockKeys {
    return lockKeys(this.#options.prefix, name);
  }

  #bounded<T>(promise: Promise<T>, action: string): Promise<T> {
    const ms = this.#options.commandTimeout;
    return withTimeout(
      promise,
      ms,
      () => new RedisUnavailableError(`${this.store.kind}: ${action} got no answer within ${ms} ms (commandTimeout)`),
    );
  }

  async attempt(name: string, owner: string, ttl: number, tries: number, queue = false): Promise<Attempt> {
    const keys = this.keys(name);
    const sentAt = now();
    // Only a caller refused before is in the queue: the first attempt has nothing to leave.
    const mode = queue ? (tries === 0 ? 'join' : 'member') : undefined;
    const pending = this.store.acquire(keys, owner, ttl, 0, mode);
    let reply: Awaited<typeof pending>;
    try {
      reply = await this.#bounded(pending, 'acquire');
    } catch (error) {
      // If the answer comes after we gave up, the lock is ours but nobody holds the handle: free it.
      pending
        .then(
          (late) => (late.acquired ? this.store.release(keys, owner) : undefined),
          () => undefined,
        )
        .catch(() => undefined);
      throw error;
    }
    if (!reply.acquired) return { acquired: false, retryIn: reply.pttl };
    const { driftFactor, driftConstant } = this.#options;
    return {
      acquired: true,
      fencingToken: reply.fence,
      validUntil: validUntil(sentAt, ttl, driftFactor, driftConstant),
    };
  }

  async extend(name: string, owner: string, ttl: number): Promise<ExtendOutcome> {
    const sentAt = now();
    const reply = await this.#bounded(this.store.extend(this.keys(name), owner, ttl), 'extend');
    if (reply !== 'extended') return { extended: false, reason: reply };
    const { driftFactor, driftConstant } = this.#options;
    return { extended: true, validUntil: validUntil(sentAt, ttl, driftFactor, driftConstant) };
  }

  async release(name: string, owner: string): Promise<boolean> {
    return (await this.#bounded(this.store.release(this.keys(name), owner), 'release')) === 'released';
  }

  async leave(name: string, owner: string): Promise<void> {
    await this.#bounded(this.store.leave(this.keys(name), owner), 'leave');
  }

  async subscribe(name: string, onRelease: (message?: string) => void): Promise<() => void> {
    const pending = this.store.subscribe(this.keys(name).channel, onRelease);
    try {
      return await this.#bounded(pending, 'subscribe');
    } catch (error) {
      // A subscription that goes live after we gave up on it is dropped at once.
      pending.then(
        (unsubscribe) => unsubscribe(),
        () => undefined,
      );
      throw error;
    }
  }

  async close(): Promise<void> {
    if (this.#owned) await this.store.close();
  }
}
