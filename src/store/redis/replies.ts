import { ErrorCode, LockError } from '../../core/errors.js';
import type { HandOff, Holder, StoredOutcome, StoredRun } from '../port.js';

/**
 * How the scripts' raw replies become the port's replies. Every decoder is strict: a reply its
 * script's header does not document is a store error, never read as the nearest outcome.
 */

/** A reply's decoding. `codes`: the return codes it knows, as the script's header lists them; null for a reply without one. */
export interface Decoder<Reply> {
  readonly codes: readonly number[] | null;
  /** Throws BadReply for a reply it does not know (the caller names the script). */
  readonly decode: (reply: unknown) => Reply;
}

/** A reply no decoder knows. */
export class BadReply extends Error {}

/** An integer as a client library returns it (a number, or a string for a large one). */
export function integer(reply: unknown): number {
  const n = typeof reply === 'number' ? reply : typeof reply === 'string' && reply !== '' ? Number(reply) : Number.NaN;
  if (!Number.isInteger(n)) throw new BadReply();
  return n;
}

/** A reply of several parts that the decoding reads itself (it throws BadReply where they are not). */
export function shaped<Reply>(decode: (reply: readonly unknown[]) => Reply): Decoder<Reply> {
  return {
    codes: null,
    decode: (reply) => {
      if (!Array.isArray(reply)) throw new BadReply();
      return decode(reply);
    },
  };
}

/** A reply that is one integer. */
export const integerReply: Decoder<number> = { codes: null, decode: integer };

/**
 * A reply that is a return code, alone (`1`) or first in an array (`{1, token}`): one decoding per
 * code, each given the whole reply as an array. A code not listed is a BadReply.
 */
export function byCode<Reply>(cases: Readonly<Record<number, (reply: readonly unknown[]) => Reply>>): Decoder<Reply> {
  const table = new Map(Object.entries(cases).map(([code, decode]) => [Number(code), decode]));
  return {
    codes: [...table.keys()],
    decode: (reply) => {
      const parts = Array.isArray(reply) ? reply : [reply];
      const decode = table.get(integer(parts[0]));
      if (decode === undefined) throw new BadReply();
      return decode(parts);
    },
  };
}

/**
 * A fencing counter's value, as lua/lib/lease.lua writes it: '<token> <taken-at µs> <instance>',
 * then '|<owner>' once that owner released the grant.
 */
export function parseCounter(counter: string): { holder: Holder | null; releasedBy: string | null } {
  const bar = counter.lastIndexOf('|');
  const releasedBy = bar >= 0 ? counter.slice(bar + 1) : null;
  const match = /^(\d+) (\d+) ([\s\S]*)$/.exec(bar >= 0 ? counter.slice(0, bar) : counter);
  if (!match) return { holder: null, releasedBy };
  const holder = {
    token: Number(match[1]),
    takenAt: Math.floor(Number(match[2]) / 1000),
    instance: match[3] as string,
  };
  return { holder, releasedBy };
}

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
}

const NO_VALUE: LockValue = Object.freeze({ owner: null, reservedFor: null, reserved: [], shared: null });

/**
 * A lock key's value (see lua/lib/lease.lua): '<owner>' or '<owner>*' while held (the mark: waiters
 * queued), '~<waiter>' or '~<waiter>*' while reserved for a waiter a release handed it to (or
 * '~<w1> <w2>…' for several shared waiters), '^<limit>' while shared holds hold it.
 */
export function readLockValue(value: unknown): LockValue {
  if (typeof value !== 'string') return NO_VALUE;
  const bare = value.endsWith('*') ? value.slice(0, -1) : value;
  if (bare.startsWith('^')) return { ...NO_VALUE, shared: integer(bare.slice(1)) };
  if (!bare.startsWith('~')) return { ...NO_VALUE, owner: bare };
  const reserved = bare.slice(1).split(' ');
  return { ...NO_VALUE, reservedFor: reserved[0] ?? null, reserved };
}

const OUTCOMES: readonly StoredOutcome[] = ['running', 'ok', 'failed', 'done', 'lost', 'abandoned'];

/** A run record as claim-tick / finish-tick wrote it (JSON); anything else is a store error. */
export function storedRun(member: unknown): StoredRun {
  let value: unknown;
  try {
    value = typeof member === 'string' ? JSON.parse(member) : undefined;
  } catch {
    value = undefined;
  }
  const r = (value ?? {}) as Record<string, unknown>;
  const num = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
  // The fencing token is written as a decimal string (a JSON number in Lua would lose digits).
  if (typeof r.fence === 'string' && /^\d+$/.test(r.fence)) r.fence = Number(r.fence);
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

const ANYONE: HandOff = Object.freeze({ woken: null, next: Object.freeze([]) as readonly string[] });

/** Whether a channel message asks a waiter whether it is alive ('?<waiter>', lib/shared.lua's challenge). */
export function isChallenge(message: string): boolean {
  return message.startsWith('?');
}

/**
 * A hand-off as lib/hand-on.lua publishes it: '<woken> <next> [<then> <then>]', or '' for a lock
 * announced to any waiter. Owner tokens are base64url, so a space never occurs inside one. A
 * challenge ('?<waiter>') wakes the waiter it names, as a hand-off naming it does: it tries again,
 * which tells the server it is alive.
 */
export function decodeHandOff(message: string): HandOff {
  if (message === '') return ANYONE;
  const [woken, ...next] = (isChallenge(message) ? message.slice(1) : message).split(' ');
  return { woken: woken as string, next };
}
