import type { UnsafeConfig } from '../core/defaults.js';
import { ErrorCode, LockError } from '../core/errors.js';
import { type ConfigStore, portsOf, type Store } from './port.js';

/**
 * The eviction policy, checked once on first use. Under `volatile-*` Redis may evict a held lock
 * key (its lease has a TTL): a second owner could then take it. Under `allkeys-*` it may evict
 * anything, counters and tick markers included. Only `noeviction` keeps every key until its TTL.
 * Managed services often refuse CONFIG; INFO memory is read instead. A check that fails (the store
 * unreachable, INFO refused) is reported as a backend error, not held against the store, and made
 * again on a later acquisition.
 */
export class EvictionCheck {
  readonly #stores: readonly (Store & ConfigStore)[];
  readonly #mode: UnsafeConfig;
  readonly #onError: (error: unknown) => void;
  /** Settled once: undefined when safe (or unknown), the refusal when unsafe. */
  #verdict: Promise<LockError | undefined> | undefined;
  #refusal: LockError | undefined;
  #passed = false;

  constructor(stores: readonly Store[], mode: UnsafeConfig, onError: (error: unknown) => void) {
    // Only stores with the ConfigStore capability have a policy to check.
    this.#stores = stores.filter((store): store is Store & ConfigStore => portsOf(store).config !== undefined);
    this.#mode = mode;
    this.#onError = onError;
    if (mode === 'ignore' || this.#stores.length === 0) this.#passed = true;
  }

  /**
   * Before an acquisition: undefined when it may go ahead at once (checked already, or only
   * warned about), else a promise that rejects with UNSAFE_CONFIG under `'refuse'`.
   */
  gate(): Promise<void> | undefined {
    if (this.#passed) return undefined;
    if (this.#refusal) return Promise.reject(this.#refusal);
    const verdict = this.#check();
    if (this.#mode === 'warn') {
      this.#passed = true;
      void verdict.then((unsafe) => {
        if (unsafe) process.emitWarning(unsafe.message, { code: 'LEASEHOLD_EVICTION_POLICY' });
      });
      return undefined;
    }
    return verdict.then((unsafe) => {
      if (unsafe) {
        this.#refusal = unsafe;
        throw unsafe;
      }
      // A failed check cleared the verdict: the next acquisition checks again.
      if (this.#verdict !== undefined) this.#passed = true;
    });
  }

  #check(): Promise<LockError | undefined> {
    this.#verdict ??= Promise.all(
      this.#stores.map(async (store) => {
        try {
          const policies = await store.evictionPolicies();
          const unsafe = policies.find((p) => p !== null && p !== 'noeviction');
          if (unsafe === undefined) return undefined;
          const where = store.address === undefined ? store.kind : `${store.kind} at ${store.address}`;
          return `${where} has maxmemory-policy ${unsafe}`;
        } catch (error) {
          this.#onError(error);
          return null;
        }
      }),
    ).then((found) => {
      if (found.includes(null)) {
        this.#verdict = undefined;
        this.#passed = false;
      }
      const unsafe = found.filter((f): f is string => typeof f === 'string');
      if (unsafe.length === 0) return undefined;
      return new LockError(
        ErrorCode.UNSAFE_CONFIG,
        `${unsafe.join('; ')}: under memory pressure Redis may evict a held lock (then a second owner ` +
          `can take it) or a fencing counter or tick marker. Set maxmemory-policy noeviction; ` +
          `unsafeConfig: 'ignore' silences this check, 'refuse' makes acquisitions fail instead.`,
      );
    });
    return this.#verdict;
  }
}
