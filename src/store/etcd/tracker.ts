import { DEFAULTS } from '../../core/defaults.js';
import type { EtcdClient } from './client.js';
import type { KeySpace, LockKeys } from './keys.js';

/**
 * One waiter's wait for its turn, as etcd's concurrency package waits: find the contender just
 * before it in line (the greatest create revision below its own) and watch that one key for its
 * deletion, from the revision it was read at, so a deletion in between is replayed. When it is
 * deleted (released, given up, expired with its session), look again: either another is before
 * it still, or it is first. So each release wakes exactly the next waiter, across every instance,
 * and no other (no herd), and a dead waiter in the middle costs nothing but its session's end.
 */
export class Tracker {
  readonly #client: EtcdClient;
  readonly #space: KeySpace;
  readonly #keys: LockKeys;
  readonly #revision: number;
  readonly #onFirst: () => void;
  readonly #onError: (error: unknown) => void;
  #stopped = false;
  /** Ends the current wait on the predecessor's deletion (stop()). */
  #interrupt: (() => void) | undefined;
  /** Settles once the first look is done: it is first, or it watches its predecessor. */
  readonly ready: Promise<void>;

  /** Track the contender whose key has create revision `revision`; `onFirst` once it is first. */
  constructor(
    client: EtcdClient,
    space: KeySpace,
    keys: LockKeys,
    revision: number,
    onFirst: () => void,
    onError: (error: unknown) => void,
  ) {
    this.#client = client;
    this.#space = space;
    this.#keys = keys;
    this.#revision = revision;
    this.#onFirst = onFirst;
    this.#onError = onError;
    let ready: () => void = () => {};
    let failed: (error: unknown) => void = () => {};
    this.ready = new Promise<void>((resolve, reject) => {
      ready = resolve;
      failed = reject;
    });
    // Whoever awaits `ready` hears the first failure; later ones go to onError.
    this.ready.catch(() => undefined);
    void this.#run(ready, failed);
  }

  async #run(ready: () => void, failed: (error: unknown) => void): Promise<void> {
    let first = true;
    let delay: number = DEFAULTS.resubscribeDelay;
    while (!this.#stopped) {
      try {
        const deleted = await this.#waitForPredecessor(first ? ready : undefined);
        if (deleted === 'first') return;
        delay = DEFAULTS.resubscribeDelay;
      } catch (error) {
        if (this.#stopped) return;
        if (first) failed(error);
        else this.#onError(error);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, DEFAULTS.maxPark);
      }
      first = false;
    }
  }

  /** One look: 'first', or wait until the predecessor seen is deleted (or the watch fails). */
  async #waitForPredecessor(ready: (() => void) | undefined): Promise<'first' | 'deleted'> {
    const found = await this.#client.kv.range({
      key: this.#keys.queue.start,
      range_end: this.#keys.queue.end,
      max_create_revision: String(this.#revision - 1),
      sort_target: 'Create',
      sort_order: 'Descend',
      limit: 1,
      keys_only: true,
    });
    if (this.#stopped) return 'first';
    const predecessor = found.kvs[0];
    if (!predecessor) {
      ready?.();
      this.#stopped = true;
      this.#onFirst();
      return 'first';
    }
    const watcher = await this.#client
      .watch()
      .key(this.#space.relative(predecessor.key))
      .startRevision(String(Number(found.header.revision) + 1))
      .only('delete')
      .create();
    // A watcher may still report an error after we are done with it: never an unhandled 'error'.
    watcher.addListener('error', () => undefined);
    if (this.#stopped) {
      watcher.cancel().catch(() => undefined);
      return 'first';
    }
    ready?.();
    let onDelete: () => void = () => {};
    let onError: (error: unknown) => void = () => {};
    try {
      await new Promise<void>((resolve, reject) => {
        onDelete = () => resolve();
        onError = reject;
        this.#interrupt = resolve;
        watcher.addListener('delete', onDelete);
        watcher.addListener('error', onError);
      });
    } finally {
      this.#interrupt = undefined;
      watcher.removeListener('delete', onDelete);
      watcher.removeListener('error', onError);
      watcher.cancel().catch(() => undefined);
    }
    return 'deleted';
  }

  /** Stop watching (the waiter got the lock, left, or nobody listens any more). Idempotent. */
  stop(): void {
    this.#stopped = true;
    this.#interrupt?.();
  }
}
