import { now } from '../../core/clock.js';
import type * as Port from '../port.js';
import type { Compare, EtcdClient, EtcdKeyValue, TxnRequest, TxnResponse } from './client.js';
import {
  decodeClaim,
  decodeEnd,
  decodeMember,
  decodeReleased,
  encodeClaim,
  encodeEnd,
  encodeMember,
  encodeReleased,
  type Member,
  type RunEnd,
  revision,
} from './codec.js';
import type { Contenders, Entry } from './contenders.js';
import { isLeaseGone } from './errors.js';
import { KeySpace, type LockKeys } from './keys.js';
import {
  createdAt,
  emptyRange,
  firstOf,
  get,
  kvsAt,
  lastKeyOf,
  nested,
  noneAfter,
  onLease,
  put,
  rangeAt,
  remove,
  txnAt,
} from './ops.js';
import { type Renewal, renewFor, Sessions } from './session.js';

/**
 * The scheduler's steps on etcd. A job's lock is the lock of the same name (the same line of
 * contenders, the same tokens); a claim takes it only when nobody is in line and no tick at or
 * after the one claimed is recorded, and records the tick and a `running` run, all in one
 * transaction. Ticks are keys whose names sort as the ticks do, so "no later tick" is one range
 * compare and the older ones go in the same step. etcd keeps no clock: the claiming client's wall
 * clock stands in for the server's (the run's `startedAt`, the `clock-skew` check, lockAtLeastFor).
 *
 * A lock kept by lockAtLeastFor lives on a lease of whole seconds, which can outlast what is left of
 * lockAtLeastFor by more than a period: its key records when lockAtLeastFor ends, and the claim of a
 * later tick past that moment takes it over (deletes it in the claim's transaction) when nobody
 * else is in line. See docs/etcd.md.
 */

/** What the job steps use of the store. */
export interface JobContext {
  readonly client: EtcdClient;
  readonly space: KeySpace;
  readonly sessions: Sessions;
  readonly contenders: Contenders;
  /** Hold the entry once its session's renewal confirms the lease (see EtcdStore). */
  confirm(entry: Entry, renewal: Promise<Renewal>, ttl: number, since: number): Promise<void>;
  /** A background step failed (the history's trimming). */
  onError(error: unknown): void;
}

/** Most ops etcd takes in one transaction (its default `--max-txn-ops` is 128), two per run trimmed. */
const TRIM_BATCH = 60;

export async function claimTick(ctx: JobContext, name: string, q: Port.ClaimRequest): Promise<Port.ClaimReply> {
  const since = now();
  const at = Date.now();
  const keys = ctx.space.lock(name);
  const held = ctx.contenders.get(name, q.owner);
  if (held?.state === 'held') return { claimed: true, fence: held.revision, startedAt: held.member.takenAt ?? at };
  if (q.tick !== null && q.tick > at + q.clockTolerance) return { claimed: false, reason: 'clock-skew', now: at };
  return claimOnce(ctx, name, keys, q, since, at, true, undefined);
}

