import { holderOf } from '../formats.js';
import {
  type AcquireReply,
  type AcquireRequest,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type ForceReleaseReply,
  type HandOff,
  type HeldAsReply,
  type JobState,
  type LockState,
  type QueueState,
  type ReleaseReply,
  type SharedAcquireReply,
  type SharedRequest,
  type SharedState,
  type SharedStore,
  STORE,
  type Store,
  type StoreSettings,
} from '../port.js';
import { storeSettings } from '../settings.js';
import { globMatcher } from './glob.js';
import { claimTick, finishTick, readJob } from './jobs.js';
import { type LockRecord, left, readLease } from './record.js';
import { acquireShared, extendShared, heldLimit, inspectShared, leaveShared, releaseShared } from './shared.js';
import { Space } from './space.js';

/**
 * What a store (or a view of it bound to a Leasehold's settings) acts on: its prefix's space, every
 * prefix's (shared by its views), and the settings its calls use.
 */
interface Place {
  readonly space: Space;
  readonly spaces: Map<string, Space>;
  readonly settings: StoreSettings;
}

// Kept beside the objects rather than in private fields: a view is an object whose prototype is
// the store, so a subclass's overrides and fields hold in it too, and it has no private fields.
const places = new WeakMap<object, Place>();

function place(store: MemoryStore): Place {
  const found = places.get(store);
  if (!found) throw new TypeError('not a MemoryStore');
  return found;
}

function spaceFor(spaces: Map<string, Space>, prefix: string): Space {
  let space = spaces.get(prefix);
  if (!space) {
    space = new Space();
    spaces.set(prefix, space);
  }
  return space;
}

/** One step on the record of lock `name` under the store's prefix, with the store's settings. */
function step<T>(store: MemoryStore, name: string, run: (record: LockRecord, settings: StoreSettings) => T): T {
  const { space, settings } = place(store);
  return space.step(name, (record) => run(record, settings));
}

/**
 * An in-process store with the same semantics as the Redis scripts: atomic acquire with a lease
 * and a fencing token that never repeats (above the stored counter and the clock in µs),
 * owner-checked release and extend, idempotent re-sends, a FIFO queue of waiters with liveness,
 * hand-off by reservation, and hand-offs told to each lock's watchers. Every call answers
 * asynchronously, as a network store would. It coordinates only the `Leasehold` instances of one
 * process: the embedded default for demos and unit tests. No await separates a call's checks from
 * its writes: each is one step, as a script is.
 *
 * `new MemoryStore()` keeps its locks under the default prefix, with the default settings;
 * `bind(settings)` is the same store seen with a Leasehold's settings (each Leasehold binds the store
 * it is given), so Leaseholds of one prefix on one store share their locks and Leaseholds of
 * different prefixes do not.
 */
export class MemoryStore implements Store, SharedStore {
  readonly [STORE] = true;
  readonly kind = 'memory';

  constructor() {
    const spaces = new Map<string, Space>();
    const settings = storeSettings();
    places.set(this, { space: spaceFor(spaces, settings.prefix), spaces, settings });
  }

  bind(settings: StoreSettings): MemoryStore {
    const { spaces } = place(this);
    const view = Object.create(this) as MemoryStore;
    places.set(view, { space: spaceFor(spaces, settings.prefix), spaces, settings });
    return view;
  }

  async acquire(name: string, r: AcquireRequest): Promise<AcquireReply | HeldAsReply> {
    return step(this, name, (lock, s) => {
      const held = lock.lease;
      if (lock.ownedBy(r.owner)) return { acquired: true, fence: lock.fence };
      const limit = heldLimit(held);
      if (limit !== undefined && limit > 0) return { acquired: false, heldAs: limit };
      const reserved = lock.reservation;
      const handedOn = lock.reservedOnlyFor(r.owner);
      const blocker = held ?? (handedOn ? undefined : reserved);
      if (blocker) {
        if (r.queue) lock.enqueue(r.owner, s.waiterLease);
        return { acquired: false, pttl: left(blocker) };
      }
      const fence = lock.grant(r.owner, r.ttl, r.minFence ?? 0, s.instance, s.fenceRetention);
      if (r.queue === 'member') {
        lock.granted(r.owner);
        // Taken free: no hand-off named the first waiter left (lua/acquire.lua, ask_first).
        if (!handedOn) lock.askFirst();
      }
      return { acquired: true, fence };
    });
  }

  async release(name: string, owner: string): Promise<ReleaseReply> {
    return step(this, name, (lock, s) => lock.endLease(owner, s.handOn));
  }

