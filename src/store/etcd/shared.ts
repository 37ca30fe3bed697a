import type * as Port from '../port.js';
import type { TxnRequest, TxnResponse } from './client.js';
import { encodeMember, type Member, revision } from './codec.js';
import type { Contenders, Entry } from './contenders.js';
import type { KeySpace, LockKeys } from './keys.js';
import { admits, heldAs, type InLine, readLine } from './line.js';
import { createdAt, emptyRange, kvsAt, lineOf, noneAfter, put } from './ops.js';
import { type Renewal, renewFor, type Session, Sessions, Unconfirmed } from './session.js';

/**
 * Shared holds on etcd: a semaphore's permits and a read-write lock's shared holds are keys in the
 * lock's line like any contender's, with their kind in the value (line.ts decides what a line
 * allows). A decision made on a read is written by a transaction that compares that nobody joined
 * the line since (`noneAfter` the read's revision): a concurrent join retries the decision instead
 * of overcounting; a key that left meanwhile only makes room. Each hold is one key, its lease its
 * session's, its fencing token its create revision. Waiting: share-tracker.ts.
 */

/** What the shared steps use of the store. */
export interface SharedContext {
  /** The store's settings: the instance label its holds record, its waiters' lease. */
  readonly settings: Port.StoreSettings;
  readonly space: KeySpace;
  readonly sessions: Sessions;
  readonly contenders: Contenders;
  txn(request: TxnRequest): Promise<TxnResponse>;
  /** Hold `entry` once its session's renewal confirms the lease (EtcdStore's confirm). */
  confirm(entry: Entry, renewal: Promise<Renewal>, ttl: number, since: number): Promise<void>;
}

type Reply = Port.SharedAcquireReply;

/** One acquisition attempt of a shared hold (a first one, a waiter's, or one re-sent). */
export function acquireShared(ctx: SharedContext, name: string, r: Port.SharedRequest, since: number): Promise<Reply> {
  const entry = ctx.contenders.get(name, r.owner);
  return entry ? again(ctx, entry, r, since, true) : first(ctx, name, r, since, true);
}

/** A waiter's hint of when to look again: the ttl the first in line asked for. */
function pttlOf(line: readonly InLine[]): number {
  return line[0]?.member.ttl ?? 0;
}

/**
 * A first attempt: take a free line in one transaction; else decide on the line it read, and write
 * the decision (hold, or join to wait) comparing that nobody joined since; on a join, decide again.
 */
async function first(
  ctx: SharedContext,
  name: string,
  r: Port.SharedRequest,
  since: number,
  retry: boolean,
): Promise<Reply> {
  const keys = ctx.space.lock(name);
  const key = keys.member(r.owner);
  const [session, waiters] = await Promise.all([ctx.sessions.get(r.ttl), r.queue ? ctx.sessions.main() : undefined]);
  const renewal = renewFor(session, since, r.ttl);
  const held: Member = {
    owner: r.owner,
    instance: ctx.settings.instance,
    ttl: r.ttl,
    takenAt: Date.now(),
    limit: r.limit,
  };
  const hold = put(key, encodeMember(held), session.id);
  try {
    let response = await ctx.txn({
      compare: [emptyRange(keys.queue)],
      success: [hold],
      failure: [lineOf(keys.queue)],
    });
    for (;;) {
      if (response.succeeded) {
        const fence = revision(response.header.revision, 'the grant');
        return granted(ctx, ctx.contenders.add(name, r.owner, keys, fence, session, held), renewal, r, since, retry);
      }
      const line = readLine(kvsAt(response, 0, 'acquire-shared'));
      const mine = line.find((k) => k.kv.key.equals(key));
      // A re-sent attempt whose first send joined (or took) the line: go on from our key.
      if (mine) return again(ctx, adopt(ctx, name, keys, mine, waiters ?? session), r, since, retry);
      const kind = heldAs(line, r.limit);
      if (kind !== undefined) return { acquired: false, heldAs: kind };
      const room = admits(
        line.map((k) => k.member),
        r.limit,
      );
      if (!room && !waiters) return { acquired: false, pttl: pttlOf(line) };
      const waiting: Member = { ...held, takenAt: null };
      const write = room ? hold : put(key, encodeMember(waiting), waiters?.id);
      const at = revision(response.header.revision, 'a read');
      response = await ctx.txn({
        compare: [noneAfter(keys.queue, at)],
        success: [write],
        failure: [lineOf(keys.queue)],
      });
      if (!response.succeeded || room) continue;
      const entry = ctx.contenders.add(
        name,
        r.owner,
        keys,
        revision(response.header.revision, 'a waiter'),
        waiters as Session,
        waiting,
      );
      // Room may have come since the read (keys only leave): try at once, else wait in line.
      return again(ctx, entry, r, since, retry);
    }
  } catch (error) {
    if (!retry || !(await Sessions.recheck(error, [session, waiters]))) throw error;
    return first(ctx, name, r, since, false);
  }
}

