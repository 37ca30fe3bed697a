import { ErrorCode, LockError } from '../../core/errors.js';
import type { StoredOutcome } from '../port.js';
import type { EtcdKeyValue } from './client.js';

/**
 * The values of the store's keys, as JSON with short fields, and their strict decoding: anything
 * else under our prefix is a bad reply (LockError STORE), never a guess.
 */

/** A contender's key: its owner and instance, the lease it asked for, and when it was granted (null while it waits). */
export interface Member {
  readonly owner: string;
  readonly instance: string;
  readonly ttl: number;
  /** Wall-clock ms of the grant on the granting client (etcd keeps no clock); null while waiting. */
  readonly takenAt: number | null;
  /**
   * A job's lock kept by lockAtLeastFor after its run finished: wall-clock ms (the finishing
   * client's) until which it is kept. Its lease, in whole seconds, may outlive it.
   */
  readonly keptUntil?: number;
  /**
   * A shared hold or waiter: a semaphore's permits (≥ 1), or 0 for a read-write lock's shared
   * mode; absent for the exclusive kind (a mutex, an exclusive hold, a job's run).
   */
  readonly limit?: number;
}

/**
 * How a member's value begins, by kind, so that one Value compare over a line can tell kinds
 * apart (etcd compares bytes): a semaphore's `{"n":` sorts below the exclusive `{"o":`, a
 * read-write lock's shared `{"s":` above it. `EXCLUSIVE_OR_SHARED`: every value above it is not
 * a semaphore's.
 */
export const EXCLUSIVE_OR_SHARED = Buffer.from('{"o');

/** The release marker: who released the grant with token `fence`. */
export interface Released {
  readonly owner: string;
  readonly fence: number;
}

export interface RunClaim {
  readonly tick: number | null;
  readonly instance: string;
  readonly startedAt: number;
}

export interface RunEnd {
  readonly finishedAt: number;
  readonly outcome: Exclude<StoredOutcome, 'running'>;
  readonly error: string | null;
}

const OUTCOMES: ReadonlySet<string> = new Set(['ok', 'failed', 'done', 'lost', 'abandoned']);

function bad(what: string, kv: EtcdKeyValue): LockError {
  const shown = kv.value.toString().slice(0, 80);
  return new LockError(
    ErrorCode.STORE_ERROR,
    `etcd3: ${what} at ${kv.key.toString()} is not one leasehold wrote: ${shown}`,
  );
}

function parse(what: string, kv: EtcdKeyValue): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(kv.value.toString());
  } catch {
    throw bad(what, kv);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad(what, kv);
  return value as Record<string, unknown>;
}

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v);
const isIntOrNull = (v: unknown): v is number | null => v === null || isInt(v);
const isStringOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';

export function encodeMember(member: Member): Buffer {
  const kind = member.limit === undefined ? {} : member.limit > 0 ? { n: member.limit } : { s: 1 };
  const value = { ...kind, o: member.owner, i: member.instance, t: member.ttl, g: member.takenAt };
  return Buffer.from(JSON.stringify(member.keptUntil === undefined ? value : { ...value, k: member.keptUntil }));
}

/** The kind a decoded value declares: a semaphore's permits, 0 shared, undefined exclusive; null if malformed. */
function limitOf(v: Record<string, unknown>): number | undefined | null {
  if (v.n !== undefined) return isInt(v.n) && v.n >= 1 && v.s === undefined ? v.n : null;
  if (v.s !== undefined) return v.s === 1 ? 0 : null;
  return undefined;
}

export function decodeMember(kv: EtcdKeyValue): Member {
  const v = parse('a contender', kv);
  const limit = limitOf(v);
  if (
    limit === null ||
    typeof v.o !== 'string' ||
    typeof v.i !== 'string' ||
    !isInt(v.t) ||
    !isIntOrNull(v.g) ||
    (v.k !== undefined && !isInt(v.k))
  ) {
    throw bad('a contender', kv);
  }
  const member: Member = { owner: v.o, instance: v.i, ttl: v.t, takenAt: v.g };
  const kept = v.k === undefined ? member : { ...member, keptUntil: v.k };
  return limit === undefined ? kept : { ...kept, limit };
}

export function encodeReleased(released: Released): Buffer {
  return Buffer.from(JSON.stringify({ o: released.owner, f: released.fence }));
}

export function decodeReleased(kv: EtcdKeyValue | undefined): Released | null {
  if (!kv) return null;
  const v = parse('a release marker', kv);
  if (typeof v.o !== 'string' || !isInt(v.f)) throw bad('a release marker', kv);
  return { owner: v.o, fence: v.f };
}

export function encodeClaim(claim: RunClaim): Buffer {
  return Buffer.from(JSON.stringify({ k: claim.tick, i: claim.instance, s: claim.startedAt }));
}

export function decodeClaim(kv: EtcdKeyValue): RunClaim {
  const v = parse('a run', kv);
  if (!isIntOrNull(v.k) || typeof v.i !== 'string' || !isInt(v.s)) throw bad('a run', kv);
  return { tick: v.k, instance: v.i, startedAt: v.s };
}

export function encodeEnd(end: RunEnd): Buffer {
  return Buffer.from(JSON.stringify({ f: end.finishedAt, r: end.outcome, e: end.error }));
}

export function decodeEnd(kv: EtcdKeyValue): RunEnd {
  const v = parse('a run end', kv);
  if (!isInt(v.f) || typeof v.r !== 'string' || !OUTCOMES.has(v.r) || !isStringOrNull(v.e)) {
    throw bad('a run end', kv);
  }
  return { finishedAt: v.f, outcome: v.r as RunEnd['outcome'], error: v.e };
}

/** A revision (or count) etcd sent as a decimal string, as a number. */
export function revision(text: string | undefined, what: string): number {
  const n = Number(text);
  if (text === undefined || !/^\d+$/.test(text) || !Number.isSafeInteger(n)) {
    throw new LockError(ErrorCode.STORE_ERROR, `etcd3: ${what} is not a revision: ${String(text)}`);
  }
  return n;
}
