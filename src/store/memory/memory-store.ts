import { now } from '../../core/clock.js';
import { ChannelHub } from '../channel-hub.js';
import { type JobKeys, type LockKeys, nameFromLockKey } from '../redis/keys.js';
import {
  type AcquireReply,
  type AcquireRequest,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type ForceReleaseReply,
  type HandOn,
  type Holder,
  type JobState,
  type LockState,
  type QueueState,
  type ReleaseReply,
  STORE,
  type Store,
  type StoredRun,
} from '../port.js';

/** One character as a RegExp literal (inside a class or out): only letters and digits go bare. */
function literal(c: string): string {
  return /[A-Za-z0-9]/.test(c) ? c : `\\${c}`;
}

/**
 * A Redis glob (`*`, `?`, `[abc]`, `[^a-z]`, backslash escapes) as an anchored RegExp, so that
 * listing locks on memory matches the names SCAN MATCH would. An unclosed `[` is a literal.
 */
function globPattern(glob: string): RegExp {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === '*') out += '[\\s\\S]*';
    else if (c === '?') out += '[\\s\\S]';
    else if (c === '\\' && i + 1 < glob.length) out += literal(glob[++i] as string);
    else if (c === '[') {
      let end = i + 1;
      while (end < glob.length && glob[end] !== ']') end += glob[end] === '\\' ? 2 : 1;
      if (end >= glob.length) {
        out += literal(c);
        continue;
      }
      let j = i + 1;
      let set = '';
      if (glob[j] === '^') {
        set += '^';
        j++;
      }
      while (j < end) {
        let from = glob[j] as string;
        if (from === '\\' && j + 1 < end) from = glob[++j] as string;
        const to = glob[j + 2];
        if (glob[j + 1] === '-' && to !== undefined && j + 2 < end) {
          // Redis accepts a reversed range (z-a); a RegExp does not.
          const [lo, hi] = from <= to ? [from, to] : [to, from];
          set += `${literal(lo)}-${literal(hi)}`;
          j += 3;
        } else {
          set += literal(from);
          j++;
        }
      }
      out += `[${set}]`;
      i = end;
    } else out += literal(c);
  }
  return new RegExp(`^${out}$`);
}

interface Lease {
  owner: string;
  expiresAt: number;
}

interface Held extends Lease {
  readonly holder: Holder;
}

/** The entry at `key` unless its time is up; an expired one is dropped, as Redis drops a key with PX. */
function unexpired<T extends { expiresAt: number }>(map: Map<string, T>, key: string): T | undefined {
  const entry = map.get(key);
  if (entry && entry.expiresAt <= now()) {
    map.delete(key);
    return undefined;
  }
  return entry;
}

/** The wall clock in µs, standing in for the server's TIME: one process, one clock. */
function clockMicros(): number {
  return Math.floor((performance.timeOrigin + now()) * 1000);
}

function left(entry: { expiresAt: number }): number {
  return Math.max(0, Math.ceil(entry.expiresAt - now()));
}

/**
 * An in-process store with the same semantics as the Redis scripts: atomic acquire with a lease
 * and a fencing token that never repeats (above the stored counter and the clock in µs),
 * owner-checked release and extend, idempotent re-sends, a FIFO queue of waiters with liveness,
 * hand-off by reservation, and a release channel. Every call answers asynchronously, as a network
 * store would. It coordinates only the `Leasehold` instances of one process: the embedded default
 * for demos and unit tests. No await separates a call's checks from its writes: each is one step,
 * as a script is.
 */
export class MemoryStore implements Store {
  readonly [STORE] = true;
  readonly kind = 'memory';
  readonly #leases = new Map<string, Held>();
  /** Release hand-offs: the waiter a release woke holds the lock's reservation for a moment. */
  readonly #reservations = new Map<string, Lease>();
  /** Waiters per lock in arrival order (a Map keeps insertion order), each with its liveness deadline. */
  readonly #waiters = new Map<string, Map<string, number>>();
  /** The latest token per lock, and the owner that released the lock granted with it (as the Redis counter's mark). */
  readonly #fences = new Map<string, { value: number; expiresAt: number; releasedBy?: string }>();
  readonly #hub = new ChannelHub({ subscribe: async () => {}, unsubscribe: async () => {} });
  readonly #ticks = new Map<string, number>();
  /** Per history key, oldest first (ascending fencing token), as the Redis sorted set orders it. */
  readonly #runs = new Map<string, StoredRun[]>();

  #live(key: string): Held | undefined {
    return unexpired(this.#leases, key);
  }

  #reservation(key: string): Lease | undefined {
    return unexpired(this.#reservations, key);
  }

  #fence(key: string): number {
    return unexpired(this.#fences, key)?.value ?? 0;
  }

