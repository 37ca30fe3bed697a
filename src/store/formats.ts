import { ErrorCode, LockError } from '../core/errors.js';
import type { Holder, StoredOutcome, StoredRun } from './port.js';

/**
 * The values the Redis store keeps, each declared once: its form, its encoder (what the Lua writes,
 * and what the memory store writes in its place) and its decoder (every TypeScript read). Both stores
 * read it, and they never import each other. Who writes and reads each: docs/stored-formats.md.
 */

/** A reply, or a value kept in one, that its decoder does not know. */
export class BadReply extends Error {}

const DIGITS = /^\d+$/;

function whole(text: string): number {
  if (!DIGITS.test(text)) throw new BadReply();
  return Number(text);
}

/** The lock value and the waiter entry say a kind of shared hold so: the same text in both. */
const sharedMark = (limit: number): string => `^${limit}`;

/** A lock key's value, read: its one owner, the waiters it is reserved for, or the limit of the shared holds holding it. */
export interface LockValue {
  /** The exclusive holder's owner token, or null. */
  readonly owner: string | null;
  /** The (first) waiter the lock is reserved for, or null. */
  readonly reservedFor: string | null;
  /** Every waiter the lock is reserved for (several shared waiters admitted together). */
  readonly reserved: readonly string[];
  /** While shared holds hold the lock: their limit (a semaphore's permits, 0 for a read-write lock's); else null. */
  readonly shared: number | null;
  /** Waiters queued since it was taken or reserved: its release must hand it on. */
  readonly flagged: boolean;
}

const NO_VALUE: LockValue = Object.freeze({
  owner: null,
  reservedFor: null,
  reserved: [],
  shared: null,
  flagged: false,
});

/** Held by `owner`. */
export function heldBy(owner: string, flagged = false): LockValue {
  return { ...NO_VALUE, owner, flagged };
}

/** Reserved for `waiters` (at least one), as a hand-off leaves it. */
export function reservedFor(waiters: readonly string[], flagged = false): LockValue {
  return { ...NO_VALUE, reservedFor: waiters[0] ?? null, reserved: waiters, flagged };
}

/** Held by shared holds of `limit` (0: a read-write lock's). */
export function sharedBy(limit: number, flagged = false): LockValue {
  return { ...NO_VALUE, shared: limit, flagged };
}

export function encodeLockValue(v: LockValue): string {
  const bare = v.shared !== null ? sharedMark(v.shared) : v.owner !== null ? v.owner : `~${v.reserved.join(' ')}`;
  return v.flagged ? `${bare}*` : bare;
}

export function decodeLockValue(value: string): LockValue {
  const flagged = value.endsWith('*');
  const bare = flagged ? value.slice(0, -1) : value;
  if (bare.startsWith('^')) return sharedBy(whole(bare.slice(1)), flagged);
  if (bare.startsWith('~')) return reservedFor(bare.slice(1).split(' '), flagged);
  return heldBy(bare, flagged);
}

/** A lock value as a script replies it: a string, or false (no key) for a free lock. */
export function readLockValue(value: unknown): LockValue {
  return typeof value === 'string' ? decodeLockValue(value) : NO_VALUE;
}

/** Who holds the lock as lib/lease.lua's `read_lock` names it: the owner, the shared mark ('^<limit>'), or null. */
export function holderOf(v: LockValue): string | null {
  return v.shared !== null ? sharedMark(v.shared) : v.owner;
}

/** A holder as `holderOf` names it (force-release replies it so), read back: its owner, or the limit of the shared holds. */
export function decodeHolder(holder: string): LockValue {
  return holder.startsWith('^') ? sharedBy(whole(holder.slice(1))) : heldBy(holder);
}

/** A fencing counter's value, read. */
export interface FenceRecord {
  /** The latest token issued (or raised to). */
  readonly token: number;
  /** The grant: the server's time of it in µs, and the taker's instance label; null when none is kept. */
  readonly grant: { readonly takenAtUs: number; readonly instance: string } | null;
  /** The owner that released the grant, or null. */
  readonly releasedBy: string | null;
}

/** The grant as a record keeps it: '=<instance>' when it was taken at its token's µs (the usual case), else ' <taken-at µs> <instance>'. */
export function encodeFence(r: FenceRecord): string {
  const { grant } = r;
  const text =
    grant === null ? '' : grant.takenAtUs === r.token ? `=${grant.instance}` : ` ${grant.takenAtUs} ${grant.instance}`;
  return `${r.token}${text}${r.releasedBy === null ? '' : `|${r.releasedBy}`}`;
}

/**
 * The mark is the last '|': owner tokens hold none. An instance label may: an unreleased grant
 * whose label holds '|' reads as released by what follows it.
 */
export function decodeFence(value: string): FenceRecord {
  const bar = value.lastIndexOf('|');
  const releasedBy = bar >= 0 ? value.slice(bar + 1) : null;
  const match = /^(\d+)(?:=([\s\S]*)| (\d+) ([\s\S]*))?$/.exec(bar >= 0 ? value.slice(0, bar) : value);
  if (!match) throw new BadReply();
  const [, token, atToken, takenAtUs, instance] = match as unknown as [
    string,
    string,
    string | undefined,
    string | undefined,
    string,
  ];
  const grant =
    atToken !== undefined
      ? { takenAtUs: Number(token), instance: atToken }
      : takenAtUs === undefined
        ? null
        : { takenAtUs: Number(takenAtUs), instance };
  return { token: Number(token), grant, releasedBy };
}

