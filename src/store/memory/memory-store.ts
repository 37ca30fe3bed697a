import { now } from '../../core/clock.js';
import { DEFAULTS } from '../../core/defaults.js';
import { ChannelHub } from '../channel-hub.js';
import { type JobKeys, type LockKeys, nameFromLockKey } from '../keys.js';
import {
  type AcquireReply,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type ForceReleaseReply,
  type JobState,
  type LockState,
  type QueueMode,
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

/** The entry at `key` unless its time is up; an expired one is dropped, as Redis drops a key with PX. */
function unexpired(map: Map<string, Lease>, key: string): Lease | undefined {
  const lease = map.get(key);
  if (lease && lease.expiresAt <= now()) {
    map.delete(key);
    return undefined;
  }
  return lease;
}

/**
 * An in-process store with the same semantics as the Redis scripts: atomic acquire with a lease
 * and a fencing counter that never resets, owner-checked release and extend, and a release
 * channel. Every call answers asynchronously, as a network store would. It coordinates only the
 * `Leasehold` instances of one process: the embedded default for demos and unit tests.
 */
export class MemoryStore implements Store {
  readonly [STORE] = true;
  readonly kind = 'memory';
  readonly #leases = new Map<string, Lease>();
  /** Release hand-offs: the waiter a release woke holds the lock's reservation for a moment. */
  readonly #reservations = new Map<string, Lease>();
  /** Waiters per lock in arrival order (a Set keeps insertion order, as the sorted set keeps time order). */
  readonly #waiters = new Map<string, Set<string>>();
  readonly #fences = new Map<string, number>();
  readonly #hub = new ChannelHub({ subscribe: async () => {}, unsubscribe: async () => {} });
  readonly #ticks = new Map<string, number>();
  /** Per history key, oldest first (ascending fencing token), as the Redis sorted set orders it. */
  readonly #runs = new Map<string, StoredRun[]>();

  #live(key: string): Lease | undefined {
    return unexpired(this.#leases, key);
  }

  #reservation(key: string): Lease | undefined {
    return unexpired(this.#reservations, key);
  }

  async acquire(keys: LockKeys, owner: string, ttl: number, minFence = 0, queue?: QueueMode): Promise<AcquireReply> {
    const reserved = this.#reservation(keys.reserved);
    const held = this.#live(keys.lock);
    const blocker = held ?? (reserved && reserved.owner !== owner ? reserved : undefined);
    if (blocker) {
      if (queue) {
        const waiters = this.#waiters.get(keys.waiters) ?? new Set<string>();
        waiters.add(owner);
        this.#waiters.set(keys.waiters, waiters);
      }
      return { acquired: false, pttl: Math.max(0, Math.ceil(blocker.expiresAt - now())) };
    }
    if (reserved) this.#reservations.delete(keys.reserved);
    if (queue === 'member') this.#unqueue(keys.waiters, owner);
    this.#leases.set(keys.lock, { owner, expiresAt: now() + ttl });
    const fence = Math.max((this.#fences.get(keys.fence) ?? 0) + 1, minFence);
    this.#fences.set(keys.fence, fence);
    return { acquired: true, fence };
  }

  #unqueue(key: string, owner: string): void {
    const waiters = this.#waiters.get(key);
    waiters?.delete(owner);
    if (waiters?.size === 0) this.#waiters.delete(key);
  }

  /** Pop the first waiter, reserve the lock for it, and tell every instance which waiter that is. */
  #handOn(keys: LockKeys): string {
    const waiters = this.#waiters.get(keys.waiters);
    const head = waiters?.values().next().value;
    let woken = '';
    if (head !== undefined) {
      this.#unqueue(keys.waiters, head);
      this.#reservations.set(keys.reserved, { owner: head, expiresAt: now() + DEFAULTS.reservation });
      woken = head;
    }
    // Redis delivers a PUBLISH after the script's reply; so does this.
    setImmediate(() => this.#hub.deliver(keys.channel, woken));
    return woken;
  }

  async release(keys: LockKeys, owner: string): Promise<ReleaseReply> {
    const held = this.#live(keys.lock);
    if (!held) return 'expired';
    if (held.owner !== owner) return 'not-owner';
    this.#leases.delete(keys.lock);
    this.#handOn(keys);
    return 'released';
  }

  async forceRelease(keys: LockKeys): Promise<ForceReleaseReply> {
    const held = this.#live(keys.lock);
    if (!held) return { result: 'not-held' };
    this.#leases.delete(keys.lock);
    const woken = this.#handOn(keys);
    return { result: 'released', owner: held.owner, woken: woken === '' ? null : woken };
  }

  async queued(keys: LockKeys, limit: number): Promise<QueueState> {
    const waiters = [...(this.#waiters.get(keys.waiters) ?? [])];
    const reserved = this.#reservation(keys.reserved);
    return {
      count: waiters.length,
      first: waiters.slice(0, Math.max(0, limit)),
      reserved: reserved ? { owner: reserved.owner, pttl: Math.max(0, Math.ceil(reserved.expiresAt - now())) } : null,
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

  async leave(keys: LockKeys, owner: string): Promise<void> {
    this.#unqueue(keys.waiters, owner);
    if (this.#reservation(keys.reserved)?.owner !== owner) return;
    this.#reservations.delete(keys.reserved);
    if (!this.#live(keys.lock)) this.#handOn(keys);
  }

  async extend(keys: LockKeys, owner: string, ttl: number): Promise<ExtendReply> {
    const held = this.#live(keys.lock);
    if (!held) return 'expired';
    if (held.owner !== owner) return 'not-owner';
    held.expiresAt = now() + ttl;
    return 'extended';
  }

  async raiseFence(keys: LockKeys, fence: number): Promise<number> {
    const raised = Math.max(this.#fences.get(keys.fence) ?? 0, fence);
    this.#fences.set(keys.fence, raised);
    return raised;
  }

  async inspect(keys: LockKeys): Promise<LockState> {
    const held = this.#live(keys.lock);
    return {
      owner: held?.owner ?? null,
      pttl: held ? Math.max(0, Math.ceil(held.expiresAt - now())) : -2,
      fence: this.#fences.get(keys.fence) ?? 0,
    };
  }

  async claimTick(keys: JobKeys, request: ClaimRequest): Promise<ClaimReply> {
    const last = this.#ticks.get(keys.tick);
    if (request.tick !== null && last !== undefined && last >= request.tick) {
      return { claimed: false, reason: 'already-ran', lastTick: last };
    }
    // No await from the checks to the writes: the claim is one step, as the script is.
    const holder = this.#live(keys.lock);
    if (holder) return { claimed: false, reason: 'locked', pttl: Math.max(0, Math.ceil(holder.expiresAt - now())) };
    this.#leases.set(keys.lock, { owner: request.owner, expiresAt: now() + request.ttl });
    const fence = (this.#fences.get(keys.fence) ?? 0) + 1;
    this.#fences.set(keys.fence, fence);
    if (request.tick !== null) this.#ticks.set(keys.tick, request.tick);
    // Date.now() stands in for the server's TIME: one process, one clock.
    const startedAt = Date.now();
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
    if (!held) return { lease: 'expired' };
    if (held.owner !== request.owner) return { lease: 'not-owner' };
    const remaining = request.startedAt + request.lockAtLeastFor - at;
    if (remaining > 0) {
      held.expiresAt = now() + remaining;
      return { lease: 'kept', remaining };
    }
    this.#leases.delete(keys.lock);
    setImmediate(() => this.#hub.deliver(keys.channel, ''));
    return { lease: 'released' };
  }

  async readJob(keys: JobKeys, limit: number): Promise<JobState> {
    const runs = this.#runs.get(keys.runs) ?? [];
    return {
      held: this.#live(keys.lock) !== undefined,
      fence: this.#fences.get(keys.fence) ?? 0,
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