  async extend(name: string, owner: string, ttl: number): Promise<ExtendReply> {
    return step(this, name, (lock) => {
      const held = lock.lease;
      if (!held) return 'expired';
      if (!lock.ownedBy(owner)) return 'not-owner';
      lock.extend(ttl);
      return 'extended';
    });
  }

  async leave(name: string, owner: string): Promise<void> {
    step(this, name, (lock, s) => {
      const head = lock.heads(owner);
      lock.unqueue(owner);
      if (lock.reservedOnlyFor(owner)) lock.handOn(s.handOn);
      else if (head) lock.nudge();
    });
  }

  async inspect(name: string): Promise<LockState> {
    return step(this, name, (lock) => {
      // Shared holds' mark is no owner: inspectShared lists them.
      const held = lock.lease;
      const owner = held ? readLease(held).owner : null;
      const releasedBy = lock.releasedBy;
      return {
        owner,
        pttl: held && owner !== null ? left(held) : -2,
        fence: lock.fence,
        holder: owner !== null && releasedBy === null ? lock.holder : null,
        releasedBy,
      };
    });
  }

  async acquireShared(name: string, request: SharedRequest): Promise<SharedAcquireReply> {
    return step(this, name, (lock, s) => acquireShared(lock, request, s));
  }

  async extendShared(name: string, owner: string, ttl: number): Promise<ExtendReply> {
    return step(this, name, (lock) => extendShared(lock, owner, ttl));
  }

  async releaseShared(name: string, owner: string): Promise<ReleaseReply> {
    return step(this, name, (lock, s) => releaseShared(lock, owner, s.handOn));
  }

  async leaveShared(name: string, owner: string): Promise<void> {
    step(this, name, (lock, s) => leaveShared(lock, owner, s.handOn));
  }

  async inspectShared(name: string): Promise<SharedState> {
    return step(this, name, (lock) => inspectShared(lock));
  }

  async watch(name: string, onHandOff: (handOff: HandOff) => void): Promise<() => void> {
    return place(this).space.watch(name, onHandOff);
  }

  async raiseFence(name: string, fence: number): Promise<number> {
    return step(this, name, (lock, s) => lock.raiseFence(fence, s.fenceRetention));
  }

  async claimTick(name: string, request: ClaimRequest): Promise<ClaimReply> {
    return step(this, name, (job, s) => claimTick(job, request, s));
  }

  async finishTick(name: string, request: FinishRequest): Promise<FinishReply> {
    return step(this, name, (job, s) => finishTick(job, request, s));
  }

  async readJob(name: string, limit: number): Promise<JobState> {
    return step(this, name, (job) => readJob(job, limit));
  }

  async forgetJob(name: string): Promise<void> {
    step(this, name, (job) => {
      job.tick = null;
      job.runs = [];
    });
  }

  async *scanLocks(match: string, _count: number): AsyncGenerator<string> {
    const matches = globMatcher(match);
    const { space } = place(this);
    // A snapshot, as a SCAN is: a lock taken meanwhile may or may not be listed.
    for (const name of space.names()) {
      if (matches(name) && space.step(name, (lock) => lock.lease !== undefined)) yield name;
    }
  }

  async forceRelease(name: string): Promise<ForceReleaseReply> {
    return step(this, name, (lock, s) => {
      const held = lock.lease;
      if (!held) return { result: 'not-held' };
      const holder = lock.holder;
      const woken = lock.handOn(s.handOn);
      return { result: 'released', owner: holderOf(readLease(held)) as string, holder, woken };
    });
  }

  async queued(name: string, limit: number): Promise<QueueState> {
    return step(this, name, (lock) => {
      const waiters = lock.queue;
      const reserved = lock.reservation;
      return {
        count: waiters.length,
        first: waiters.slice(0, Math.max(0, limit)),
        reserved: reserved ? { owner: readLease(reserved).reservedFor as string, pttl: left(reserved) } : null,
      };
    });
  }

  /** Watchers of lock `name` under this store's prefix: lets tests see a waiter listening, and gone. */
  watching(name: string): number {
    return place(this).space.watching(name);
  }

  /** Lock names watched, under every prefix: lets tests prove an aborted wait leaves no watcher behind. */
  get subscriptions(): number {
    let total = 0;
    for (const space of place(this).spaces.values()) total += space.watched;
    return total;
  }

  /** Drops every watcher, under every prefix (the store opened nothing else). */
  async close(): Promise<void> {
    for (const space of place(this).spaces.values()) space.unwatchAll();
  }
}
