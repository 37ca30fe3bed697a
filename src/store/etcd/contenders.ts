import { now } from '../../core/clock.js';
import { Retrying } from '../../core/retrying.js';
import type { HandOff } from '../port.js';
import type { EtcdClient } from './client.js';
import type { Member } from './codec.js';
import type { KeySpace, LockKeys } from './keys.js';
import { createdAt, remove } from './ops.js';
import type { Session } from './session.js';
import { ShareTracker } from './share-tracker.js';
import { Tracker } from './tracker.js';

/**
 * What one store knows of its own contenders' keys: for each (lock name, owner) the key's create
 * revision (its place in line, and its fencing token once first), the session it lives on, and
 * two local clocks that etcd has no room for:
 *
 * - a held lock ends `ttl` ms after the grant or extension that set it (measured from when that
 *   call began, so never before the caller's validity): then this store deletes the key, and the
 *   next in line is woken by that deletion. Locks share a session, so the session alone cannot
 *   end one lock's lease; it ends all of them when the process stops renewing it.
 * - a waiter that has not tried again for `waiterLease` ms is dropped, as a Redis waiter's entry
 *   expires, so a waiter whose leave was lost costs the others nothing.
 *
 * It also keeps each lock's watchers, and a Tracker per waiter while anyone watches.
 */
export interface Entry {
  readonly name: string;
  readonly owner: string;
  readonly keys: LockKeys;
  /** The key's create revision. */
  revision: number;
  /** The session the key lives on. */
  session: Session;
  /** `expiring`: its ttl ran out and the key is being deleted. */
  state: 'queued' | 'held' | 'expiring';
  /** The value written while held (kept for a move to another session). */
  member: Member;
  /** While held: monotonic ms at which the lease ends unless extended. */
  deadline: number;
  timer: ReturnType<typeof setTimeout> | undefined;
  /** While `expiring`: deletes the key, again after a backoff while that fails. */
  deleting: Retrying | undefined;
  tracker: Tracker | ShareTracker | undefined;
}

type Listener = (handOff: HandOff) => void;

export class Contenders {
  readonly #client: EtcdClient;
  readonly #space: KeySpace;
  readonly #onError: (error: unknown) => void;
  readonly #entries = new Map<string, Map<string, Entry>>();
  readonly #listeners = new Map<string, Set<Listener>>();
  #closed = false;

  constructor(client: EtcdClient, space: KeySpace, onError: (error: unknown) => void) {
    this.#client = client;
    this.#space = space;
    this.#onError = onError;
  }

  get(name: string, owner: string): Entry | undefined {
    return this.#entries.get(name)?.get(owner);
  }

  /** Record a contender's key (queued or held; the caller sets the state through `queue` or `hold`). */
  add(name: string, owner: string, keys: LockKeys, revision: number, session: Session, member: Member): Entry {
    const entry: Entry = {
      name,
      owner,
      keys,
      revision,
      session,
      state: 'queued',
      member,
      deadline: 0,
      timer: undefined,
      deleting: undefined,
      tracker: undefined,
    };
    let byOwner = this.#entries.get(name);
    if (!byOwner) {
      byOwner = new Map();
      this.#entries.set(name, byOwner);
    }
    byOwner.get(owner)?.tracker?.stop();
    byOwner.set(owner, entry);
    return entry;
  }

  /** The key is a waiter's: renew its liveness for `waiterLease` ms, and track its turn while anyone watches. */
  queue(entry: Entry, waiterLease: number): void {
    entry.state = 'queued';
    this.#arm(entry, waiterLease, () => this.#drop(entry));
    if (!entry.tracker && (this.#listeners.get(entry.name)?.size ?? 0) > 0) this.#track(entry);
    // The waiters' session lives while its waiters try: renew it when a third of it has passed.
    entry.session.renew(now() - entry.session.ttl / 3).catch(() => undefined);
  }

  /** The key is the holder's, its lease ending `ttl` ms after `since` unless extended. */
  hold(entry: Entry, ttl: number, since: number): void {
    entry.state = 'held';
    entry.tracker?.stop();
    entry.tracker = undefined;
    this.extendTo(entry, since + ttl);
  }

  /** Move a held lease's end to `deadline` (never earlier than it is). */
  extendTo(entry: Entry, deadline: number): void {
    entry.deadline = Math.max(entry.deadline, deadline);
    this.#arm(entry, entry.deadline - now(), () => this.#expire(entry));
  }

  /** Forget the entry: its timers and its tracker stop (the key is gone, or the caller deletes it). */
  forget(entry: Entry): void {
    clearTimeout(entry.timer);
    entry.timer = undefined;
    entry.deleting?.stop();
    entry.deleting = undefined;
    entry.tracker?.stop();
    entry.tracker = undefined;
    const byOwner = this.#entries.get(entry.name);
    if (byOwner?.get(entry.owner) !== entry) return;
    byOwner.delete(entry.owner);
    if (byOwner.size === 0) this.#entries.delete(entry.name);
  }

  #arm(entry: Entry, ms: number, fire: () => void): void {
    clearTimeout(entry.timer);
    // The key is the entry's again (queued or held): an expiry's deletion must not go on.
    entry.deleting?.stop();
    entry.deleting = undefined;
    // Timers never hold the process open: the sessions end everything on the server anyway.
    entry.timer = setTimeout(fire, Math.max(0, Math.ceil(ms))).unref();
  }

  /** A waiter that stopped trying: drop its key, as a dead waiter's. */
  #drop(entry: Entry): void {
    if (entry.state !== 'queued') return;
    this.forget(entry);
    this.#deleteKey(entry).catch(this.#onError);
  }

