import { Retrying } from '../../core/retrying.js';
import type { EtcdClient } from './client.js';
import type { KeySpace, LockKeys } from './keys.js';

/** One look of a tracker: `'first'` once its waiter is first (or the tracker stopped), else `'again'`. */
export type Look = (ready: () => void) => Promise<'first' | 'again'>;

/**
 * Run `look` until it says first: again at once after each deletion it waited for, again after a
 * backoff after each failure. `ready` settles with the first look (its `ready()` call, or its
 * failure); a failure after that goes to `onError`.
 */
export function lookUntilFirst(
  look: Look,
  onError: (error: unknown) => void,
): { ready: Promise<void>; looking: Retrying } {
  let pending = true;
  let resolve: () => void = () => {};
  let reject: (error: unknown) => void = () => {};
  const ready = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Whoever awaits `ready` hears the first failure; later ones go to onError.
  ready.catch(() => undefined);
  const settle = () => {
    pending = false;
    resolve();
  };
  const looking = new Retrying({
    attempt: async () => ((await look(settle)) === 'first' ? undefined : 'again'),
    onError: (error) => {
      if (!pending) return onError(error);
      pending = false;
      reject(error);
    },
  });
  looking.start();
  return { ready, looking };
}

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
  readonly #looking: Retrying;
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
    const { ready, looking } = lookUntilFirst((settle) => this.#waitForPredecessor(settle), onError);
    this.ready = ready;
    this.#looking = looking;
  }

  /** One look: 'first', or wait until the predecessor seen is deleted (or the watch fails). */
  async #waitForPredecessor(ready: () => void): Promise<'first' | 'again'> {
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
      ready();
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
    ready();
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
    return 'again';
  }

  /** Stop watching (the waiter got the lock, left, or nobody listens any more). Idempotent. */
  stop(): void {
    this.#stopped = true;
    this.#looking.stop();
    this.#interrupt?.();
  }
}