async function claimOnce(
  ctx: JobContext,
  name: string,
  keys: LockKeys,
  q: Port.ClaimRequest,
  since: number,
  at: number,
  retry: boolean,
  kept: EtcdKeyValue | undefined,
): Promise<Port.ClaimReply> {
  const key = keys.member(q.owner);
  const session = await ctx.sessions.get(q.ttl);
  const renewal = renewFor(session, since, q.ttl);
  const member: Member = { owner: q.owner, instance: q.instance, ttl: q.ttl, takenAt: at };
  // Taking over a kept lock: it is still that kept grant (same key, same lease) and alone in line.
  const compare: Compare[] = kept
    ? [
        createdAt(kept.key, revision(kept.create_revision, 'a kept lock')),
        onLease(kept.key, kept.lease),
        noneAfter(keys.queue, revision(kept.create_revision, 'a kept lock')),
      ]
    : [emptyRange(keys.queue)];
  const success = [
    ...(kept ? [remove(kept.key)] : []),
    put(key, encodeMember(member), session.id),
    remove(keys.released),
    put(keys.run(q.owner), encodeClaim({ tick: q.tick, instance: q.instance, startedAt: at })),
  ];
  if (q.tick !== null) {
    const tick = keys.tick(q.tick);
    compare.push(emptyRange({ start: tick, end: keys.ticks.end }));
    success.push(put(tick, Buffer.from(String(q.tick))), remove(keys.ticks.start, tick));
  }
  let response: TxnResponse;
  try {
    response = await ctx.client.kv.txn({ compare, success, failure: [firstOf(keys.queue), lastKeyOf(keys.ticks)] });
  } catch (error) {
    if (!retry || !(await Sessions.recheck(error, [session]))) throw error;
    return claimOnce(ctx, name, keys, q, since, at, false, kept);
  }
  if (response.succeeded) {
    const fence = revision(response.header.revision, 'a claim');
    const entry = ctx.contenders.add(name, q.owner, keys, fence, session, member);
    await ctx.confirm(entry, renewal, q.ttl, since);
    trim(ctx, keys, q.historyLimit).catch(ctx.onError);
    return { claimed: true, fence, startedAt: at };
  }
  const first = kvsAt(response, 0, 'claim-tick')[0];
  const lastTick = kvsAt(response, 1, 'claim-tick')[0];
  if (first?.key.equals(key)) {
    // A re-sent claim whose first send went through: that claim is ours.
    const mine = decodeMember(first);
    const fence = revision(first.create_revision, 'a claim');
    const entry = ctx.contenders.add(name, q.owner, keys, fence, session, mine);
    await ctx.confirm(entry, renewal, q.ttl, since);
    return { claimed: true, fence, startedAt: mine.takenAt ?? at };
  }
  if (q.tick !== null && lastTick && KeySpace.tick(lastTick.key) >= q.tick) {
    return { claimed: false, reason: 'already-ran', lastTick: KeySpace.tick(lastTick.key) };
  }
  const holder = first ? decodeMember(first) : undefined;
  // A later tick takes over a finished run's lock that only lockAtLeastFor keeps (as on the other
  // backends); the tick compare in the same transaction still keeps each tick to one run.
  const keptRun = first && holder?.keptUntil !== undefined && q.tick !== null && kept === undefined;
  if (keptRun && (await ranForTick(ctx, keys, holder.owner))) {
    return claimOnce(ctx, name, keys, q, since, at, retry, first);
  }
  return { claimed: false, reason: 'locked', pttl: holder ? holder.ttl : 0 };
}

/** Whether `owner`'s run claimed a tick: a run without one keeps its whole lockAtLeastFor. */
async function ranForTick(ctx: JobContext, keys: LockKeys, owner: string): Promise<boolean> {
  const run = (await ctx.client.kv.range({ key: keys.run(owner) })).kvs[0];
  return run !== undefined && decodeClaim(run).tick !== null;
}

/** Drop the runs beyond the newest `limit` (a run's claim and end go together). */
async function trim(ctx: JobContext, keys: LockKeys, limit: number): Promise<void> {
  const runs = await ctx.client.kv.range({
    key: keys.runs.start,
    range_end: keys.runs.end,
    sort_target: 'Create',
    sort_order: 'Descend',
    keys_only: true,
  });
  const extra = runs.kvs.slice(limit);
  for (let i = 0; i < extra.length; i += TRIM_BATCH) {
    const batch = extra.slice(i, i + TRIM_BATCH);
    const success = batch.flatMap((kv) => [remove(kv.key), remove(keys.end(KeySpace.owner(kv.key)))]);
    await ctx.client.kv.txn({ compare: [], success, failure: [] });
  }
}

export async function finishTick(ctx: JobContext, name: string, f: Port.FinishRequest): Promise<Port.FinishReply> {
  const at = Date.now();
  const entry = ctx.contenders.get(name, f.owner);
  const keys = entry?.keys ?? ctx.space.lock(name);
  const remaining = f.startedAt + f.lockAtLeastFor - at;
  // lockAtLeastFor: the lock is kept on a lease of its own, not renewed, which etcd ends by itself
  // (in whole seconds, at least etcd's minimum TTL), even if this process stops.
  const keep =
    entry?.state === 'held' && remaining > 0
      ? (await ctx.client.leaseClient.leaseGrant({ TTL: Sessions.seconds(remaining) })).ID
      : undefined;
  if (entry) ctx.contenders.forget(entry);
  const end: RunEnd = { finishedAt: at, outcome: f.outcome, error: f.error };
  const request = (marker: boolean) => finishRequest(keys, f, end, entry, keep, remaining, marker);
  const response = await ctx.client.kv.txn(request(true)).catch((error: unknown) => {
    if (isLeaseGone(error)) return ctx.client.kv.txn(request(false));
    throw error;
  });
  const lock = txnAt(response, 1, 'finish-tick');
  if (lock.succeeded) return keep ? { lease: 'kept', remaining } : { lease: 'released' };
  if (decodeReleased(kvsAt(lock, 1, 'finish-tick')[0])?.owner === f.owner) return { lease: 'released' };
  const first = kvsAt(lock, 0, 'finish-tick')[0];
  return { lease: first && decodeMember(first).takenAt !== null ? 'not-owner' : 'expired' };
}

