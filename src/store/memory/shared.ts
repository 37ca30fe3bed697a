import { now } from '../../core/clock.js';
import { encodeLockValue, reservedFor, sharedBy } from '../formats.js';
import type {
  ExtendReply,
  HandOn,
  ReleaseReply,
  SharedAcquireReply,
  SharedHold,
  SharedRequest,
  SharedState,
  StoreSettings,
} from '../port.js';
import { type Lease, type LockRecord, left, MAX_ADMITTED, readLease } from './record.js';

/**
 * Shared holds on the record of one lock name, as lua/lib/shared.lua keeps them: while they hold
 * the lock its lease is the mark '^<limit>' (a semaphore of <limit> permits, or 0 for a read-write
 * lock's shared holders), lasting as long as the latest hold, so the mutex's steps see the lock
 * held by another owner; the holds themselves are `record.holds`. Each function is one script.
 */

const isShared = (lease: Lease | undefined): lease is Lease => lease !== undefined && readLease(lease).shared !== null;

/** The limit shared holds took the lock with ('^<limit>'), or undefined when it is not held by shared holds. */
export function heldLimit(lease: Lease | undefined): number | undefined {
  return lease ? (readLease(lease).shared ?? undefined) : undefined;
}

const liveAt = (at: number) => (hold: { expiresAt: number }) => hold.expiresAt > at;

/** Drop the holds and reservations whose time is up, and the released marks. */
function prune(lock: LockRecord): void {
  const at = now();
  for (const [owner, hold] of lock.holds) if (hold.expiresAt <= at) lock.holds.delete(owner);
}

/** Live holds and reservations: the permits in use. */
function inUse(lock: LockRecord): number {
  return [...lock.holds.values()].filter(liveAt(now())).length;
}

/** Stretch the mark to the latest live hold's end; false when none is live. */
function stretch(lock: LockRecord, mark: Lease): boolean {
  const ends = [...lock.holds.values()].filter(liveAt(now())).map((h) => h.expiresAt);
  if (ends.length === 0) return false;
  mark.expiresAt = Math.max(...ends);
  return true;
}

function reservedAmong(reservation: Lease | undefined, owner: string): boolean {
  return reservation !== undefined && readLease(reservation).reserved.includes(owner);
}

/** After a hold ended under `mark`: hand the lock on once no hold is left, else free permits to the shared waiters at the head. */
function freeUp(lock: LockRecord, mark: Lease, handOn: HandOn): void {
  const used = inUse(lock);
  const { flagged, shared: limit } = readLease(mark);
  if (used === 0) {
    if (flagged) lock.handOn(handOn);
    else lock.free(handOn.announce);
    return;
  }
  if (flagged && limit !== null) {
    const woken = lock.popKind(limit, limit === 0 ? MAX_ADMITTED : limit - used);
    for (const owner of woken) lock.holds.set(owner, { expiresAt: now() + handOn.reservation, grant: null });
    if (woken.length > 0) {
      const next = lock.following();
      lock.summon(next, handOn.reservation);
      lock.tell(woken, next);
    } else {
      // Nobody admitted, but the lock may now end sooner than the head waiter was told: it asks again.
      lock.askFirst();
    }
  }
  stretch(lock, mark);
}

/** lua/acquire-shared.lua. */
export function acquireShared(lock: LockRecord, r: SharedRequest, s: StoreSettings): SharedAcquireReply {
  const held = lock.lease;
  const reserved = lock.reservation;
  // `handedOn`: a hand-off reserved the hold for this waiter, and named the waiters behind it.
  const take = (mark: Lease, handedOn: boolean): SharedAcquireReply => {
    const grant = lock.issue(0, s.instance, s.fenceRetention);
    lock.holds.set(r.owner, { expiresAt: now() + r.ttl, grant });
    if (r.queue === 'member') {
      lock.granted(r.owner);
      // No hand-off named the first waiter left: it learns this hold's end (lua/acquire-shared.lua).
      if (!handedOn) lock.askFirst();
    }
    stretch(lock, mark);
    return { acquired: true, fence: grant.token };
  };
  const fresh = (expiresAt: number, flagged: boolean): Lease => {
    lock.holds.clear();
    const mark = { value: encodeLockValue(sharedBy(r.limit, flagged)), expiresAt };
    lock.hold(mark);
    return mark;
  };
  let wait = held || reserved ? left((held ?? reserved) as Lease) : -2;
  // Held exclusively (a mutex, an exclusive hold, a job's run): a semaphore is another kind of lock.
  if (r.limit > 0 && held !== undefined && !isShared(held)) return { acquired: false, heldAs: -1 };
  if (isShared(held)) {
    const limit = heldLimit(held) as number;
    if (limit !== r.limit) return { acquired: false, heldAs: limit };
    const mine = lock.holds.get(r.owner);
    if (mine && mine.expiresAt > now()) {
      // A hold already this owner's (a re-sent call), or a permit a hand-off reserved for it.
      return mine.grant ? { acquired: true, fence: mine.grant.token } : take(held, true);
    }
    prune(lock);
    const writer = r.limit === 0 || inUse(lock) < r.limit ? lock.exclusiveAhead(r.owner) : undefined;
    if (writer === null) return take(held, false);
    if (writer) {
      wait = lock.challenge(writer, s.handOn.reservation, s.waiterLease);
    } else if (r.limit > 0) {
      const first = Math.min(...[...lock.holds.values()].map((h) => h.expiresAt));
      if (Number.isFinite(first)) wait = Math.max(0, Math.ceil(first - now()));
    }
  } else if (!held && reserved && reservedAmong(reserved, r.owner)) {
    // The lock reserved for shared waiters, this one among them: theirs now, each of the others
    // keeping its reservation until it comes.
    const { flagged, reserved: waiters } = readLease(reserved);
    const mark = fresh(now() + Math.max(r.ttl, wait), flagged);
    for (const owner of waiters) {
      if (owner !== r.owner) lock.holds.set(owner, { expiresAt: now() + wait, grant: null });
    }
    return take(mark, true);
  } else if (!held && !reserved) {
    if (lock.exclusiveAhead(r.owner) === null) return take(fresh(now() + r.ttl, false), false);
    // Free, with an exclusive waiter ahead: it gets the lock, as from a release.
    lock.handOn(s.handOn);
    const handed = lock.reservation;
    wait = handed ? left(handed) : -2;
  }
  if (r.queue) lock.enqueue(r.owner, s.waiterLease, r.limit);
  return { acquired: false, pttl: wait };
}

