import { now } from '../../core/clock.js';
import {
  decodeLockValue,
  encodeLockValue,
  type FenceRecord,
  grantOf,
  heldBy,
  type LockValue,
  reservedFor,
  type WaiterEntry,
} from '../formats.js';
import type { HandOff, HandOn, Holder, ReleaseReply, StoredRun } from '../port.js';

/**
 * Who holds a lease, or whom a reservation keeps the lock for, until when (monotonic ms). `value`
 * is the lock value as the Redis lock key keeps it (formats.ts): the holder's owner token, the
 * waiters reserved for, or the mark of shared holds (see shared.ts), with the mark of waiters
 * queued since, so an uncontended release skips the queue.
 */
export interface Lease {
  value: string;
  expiresAt: number;
}

/** A lease's value, read. */
export function readLease(lease: Lease): LockValue {
  return decodeLockValue(lease.value);
}

/**
 * A shared hold (a semaphore's permit, a read-write lock's shared hold) until `expiresAt`
 * (monotonic ms; 0 once released), with its grant; or a reservation of one for a waiter (grant null).
 */
export interface SharedHold {
  expiresAt: number;
  readonly grant: Holder | null;
}

/** The first live waiter of a queue, and the limit of the shared hold it waits for (null: the lock itself). */
interface Live {
  readonly owner: string;
  readonly shared: number | null;
}

/** Shared waiters one hand-off admits together at most, when their kind has no limit (lua/lib/hand-on.lua). */
export const MAX_ADMITTED = 64;

/** The fencing counter, until when (monotonic ms). */
interface Counter extends FenceRecord {
  readonly expiresAt: number;
}

/** The entry unless its time is up; an expired one is dropped, as Redis drops a key with PX. */
function unexpired<T extends { readonly expiresAt: number }>(entry: T | undefined): T | undefined {
  return entry && entry.expiresAt > now() ? entry : undefined;
}

/** The wall clock in µs, standing in for the server's TIME: one process, one clock. */
function clockMicros(): number {
  return Math.floor((performance.timeOrigin + now()) * 1000);
}

/** ms a lease or reservation has left. */
export function left(entry: Lease): number {
  return Math.max(0, Math.ceil(entry.expiresAt - now()));
}

/**
 * Everything kept for one lock name, as the Redis keys of that name keep it (lua/lib/lease.lua,
 * lua/lib/hand-on.lua): the lease or the reservation for a woken waiter, the fencing counter with
 * its retention and release mark, the waiters' queue with each waiter's liveness, and for a job
 * its latest tick and run history. Each method is one step of a script; `publish` tells the
 * lock's watchers of a hand-off.
 */
export class LockRecord {
  #lease: Lease | undefined;
  #reservation: Lease | undefined;
  #counter: Counter | undefined;
  /** Waiters in arrival order (a Map keeps insertion order), each with its liveness entry (deadline: monotonic ms). */
  readonly #waiters = new Map<string, WaiterEntry>();
  /**
   * Shared holds and reservations of them, by owner (see shared.ts). They mean something only while
   * the lease is the mark of shared holds ('^<limit>'); whoever takes the lock otherwise clears them.
   */
  readonly holds = new Map<string, SharedHold>();
  /** The latest tick claimed (ms since the epoch); never expires. */
  tick: number | null = null;
  /** The run history, oldest first (ascending fencing token), as the Redis sorted set orders it. */
  runs: StoredRun[] = [];
  readonly #publish: (handOff: HandOff) => void;

  constructor(publish: (handOff: HandOff) => void) {
    this.#publish = publish;
  }

  /** The current holder's lease, or undefined when free (or only reserved). */
  get lease(): Lease | undefined {
    this.#lease = unexpired(this.#lease);
    return this.#lease;
  }

  /** Whether `owner` holds the lock exclusively. */
  ownedBy(owner: string): boolean {
    const held = this.lease;
    return held !== undefined && readLease(held).owner === owner;
  }