/**
 * One transaction of two: record how the run ended (if its claim is there and it has not ended),
 * and end the lease (or move it to the lease that keeps it for what lockAtLeastFor has left).
 */
function finishRequest(
  keys: LockKeys,
  f: Port.FinishRequest,
  end: RunEnd,
  entry: Entry | undefined,
  keep: string | undefined,
  remaining: number,
  marker: boolean,
): TxnRequest {
  const key = keys.member(f.owner);
  const record = nested(
    [createdAt(keys.run(f.owner), f.fence), createdAt(keys.end(f.owner), 0)],
    [put(keys.end(f.owner), encodeEnd(end))],
  );
  let lockOps = [remove(key)];
  if (keep !== undefined && entry) {
    const kept = { ...entry.member, ttl: remaining, keptUntil: f.startedAt + f.lockAtLeastFor };
    lockOps = [put(key, encodeMember(kept), keep)];
  } else if (entry && marker) {
    lockOps.push(put(keys.released, encodeReleased({ owner: f.owner, fence: f.fence }), entry.session.id));
  }
  const lock = nested([createdAt(key, f.fence)], lockOps, [firstOf(keys.queue), get(keys.released)]);
  return { compare: [], success: [record, lock], failure: [] };
}

export async function readJob(ctx: JobContext, name: string, limit: number): Promise<Port.JobState> {
  const keys = ctx.space.lock(name);
  const response = await ctx.client.kv.txn({
    compare: [],
    success: [
      firstOf(keys.queue),
      lastKeyOf(keys.ticks),
      // etcd reads a limit of 0 as "no limit": ask for one run at least, and keep none.
      {
        request_range: {
          key: keys.runs.start,
          range_end: keys.runs.end,
          sort_target: 'Create',
          sort_order: 'Descend',
          limit: Math.max(1, limit),
        },
      },
      { request_range: { key: keys.ends.start, range_end: keys.ends.end } },
      get(keys.released),
    ],
    failure: [],
  });
  const first = kvsAt(response, 0, 'read-job')[0];
  const holder = first ? decodeMember(first) : null;
  const held = first !== undefined && holder?.takenAt !== null;
  const tick = kvsAt(response, 1, 'read-job')[0];
  const ends = new Map(kvsAt(response, 3, 'read-job').map((kv) => [KeySpace.owner(kv.key), decodeEnd(kv)]));
  const stored = rangeAt(response, 2, 'read-job').kvs;
  const newest = stored[0] ? revision(stored[0].create_revision, 'a run') : 0;
  const runs = stored.slice(0, Math.max(0, limit)).map((kv): Port.StoredRun => {
    const claim = decodeClaim(kv);
    const ended = ends.get(KeySpace.owner(kv.key));
    return {
      fence: revision(kv.create_revision, 'a run'),
      tick: claim.tick,
      instance: claim.instance,
      startedAt: claim.startedAt,
      finishedAt: ended?.finishedAt ?? null,
      outcome: ended?.outcome ?? 'running',
      error: ended?.error ?? null,
    };
  });
  const released = decodeReleased(kvsAt(response, 4, 'read-job')[0]);
  const heldFence = held && first ? revision(first.create_revision, 'a holder') : 0;
  return {
    held,
    fence: Math.max(heldFence, newest, released?.fence ?? 0),
    lastTick: tick ? KeySpace.tick(tick.key) : null,
    runs,
  };
}

/** Forget the job's ticks and runs in one step; its lock, its line and its tokens stay as they are. */
export async function forgetJob(ctx: JobContext, name: string): Promise<void> {
  const keys = ctx.space.lock(name);
  const ranges = [keys.ticks, keys.runs, keys.ends];
  await ctx.client.kv.txn({ compare: [], success: ranges.map((r) => remove(r.start, r.end)), failure: [] });
}
