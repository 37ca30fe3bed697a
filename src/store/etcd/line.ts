import type { EtcdKeyValue } from './client.js';
import { decodeMember, type Member, revision } from './codec.js';

/**
 * What a lock's line of contenders allows, read from its keys in create-revision order. Pure: the
 * store reads a line, decides here, and writes in a transaction that compares on what it read.
 *
 * One rule keeps kinds apart: a line that holds a semaphore's key holds only keys of that
 * semaphore (its limit). Every join enforces it: a semaphore joins an empty line or one of its own
 * limit; anything else joins only a line with no semaphore's key. So a semaphore's admission is a
 * count, and a read-write lock's a look for exclusive keys. See docs/etcd.md.
 */

/** A key in line, decoded. */
export interface InLine {
  readonly kv: EtcdKeyValue;
  /** Its create revision: its place in line, and its fencing token once it holds. */
  readonly revision: number;
  readonly member: Member;
}

export function readLine(kvs: readonly EtcdKeyValue[]): InLine[] {
  return kvs.map((kv) => ({ kv, revision: revision(kv.create_revision, 'a contender'), member: decodeMember(kv) }));
}

/** A semaphore's key (permits ≥ 1). */
export const isSemaphore = (member: Member): boolean => member.limit !== undefined && member.limit > 0;

/**
 * The kind a line is held as, when a request of `limit` (undefined: exclusive) cannot join it:
 * a semaphore's permits for any other request, or for a semaphore asked of a line of other kinds,
 * -1 when it is headed by an exclusive key and 0 when by a shared one. Undefined: it may join.
 */
export function heldAs(line: readonly InLine[], limit: number | undefined): number | undefined {
  const semaphore = line.find((k) => isSemaphore(k.member))?.member.limit;
  if (semaphore !== undefined) return semaphore === limit ? undefined : semaphore;
  const first = line[0];
  if (limit === undefined || limit === 0 || !first) return undefined;
  return first.member.limit === 0 ? 0 : -1;
}

/**
 * Whether a shared contender of `limit` may hold behind the keys `ahead` of it: no exclusive key
 * ahead (a read-write lock: writers queued ahead are not overtaken), or fewer than `limit` keys
 * ahead (a semaphore: the first `limit` in line hold, or are about to). Keys ahead only ever
 * leave (a later key has a later revision), so once true it stays true.
 */
export function admits(ahead: readonly Member[], limit: number): boolean {
  if (limit === 0) return ahead.every((m) => m.limit === 0);
  return ahead.length < limit && ahead.every((m) => m.limit === limit);
}

/** The holders of a line: the keys granted (a waiter's carries no grant time). */
export function holders(line: readonly InLine[]): InLine[] {
  return line.filter((k) => k.member.takenAt !== null);
}

/** The waiters admitted and not yet holding (what a reservation is on Redis). */
export function admitted(line: readonly InLine[]): InLine[] {
  return line.filter((k, i) => {
    if (k.member.takenAt !== null) return false;
    const limit = k.member.limit;
    if (limit === undefined) return i === 0;
    return admits(
      line.slice(0, i).map((a) => a.member),
      limit,
    );
  });
}