  /** Whether the lock is reserved for `owner` alone. */
  reservedOnlyFor(owner: string): boolean {
    const reserved = this.reservation && readLease(this.reservation);
    return reserved !== undefined && reserved.reserved.length === 1 && reserved.reservedFor === owner;
  }

  /** Set the lease (shared holds' mark, see shared.ts): the reservation, if any, is used up. */
  hold(lease: Lease): void {
    this.#lease = lease;
    this.#reservation = undefined;
  }

  /** Keep the lock reserved as `reservation` says (fewer shared waiters, after one left). */
  reserve(reservation: Lease): void {
    this.#reservation = reservation;
  }

  /** The waiter a hand-off reserved the lock for, while its reservation lasts. */
  get reservation(): Lease | undefined {
    this.#reservation = unexpired(this.#reservation);
    return this.#reservation;
  }

  /** The latest fencing token issued (or raised to) while the counter is kept; 0 if none. */
  get fence(): number {
    return this.#liveCounter()?.token ?? 0;
  }

  /** The owner that released the grant the counter records, or null. */
  get releasedBy(): string | null {
    return this.#liveCounter()?.releasedBy ?? null;
  }

  /** The grant the counter records, as operator tooling shows it; null when none is kept. */
  get holder(): Holder | null {
    const counter = this.#liveCounter();
    return counter ? grantOf(counter) : null;
  }

  /** Nothing left: the record can go, as Redis has no key left for the name. */
  get empty(): boolean {
    return (
      !this.lease &&
      !this.reservation &&
      !this.#liveCounter() &&
      this.queue.length === 0 &&
      this.tick === null &&
      this.runs.length === 0
    );
  }