  /** Grant the lock (the caller checked it is free), as lua/lib/lease.lua grants it. */
  #grant(keys: LockKeys, owner: string, ttl: number, minFence: number, instance: string, retention: number): Held {
    const token = Math.max(this.#fence(keys.fence) + 1, clockMicros(), minFence);
    const lease: Held = { owner, expiresAt: now() + ttl, holder: { token, takenAt: Date.now(), instance } };
    this.#leases.set(keys.lock, lease);
    this.#fences.set(keys.fence, { value: token, expiresAt: now() + retention });
    return lease;
  }

  #enqueue(keys: LockKeys, owner: string, lease: number): void {
    let waiters = this.#waiters.get(keys.waiters);
    if (!waiters) {
      waiters = new Map();
      this.#waiters.set(keys.waiters, waiters);
    }
    waiters.set(owner, now() + lease);
  }

  #unqueue(key: string, owner: string): void {
    const waiters = this.#waiters.get(key);
    waiters?.delete(owner);
    if (waiters?.size === 0) this.#waiters.delete(key);
  }

  async acquire(keys: LockKeys, r: AcquireRequest): Promise<AcquireReply> {
    const reserved = this.#reservation(keys.lock);
    const held = this.#live(keys.lock);
    if (held?.owner === r.owner) return { acquired: true, fence: held.holder.token };
    const blocker = held ?? (reserved && reserved.owner !== r.owner ? reserved : undefined);
    if (blocker) {
      if (r.queue) this.#enqueue(keys, r.owner, r.waiterLease);
      return { acquired: false, pttl: left(blocker) };
    }
    if (reserved) this.#reservations.delete(keys.lock);
    if (r.queue === 'member') this.#unqueue(keys.waiters, r.owner);
    const lease = this.#grant(keys, r.owner, r.ttl, r.minFence, r.instance, r.fenceRetention);
    return { acquired: true, fence: lease.holder.token };
  }

  /** The first live waiter, dropping dead ones at the head; `pop` takes it off the queue too. */
  #firstLive(key: string, pop: boolean): string {
    const waiters = this.#waiters.get(key);
    if (!waiters) return '';
    for (const [owner, deadline] of waiters) {
      if (deadline >= now()) {
        if (pop) this.#unqueue(key, owner);
        return owner;
      }
      this.#unqueue(key, owner);
    }
    return '';
  }

  /** Reserve the lock for the first live waiter and tell every instance which waiter that is, and who is next. */
  #handOn(keys: LockKeys, handOn: HandOn): string {
    const woken = this.#firstLive(keys.waiters, true);
    let next = '';
    if (woken !== '') {
      this.#reservations.set(keys.lock, { owner: woken, expiresAt: now() + handOn.reservation });
      next = this.#firstLive(keys.waiters, false);
      if (next !== '') {
        // Up to two more live waiters after the next one, as lua/lib/hand-on.lua publishes them.
        const after = [...(this.#waiters.get(keys.waiters) ?? [])]
          .slice(1, 5)
          .filter(([, deadline]) => deadline >= now())
          .slice(0, 2)
          .map(([owner]) => owner);
        next = [next, ...after].join(' ');
      }
    }
    if (woken !== '' || handOn.announce) {
      const message = next === '' ? woken : `${woken} ${next}`;
      // Redis delivers a PUBLISH after the script's reply; so does this.
      setImmediate(() => this.#hub.deliver(keys.channel, message));
    }
    return woken;
  }

  /** End `owner`'s lease and hand on, as lua/lib/hand-on.lua's end_lease does. */
  #endLease(keys: LockKeys, owner: string, handOn: HandOn): ReleaseReply {
    const held = this.#live(keys.lock);
    const counter = unexpired(this.#fences, keys.fence);
    if (held?.owner === owner) {
      this.#leases.delete(keys.lock);
      if (counter) counter.releasedBy = owner;
      this.#handOn(keys, handOn);
      return 'released';
    }
    if (counter?.releasedBy === owner) return 'released';
    if (held) return 'not-owner';
    if (!this.#reservation(keys.lock)) this.#handOn(keys, handOn);
    return 'expired';
  }

  async release(keys: LockKeys, owner: string, handOn: HandOn): Promise<ReleaseReply> {
    return this.#endLease(keys, owner, handOn);
  }

  async forceRelease(keys: LockKeys, handOn: HandOn): Promise<ForceReleaseReply> {
    const held = this.#live(keys.lock);
    if (!held) return { result: 'not-held' };
    this.#leases.delete(keys.lock);
    const woken = this.#handOn(keys, handOn);
    return { result: 'released', owner: held.owner, holder: held.holder, woken: woken === '' ? null : woken };
  }

  async queued(keys: LockKeys, limit: number): Promise<QueueState> {
    const waiters = [...(this.#waiters.get(keys.waiters)?.keys() ?? [])];
    const reserved = this.#reservation(keys.lock);
    return {
      count: waiters.length,
      first: waiters.slice(0, Math.max(0, limit)),
      reserved: reserved ? { owner: reserved.owner, pttl: left(reserved) } : null,
    };
  }

  async *scanLocks(prefix: string, match: string, _count: number): AsyncGenerator<string> {
    const pattern = globPattern(match);
    // A snapshot, as a SCAN is: a lock taken meanwhile may or may not be listed.
    for (const key of [...this.#leases.keys()]) {
      const name = nameFromLockKey(prefix, key);
      if (name !== null && this.#live(key) && pattern.test(name)) yield name;
    }
  }

  async leave(keys: LockKeys, owner: string, handOn: HandOn): Promise<void> {
    this.#unqueue(keys.waiters, owner);
    if (this.#reservation(keys.lock)?.owner !== owner) return;
    this.#reservations.delete(keys.lock);
    if (!this.#live(keys.lock)) this.#handOn(keys, handOn);
  }

  async extend(keys: LockKeys, owner: string, ttl: number): Promise<ExtendReply> {
    const held = this.#live(keys.lock);
    if (!held) return 'expired';
    if (held.owner !== owner) return 'not-owner';
    held.expiresAt = now() + ttl;
    return 'extended';
  }

  async raiseFence(keys: LockKeys, fence: number, retention: number): Promise<number> {
    const current = this.#fence(keys.fence);
    if (fence <= current) return current;
    this.#fences.set(keys.fence, { value: fence, expiresAt: now() + retention });
    return fence;
  }

  async inspect(keys: LockKeys): Promise<LockState> {
    const held = this.#live(keys.lock);
    return {
      owner: held?.owner ?? null,
      pttl: held ? left(held) : -2,
      fence: this.#fence(keys.fence),
      holder: held?.holder ?? null,
      releasedBy: unexpired(this.#fences, keys.fence)?.releasedBy ?? null,
    };
  }

  async claimTick(keys: JobKeys, request: ClaimRequest): Promise<ClaimReply> {
    const holder = this.#live(keys.lock);
    if (holder?.owner === request.owner) {
      return { claimed: true, fence: holder.holder.token, startedAt: holder.holder.takenAt };
    }
    const at = Date.now();
    if (request.tick !== null) {
      if (request.tick > at + request.clockTolerance) return { claimed: false, reason: 'clock-skew', now: at };
      const last = this.#ticks.get(keys.tick);
      if (last !== undefined && last >= request.tick) return { claimed: false, reason: 'already-ran', lastTick: last };
    }
    if (holder) return { claimed: false, reason: 'locked', pttl: left(holder) };
    const reserved = this.#reservation(keys.lock);
    if (reserved) return { claimed: false, reason: 'locked', pttl: left(reserved) };
    const lease = this.#grant(keys, request.owner, request.ttl, 0, request.instance, request.fenceRetention);
    const fence = lease.holder.token;
    const startedAt = lease.holder.takenAt;
    if (request.tick !== null) this.#ticks.set(keys.tick, request.tick);
    const runs = this.#runs.get(keys.runs) ?? [];
    runs.push({
      fence,
      tick: request.tick,
      instance: request.instance,
      startedAt,
      finishedAt: null,
      outcome: 'running',
      error: null,
    });
    if (runs.length > request.historyLimit) runs.splice(0, runs.length - request.historyLimit);
    this.#runs.set(keys.runs, runs);
    return { claimed: true, fence, startedAt };
  }

  async finishTick(keys: JobKeys, request: FinishRequest): Promise<FinishReply> {
    const at = Date.now();
    const runs = this.#runs.get(keys.runs) ?? [];
    const i = runs.findIndex((r) => r.fence === request.fence);
    const run = runs[i];
    if (run && run.outcome === 'running') {
      runs[i] = { ...run, finishedAt: at, outcome: request.outcome, error: request.error };
    }
    const held = this.#live(keys.lock);
    if (held?.owner === request.owner) {
      const remaining = request.startedAt + request.lockAtLeastFor - at;
      if (remaining > 0) {
        held.expiresAt = now() + remaining;
        return { lease: 'kept', remaining };
      }
    }
    return { lease: this.#endLease(keys, request.owner, request.handOn) };
  }

  async readJob(keys: JobKeys, limit: number): Promise<JobState> {
    const runs = this.#runs.get(keys.runs) ?? [];
    return {
      held: this.#live(keys.lock) !== undefined,
      fence: this.#fence(keys.fence),
      lastTick: this.#ticks.get(keys.tick) ?? null,
      runs: runs.slice(-limit).reverse(),
    };
  }

  /** Names of the lock keys currently held (operator tooling and tests). */
  async heldKeys(): Promise<string[]> {
    return [...this.#leases.keys()].filter((key) => this.#live(key) !== undefined);
  }

  subscribe(channel: string, onMessage: (message: string) => void): Promise<() => void> {
    return this.#hub.subscribe(channel, onMessage);
  }

  /** Channels with a listener: lets tests prove an aborted wait leaves no subscription behind. */
  get subscriptions(): number {
    return this.#hub.size;
  }

  async close(): Promise<void> {
    this.#hub.clear();
  }
}