  /** A held lease whose ttl ran out: delete the key, which wakes the next in line; retried until done. */
  #expire(entry: Entry): void {
    if (entry.state !== 'held') return;
    const left = entry.deadline - now();
    if (left > 0) {
      this.#arm(entry, left, () => this.#expire(entry));
      return;
    }
    entry.state = 'expiring';
    entry.deleting = new Retrying({
      attempt: async () => {
        try {
          await this.#deleteKey(entry);
        } catch (error) {
          // Closed, or the session (and the key with it) is gone: nothing is left to retry.
          if (!this.#closed && !entry.session.lost) throw error;
        }
        this.forget(entry);
      },
      onError: this.#onError,
    });
    entry.deleting.start();
  }

  /** Delete the entry's key if it is still the one this entry made. */
  async #deleteKey(entry: Entry): Promise<void> {
    const key = entry.keys.member(entry.owner);
    await this.#client.kv.txn({ compare: [createdAt(key, entry.revision)], success: [remove(key)], failure: [] });
  }

  /** An exclusive waiter watches its predecessor; a shared one, what keeps it out (share-tracker.ts). */
  #track(entry: Entry): Tracker | ShareTracker {
    const onFirst = () => {
      if (entry.tracker === tracker) entry.tracker = undefined;
      this.#deliver(entry.name, { woken: entry.owner, next: [] });
    };
    const { limit } = entry.member;
    const tracker =
      limit === undefined
        ? new Tracker(this.#client, this.#space, entry.keys, entry.revision, onFirst, this.#onError)
        : new ShareTracker(
            this.#client,
            this.#space,
            entry.keys,
            { revision: entry.revision, limit },
            onFirst,
            this.#onError,
          );
    entry.tracker = tracker;
    return tracker;
  }

  #deliver(name: string, handOff: HandOff): void {
    for (const listener of [...(this.#listeners.get(name) ?? [])]) listener(handOff);
  }

  /**
   * Hear the hand-offs of `name`: each of this store's waiters of it is told when it is first in
   * line. Resolves once every waiter's tracker has looked (or rejects with the first failure).
   */
  async watch(name: string, onHandOff: Listener): Promise<() => void> {
    // A listener of its own per call, so one function watching twice is two watchers.
    const listener: Listener = (handOff) => onHandOff(handOff);
    let listeners = this.#listeners.get(name);
    if (!listeners) {
      listeners = new Set();
      this.#listeners.set(name, listeners);
    }
    listeners.add(listener);
    const ready: Promise<void>[] = [];
    for (const entry of this.#entries.get(name)?.values() ?? []) {
      if (entry.state !== 'queued') continue;
      ready.push((entry.tracker ?? this.#track(entry)).ready);
    }
    let active = true;
    const unwatch = () => {
      if (!active) return;
      active = false;
      const set = this.#listeners.get(name);
      set?.delete(listener);
      if (!set || set.size > 0) return;
      this.#listeners.delete(name);
      for (const entry of this.#entries.get(name)?.values() ?? []) {
        entry.tracker?.stop();
        entry.tracker = undefined;
      }
    };
    try {
      await Promise.all(ready);
    } catch (error) {
      unwatch();
      throw error;
    }
    return unwatch;
  }

  /**
   * Stop watching; drop the waiters left (their keys too). A held lease still ends when its ttl
   * does, as a closed instance's leases end on Redis: its timer stays (unref'd), and deletes the
   * key then. If it cannot (the caller closed the client), the unrenewed session ends it.
   */
  close(): void {
    this.#closed = true;
    this.#listeners.clear();
    for (const byOwner of [...this.#entries.values()]) {
      for (const entry of [...byOwner.values()]) {
        entry.tracker?.stop();
        entry.tracker = undefined;
        if (entry.state === 'queued') this.#drop(entry);
      }
    }
  }
}