  #liveCounter(): Counter | undefined {
    this.#counter = unexpired(this.#counter);
    return this.#counter;
  }

  /**
   * Take the lock for `owner` (the caller checked it is free, or reserved for `owner`) and issue
   * the next token: above the counter and `minFence`, never below the clock in µs (lua/lib/lease.lua).
   */
  grant(owner: string, ttl: number, minFence: number, instance: string, retention: number): number {
    // A reserved lock keeps the flag of the waiters behind.
    const reserved = this.reservation;
    const flagged = reserved ? readLease(reserved).flagged : false;
    this.#reservation = undefined;
    this.#lease = { value: encodeLockValue(heldBy(owner, flagged)), expiresAt: now() + ttl };
    return this.issue(minFence, instance, retention).token;
  }

  /** Issue the next token and record the grant in the counter (lua/lib/lease.lua's issue). */
  issue(minFence: number, instance: string, retention: number): Holder {
    const token = Math.max(this.fence + 1, clockMicros(), minFence);
    const counter = { token, grant: { takenAtUs: Date.now() * 1000, instance }, releasedBy: null };
    this.#counter = { ...counter, expiresAt: now() + retention };
    return grantOf(counter) as Holder;
  }

  /** Let the current lease end `ms` from now. */
  extend(ms: number): void {
    if (this.#lease) this.#lease.expiresAt = now() + ms;
  }

  /** Raise the counter to `fence` unless it is there already; the grant and release mark stay. */
  raiseFence(fence: number, retention: number): number {
    const counter = this.#liveCounter();
    if (fence <= (counter?.token ?? 0)) return counter?.token ?? 0;
    const kept = { grant: counter?.grant ?? null, releasedBy: counter?.releasedBy ?? null };
    this.#counter = { token: fence, ...kept, expiresAt: now() + retention };
    return fence;
  }

  /**
   * Owner tokens of the waiters queued, in arrival order. The queue goes as a whole once no waiter
   * is live, as its Redis keys expire a waiter's lease after the last one renewed them.
   */
  get queue(): string[] {
    const at = now();
    if (![...this.#waiters.values()].some((w) => w.deadline >= at)) this.#waiters.clear();
    return [...this.#waiters.keys()];
  }

  /**
   * Queue `owner` at the tail unless it is queued already, renew its liveness for `lease` ms, and
   * flag the lease or reservation that refused it. `shared`: the limit of the shared hold it waits
   * for, or null for an exclusive waiter.
   */
  enqueue(owner: string, lease: number, shared: number | null = null): void {
    this.#waiters.set(owner, { deadline: now() + lease, shared, direct: null });
    const blocker = this.lease ?? this.reservation;
    if (blocker) blocker.value = encodeLockValue({ ...readLease(blocker), flagged: true });
  }

  unqueue(owner: string): void {
    this.#waiters.delete(owner);
  }

  /**
   * A queued waiter was granted the lock: it leaves the queue, and so do the dead at its head
   * (named by a hand-off before it, they never came), so no later hand-off names them.
   */
  granted(owner: string): void {
    this.#waiters.delete(owner);
    this.#firstLive(false);
  }

  /** The first live waiter, dropping dead ones at the head; `pop` takes it off the queue too. */
  #firstLive(pop: boolean): Live | null {
    for (const [owner, { deadline, shared }] of this.#waiters) {
      const live = deadline >= now();
      if (pop || !live) this.#waiters.delete(owner);
      if (live) return { owner, shared };
    }
    return null;
  }

  /** Take off the queue the live shared waiters of `limit` at its head, at most `room` of them. */
  popKind(limit: number, room: number): string[] {
    const woken: string[] = [];
    while (woken.length < room) {
      const head = this.#firstLive(false);
      if (head === null || head.shared !== limit) break;
      this.#waiters.delete(head.owner);
      woken.push(head.owner);
    }
    return woken;
  }

  /**
   * Keep the waiters a hand-off names next to their turn (lua/lib/hand-on.lua's summon): the i-th
   * retries i reservations after the message, so its deadline comes to i + 1 reservations; one
   * that never comes is dead then, and dropped where it is met.
   */
  summon(next: readonly string[], reservation: number): void {
    next.forEach((owner, i) => {
      const waiting = this.#waiters.get(owner);
      const by = now() + (i + 2) * reservation;
      if (waiting && waiting.deadline > by) this.#waiters.set(owner, { ...waiting, deadline: by });
    });
  }

  /** Up to three live waiters at the head of the queue. */
  following(): string[] {
    const first = this.#firstLive(false);
    if (first === null) return [];
    const at = now();
    const after = [...this.#waiters].slice(1, 5).filter(([, w]) => w.deadline >= at);
    return [first.owner, ...after.slice(0, 2).map(([owner]) => owner)];
  }

  /** Whether `owner` is the first live waiter (dropping dead ones at the head). */
  heads(owner: string): boolean {
    return this.#firstLive(false)?.owner === owner;
  }

  /**
   * Wake the first live waiter to ask again, with the shared waiters of its kind among the
   * `limit - 1` behind it: what keeps them out changed without a hand-off (a waiter ahead left).
   * Nothing is reserved (lua/lib/hand-on.lua's nudge).
   */
  nudge(): void {
    const head = this.#firstLive(false);
    if (head === null) return;
    const woken = [head.owner];
    const limit = head.shared;
    if (limit !== null) {
      const at = now();
      for (const [owner, w] of [...this.#waiters].slice(1, limit === 0 ? MAX_ADMITTED : limit)) {
        if (w.deadline < at) continue;
        if (w.shared !== limit) break;
        woken.push(owner);
      }
    }
    this.tell(woken, []);
  }

  /**
   * Wake the first live waiter, alone, to ask again: what keeps it out changed without a hand-off
   * naming it, so it learns the new end rather than sleep on the old one. Nothing is reserved
   * (lua/lib/hand-on.lua's ask_first).
   */
  askFirst(): void {
    const head = this.#firstLive(false);
    if (head !== null) this.tell([head.owner], []);
  }

  /** Tell each of `woken` it was woken, one hand-off each; the last names `next` after it. */
  tell(woken: readonly string[], next: readonly string[]): void {
    woken.forEach((owner, i) => {
      this.#publish({ woken: owner, next: i === woken.length - 1 ? next : [] });
    });
  }

  /**
   * The first live exclusive waiter queued ahead of `owner` (or at all, for an owner not queued),
   * dropping dead ones met on the way; looking at the first 16 waiters, a longer queue without
   * `owner` among them counts as one (''); null when none (lua/lib/shared.lua's exclusive_ahead).
   */
  exclusiveAhead(owner: string): string | null {
    const first = [...this.#waiters].slice(0, 16);
    const at = now();
    for (const [w, { deadline, shared }] of first) {
      if (w === owner) return null;
      if (deadline < at) this.#waiters.delete(w);
      else if (shared === null) return w;
    }
    return first.length === 16 ? '' : null;
  }

  /**
   * Ask exclusive waiter `owner` (its liveness renewed for `lease` ms by each of its tries), which
   * keeps a shared request out, whether it is alive: unless it tried within the last `reservation`
   * ms or was asked already, its deadline comes to one reservation from now, and a hand-off naming
   * it wakes it, so a live one tries again (renewing it) and a dead one lapses
   * (lua/lib/shared.lua's challenge). Returns ms after which the request is worth trying again.
   */
  challenge(owner: string, reservation: number, lease: number): number {
    const waiting = this.#waiters.get(owner);
    if (!waiting) return 0;
    const at = now();
    if (waiting.deadline <= at + reservation) return Math.max(0, Math.ceil(waiting.deadline - at));
    const tried = waiting.deadline - lease;
    if (tried > at - reservation) return Math.ceil(Math.min(reservation, tried + reservation - at));
    this.#waiters.set(owner, { ...waiting, deadline: at + reservation });
    this.tell([owner], []);
    return reservation;
  }

  /**
   * Free the lock and hand it to the first live waiter: reserve it for `reservation` ms, and tell
   * the watchers which waiter that is and up to three live ones after it (lua/lib/hand-on.lua).
   * A shared waiter at the head is admitted with the shared waiters of its kind right behind it
   * (up to its limit), each told. With nobody to wake, the lock is just freed, and announced only
   * when `announce`.
   */
  handOn({ reservation, announce }: HandOn): string | null {
    const head = this.#firstLive(true);
    if (head === null) {
      this.free(announce);
      return null;
    }
    const woken = [head.owner];
    const limit = head.shared;
    if (limit !== null) woken.push(...this.popKind(limit, (limit === 0 ? MAX_ADMITTED : limit) - 1));
    const next = this.following();
    this.#lease = undefined;
    const value = encodeLockValue(reservedFor(woken, next.length > 0));
    this.#reservation = { value, expiresAt: now() + reservation };
    this.summon(next, reservation);
    this.tell(woken, next);
    return head.owner;
  }

  /** Free the lock without looking at the queue; tell any waiter only when `announce`. */
  free(announce: boolean): void {
    this.#lease = undefined;
    this.#reservation = undefined;
    if (announce) this.#publish({ woken: null, next: [] });
  }

  /**
   * End `owner`'s lease, handing the lock on if it is flagged (lua/lib/hand-on.lua's end_lease).
   * A counter marked released by `owner` answers a re-sent release; a lock with no lease and no
   * reservation expired, and its waiters are woken all the same.
   */
  endLease(owner: string, handOn: HandOn): ReleaseReply {
    const held = this.lease;
    const counter = this.#liveCounter();
    if (held && this.ownedBy(owner)) {
      if (counter) this.#counter = { ...counter, releasedBy: owner };
      if (readLease(held).flagged) this.handOn(handOn);
      else this.free(handOn.announce);
      return 'released';
    }
    if (counter?.releasedBy === owner) return 'released';
    if (held) return 'not-owner';
    if (!this.reservation) this.handOn(handOn);
    return 'expired';
  }
}