/**
 * A lock key's whole value: the lease, its end in server ms and its state, then the fencing record,
 * '<end> <state>\n<record>'. Either part may be empty: no lease ('\n<record>', a released name keeps
 * its record for the retention), or no record kept. A lease whose end has passed is no lease; the
 * scripts judge that by the server's clock (lua/lib/lease.lua).
 */
export interface LockRecord {
  readonly lease: { readonly end: number; readonly value: LockValue } | null;
  readonly fence: FenceRecord | null;
}

export function encodeLockRecord(r: LockRecord): string {
  const lease = r.lease === null ? '' : `${r.lease.end} ${encodeLockValue(r.lease.value)}`;
  return `${lease}\n${r.fence === null ? '' : encodeFence(r.fence)}`;
}

export function decodeLockRecord(raw: string): LockRecord {
  const newline = raw.indexOf('\n');
  if (newline < 0) throw new BadReply();
  const head = raw.slice(0, newline);
  const tail = raw.slice(newline + 1);
  const lease = /^(\d+) ([\s\S]+)$/.exec(head);
  if (head !== '' && !lease) throw new BadReply();
  return {
    lease: lease ? { end: Number(lease[1]), value: decodeLockValue(lease[2] as string) } : null,
    fence: tail === '' ? null : decodeFence(tail),
  };
}

/** The grant a fence record (or a grants hash entry) records, as operator tooling shows it; null when none is kept. */
export function grantOf(r: FenceRecord): Holder | null {
  if (!r.grant) return null;
  return { token: r.token, takenAt: Math.floor(r.grant.takenAtUs / 1000), instance: r.grant.instance };
}

/** What a release from the waiter's own room needs to grant it the lock outright (lib/hand-on.lua). */
export interface DirectGrant {
  readonly ttl: number;
  /** The fencing counter's retention in ms. */
  readonly retention: number;
  /** The mark of the store the waiter queued through. */
  readonly room: string;
  readonly instance: string;
}

/** A waiter's liveness entry, read. */
export interface WaiterEntry {
  /** The waiter counts as dead after this (server ms). */
  readonly deadline: number;
  /** The limit of the shared hold it waits for; null for a waiter of the lock itself. */
  readonly shared: number | null;
  /** For an exclusive waiter that may be granted the lock outright: what the grant needs; else null. */
  readonly direct: DirectGrant | null;
}

export function encodeWaiter(w: WaiterEntry): string {
  if (w.shared !== null) return `${w.deadline} ${sharedMark(w.shared)}`;
  if (w.direct === null) return `${w.deadline}`;
  const { ttl, retention, room, instance } = w.direct;
  return `${w.deadline} =${ttl}:${retention}:${room} ${instance}`;
}

export function decodeWaiter(entry: string): WaiterEntry {
  const direct = /^(\d+) =(\d+):(\d+):(\S+) ([\s\S]*)$/.exec(entry);
  if (direct) {
    const [, deadline, ttl, retention, room, instance] = direct as unknown as string[];
    const grant = {
      ttl: Number(ttl),
      retention: Number(retention),
      room: room as string,
      instance: instance as string,
    };
    return { deadline: Number(deadline), shared: null, direct: grant };
  }
  const plain = /^(\d+)(?: \^(\d+))?$/.exec(entry);
  if (!plain) throw new BadReply();
  return { deadline: Number(plain[1]), shared: plain[2] === undefined ? null : Number(plain[2]), direct: null };
}

const OUTCOMES: readonly StoredOutcome[] = ['running', 'ok', 'failed', 'done', 'lost', 'abandoned'];

/** A run record as claim-tick.lua writes it: the fencing token as a string (a JSON number in Lua would lose digits). */
export function encodeRun(run: StoredRun): string {
  return JSON.stringify({ ...run, fence: String(run.fence) });
}

/** A run record as claim-tick / finish-tick wrote it (JSON); anything else is a store error. */
export function decodeRun(member: unknown): StoredRun {
  let value: unknown;
  try {
    value = typeof member === 'string' ? JSON.parse(member) : undefined;
  } catch {
    value = undefined;
  }
  const r = (value ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
  if (typeof r.fence === 'string' && DIGITS.test(r.fence)) r.fence = Number(r.fence);
  const numOrNull = (v: unknown) => v === null || v === undefined || num(v);
  if (
    !num(r.fence) ||
    !num(r.startedAt) ||
    !numOrNull(r.tick) ||
    !numOrNull(r.finishedAt) ||
    typeof r.instance !== 'string' ||
    !(OUTCOMES as readonly unknown[]).includes(r.outcome)
  ) {
    throw new LockError(ErrorCode.STORE_ERROR, `unexpected run record in the job history: ${JSON.stringify(member)}`);
  }
  return {
    fence: r.fence as number,
    tick: typeof r.tick === 'number' ? r.tick : null,
    instance: r.instance,
    startedAt: r.startedAt as number,
    finishedAt: typeof r.finishedAt === 'number' ? r.finishedAt : null,
    outcome: r.outcome as StoredOutcome,
    error: typeof r.error === 'string' ? r.error : null,
  };
}
