import type { Retrying } from '../../core/retrying.js';
import type { EtcdClient, Watcher } from './client.js';
import type { KeySpace, LockKeys } from './keys.js';
import { admits, readLine } from './line.js';
import { lineOf } from './ops.js';
import { lookUntilFirst } from './tracker.js';

/**
 * A shared waiter's wait for admission (line.ts, admits): read the keys ahead of it, and watch the
 * line for the deletions of those that keep it out: every exclusive key ahead (a read-write lock),
 * or every key ahead (a semaphore: it is in once fewer than `limit` remain), from the revision it
 * read at, so none is missed. Keys ahead only leave, so a count of them is exact; once enough are
 * gone it looks again, and is told first when admitted. One release wakes every shared waiter it
 * admits (the readers behind a writer, together) and no other: the rest count on, without a read.
 */
export class ShareTracker {
  readonly #client: EtcdClient;
  readonly #space: KeySpace;
  readonly #keys: LockKeys;
  readonly #revision: number;
  readonly #limit: number;
  readonly #onFirst: () => void;
  readonly #looking: Retrying;
  #stopped = false;
  #interrupt: (() => void) | undefined;
  /** Settles once the first look is done: admitted, or watching what keeps it out. */
  readonly ready: Promise<void>;

  constructor(
    client: EtcdClient,
    space: KeySpace,
    keys: LockKeys,
    at: { readonly revision: number; readonly limit: number },
    onFirst: () => void,
    onError: (error: unknown) => void,
  ) {
    this.#client = client;
    this.#space = space;
    this.#keys = keys;
    this.#revision = at.revision;
    this.#limit = at.limit;
    this.#onFirst = onFirst;
    const { ready, looking } = lookUntilFirst((settle) => this.#waitForRoom(settle), onError);
    this.ready = ready;
    this.#looking = looking;
  }

  /** One look: 'first' when admitted, else wait until enough of what keeps it out is deleted. */
  async #waitForRoom(ready: () => void): Promise<'first' | 'again'> {
    const read = await this.#client.kv.txn({
      compare: [],
      success: [lineOf(this.#keys.queue, this.#revision)],
      failure: [],
    });
    if (this.#stopped) return 'first';
    const ahead = readLine(read.responses[0]?.response_range?.kvs ?? []);
    if (
      admits(
        ahead.map((k) => k.member),
        this.#limit,
      )
    ) {
      ready();
      this.#stopped = true;
      this.#onFirst();
      return 'first';
    }
    const blocking = this.#limit === 0 ? ahead.filter((k) => k.member.limit !== 0) : ahead;
    const pending = new Set(blocking.map((k) => this.#space.relative(k.kv.key).toString('hex')));
    // Admitted once no exclusive key is ahead, or fewer than `limit` keys are.
    const need = this.#limit === 0 ? 0 : this.#limit - 1;
    const watcher = await this.#client
      .watch()
      .prefix(this.#space.relative(this.#keys.queue.start))
      .startRevision(String(Number(read.header.revision) + 1))
      .only('delete')
      .create();
    watcher.addListener('error', () => undefined);
    if (this.#stopped) {
      watcher.cancel().catch(() => undefined);
      return 'first';
    }
    ready();
    await this.#until(watcher, (key) => {
      pending.delete(key.toString('hex'));
      return pending.size <= need;
    });
    return 'again';
  }

  /** Resolve once `done` says so of a deleted key, or stop() interrupts; reject on the watch's error. */
  async #until(watcher: Watcher, done: (key: Buffer) => boolean): Promise<void> {
    let onDelete: (...args: unknown[]) => void = () => {};
    let onError: (error: unknown) => void = () => {};
    try {
      await new Promise<void>((resolve, reject) => {
        onDelete = (kv) => {
          if (done((kv as { key: Buffer }).key)) resolve();
        };
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
  }

  /** Stop watching (admitted, left, or nobody listens any more). Idempotent. */
  stop(): void {
    this.#stopped = true;
    this.#looking.stop();
    this.#interrupt?.();
  }
}