/** Whether `owner` has a live hold under the shared mark `held` (not a reservation). */
function liveHold(lock: LockRecord, held: Lease | undefined, owner: string): held is Lease {
  const mine = lock.holds.get(owner);
  return isShared(held) && mine !== undefined && mine.expiresAt > now() && mine.grant !== null;
}

/** What a hold that is not live answers: expired, unless another owner holds the lock exclusively. */
function gone(held: Lease | undefined): 'expired' | 'not-owner' {
  return !held || isShared(held) ? 'expired' : 'not-owner';
}

/** lua/extend-shared.lua. */
export function extendShared(lock: LockRecord, owner: string, ttl: number): ExtendReply {
  const held = lock.lease;
  if (!liveHold(lock, held, owner)) return gone(held);
  (lock.holds.get(owner) as { expiresAt: number }).expiresAt = now() + ttl;
  stretch(lock, held);
  return 'extended';
}

/** lua/release-shared.lua. */
export function releaseShared(lock: LockRecord, owner: string, handOn: HandOn): ReleaseReply {
  const held = lock.lease;
  const mine = lock.holds.get(owner);
  if (liveHold(lock, held, owner)) {
    (mine as { expiresAt: number }).expiresAt = 0;
    freeUp(lock, held, handOn);
    return 'released';
  }
  if (mine?.expiresAt === 0) return 'released';
  return gone(held);
}

/** lua/leave-shared.lua. */
export function leaveShared(lock: LockRecord, owner: string, handOn: HandOn): void {
  const head = lock.heads(owner);
  lock.unqueue(owner);
  const held = lock.lease;
  const reserved = lock.reservation;
  if (!held && reserved && reservedAmong(reserved, owner)) {
    const value = readLease(reserved);
    const rest = value.reserved.filter((w) => w !== owner);
    if (rest.length === 0) lock.handOn(handOn);
    else lock.reserve({ ...reserved, value: encodeLockValue(reservedFor(rest, value.flagged)) });
    return;
  }
  const mine = lock.holds.get(owner);
  if (isShared(held) && mine && mine.expiresAt > now() && mine.grant === null) {
    lock.holds.delete(owner);
    freeUp(lock, held, handOn);
  } else if (head) lock.nudge();
}

/** lua/inspect-shared.lua, decoded as the Redis store decodes it. */
export function inspectShared(lock: LockRecord): SharedState {
  const held = lock.lease;
  const reservation = lock.reservation;
  const reserved = !held && reservation ? [...readLease(reservation).reserved] : [];
  if (!isShared(held)) return { mode: held ? 'exclusive' : 'free', limit: null, holds: [], reserved };
  const at = now();
  const holds: SharedHold[] = [];
  const live = [...lock.holds].filter(([, h]) => h.expiresAt > at).sort(([, a], [, b]) => a.expiresAt - b.expiresAt);
  for (const [owner, hold] of live) {
    if (hold.grant === null) reserved.push(owner);
    else holds.push({ owner, pttl: Math.max(0, Math.ceil(hold.expiresAt - at)), ...hold.grant });
  }
  const limit = heldLimit(held) as number;
  return { mode: limit === 0 ? 'shared' : 'semaphore', limit: limit === 0 ? null : limit, holds, reserved };
}