/** Our key found in line: its entry, as if the attempt that put it had answered. */
function adopt(ctx: SharedContext, name: string, keys: LockKeys, mine: InLine, session: Session): Entry {
  const entry = ctx.contenders.add(name, mine.member.owner, keys, mine.revision, session, mine.member);
  if (mine.member.takenAt !== null) entry.state = 'held';
  return entry;
}

/**
 * A later attempt by a waiter (or a re-sent one by a holder): admitted when the keys ahead allow
 * it (they only leave, so a look then a write needs no compare but our key's); the hold is then
 * ours, with our key's create revision as its token, and moves to the session of its lease.
 */
async function again(
  ctx: SharedContext,
  entry: Entry,
  r: Port.SharedRequest,
  since: number,
  retry: boolean,
): Promise<Reply> {
  const { keys } = entry;
  const key = keys.member(r.owner);
  const session = await ctx.sessions.get(r.ttl);
  const renewal = renewFor(session, since, r.ttl);
  const takenAt = entry.state === 'queued' ? Date.now() : (entry.member.takenAt ?? Date.now());
  const member: Member = { owner: r.owner, instance: ctx.settings.instance, ttl: r.ttl, takenAt, limit: r.limit };
  let response: TxnResponse;
  try {
    if (entry.state === 'queued') {
      const look = await ctx.txn({
        compare: [createdAt(key, entry.revision)],
        success: [lineOf(keys.queue, entry.revision)],
        failure: [],
      });
      if (!look.succeeded) return rejoin(ctx, entry, r, since, retry);
      const ahead = readLine(kvsAt(look, 0, 'acquire-shared'));
      if (
        !admits(
          ahead.map((k) => k.member),
          r.limit,
        )
      ) {
        ctx.contenders.queue(entry, ctx.settings.waiterLease);
        return { acquired: false, pttl: pttlOf(ahead) };
      }
    }
    response = await ctx.txn({
      compare: [createdAt(key, entry.revision)],
      success: [put(key, encodeMember(member), session.id)],
      failure: [],
    });
  } catch (error) {
    if (!retry || !(await Sessions.recheck(error, [session]))) throw error;
    return again(ctx, entry, r, since, false);
  }
  if (!response.succeeded) return rejoin(ctx, entry, r, since, retry);
  entry.session = session;
  entry.member = member;
  return granted(ctx, entry, renewal, r, since, retry);
}

/** Our key is gone (its session ended, it was dropped): join again, at the end of the line. */
function rejoin(
  ctx: SharedContext,
  entry: Entry,
  r: Port.SharedRequest,
  since: number,
  retry: boolean,
): Promise<Reply> {
  ctx.contenders.forget(entry);
  return first(ctx, entry.name, r, since, retry);
}

/** A grant stands once its session is confirmed alive past the lease; a lost session means trying again. */
async function granted(
  ctx: SharedContext,
  entry: Entry,
  renewal: Promise<Renewal>,
  r: Port.SharedRequest,
  since: number,
  retry: boolean,
): Promise<Reply> {
  try {
    await ctx.confirm(entry, renewal, r.ttl, since);
  } catch (error) {
    if (!(error instanceof Unconfirmed) || !retry) throw error instanceof Unconfirmed ? error.cause : error;
    return first(ctx, entry.name, r, since, false);
  }
  return { acquired: true, fence: entry.revision };
}
