import { now } from '../../core/clock.js';
import { DEFAULTS } from '../../core/defaults.js';
import { ErrorCode, LockError } from '../../core/errors.js';
import { globMatcher } from '../memory/glob.js';
import type * as Port from '../port.js';
import { STORE } from '../port.js';
import { storeSettings } from '../settings.js';
import { addressOf, type EtcdClient, type EtcdKeyValue, type TxnRequest, type TxnResponse } from './client.js';
import {
  decodeMember,
  decodeReleased,
  EXCLUSIVE_OR_SHARED,
  encodeMember,
  encodeReleased,
  type Member,
  revision,
} from './codec.js';
import { Contenders, type Entry } from './contenders.js';
import { isLeaseGone, storeError } from './errors.js';
import { claimTick, finishTick, forgetJob, type JobContext, readJob } from './jobs.js';
import { KeySpace } from './keys.js';
import { admitted, holders, type InLine, isSemaphore, readLine } from './line.js';
import {
  createdAt,
  emptyRange,
  exists,
  firstOf,
  get,
  kvsAt,
  lineOf,
  nested,
  noneBefore,
  onLease,
  put,
  remove,
  txnAt,
  valuesAbove,
} from './ops.js';
import { type Renewal, renewFor, SessionLost, Sessions, Unconfirmed } from './session.js';
import { acquireShared, type SharedContext } from './shared.js';

/**
 * The instance's settings (StoreSettings; `prefix` is the namespace of every key this store touches,
 * under the client's own namespace), the defaults for those not given, and the store's own options.
 */
export interface EtcdStoreOptions extends Partial<Port.StoreSettings> {
  /** The session's TTL in ms (whole seconds, rounded up); see Sessions. Default DEFAULTS.ttl. */
  readonly sessionTtl?: number;
  /** Where background failures go (a waiter's watch, a key deleted when its ttl ran out). */
  readonly onError?: (error: unknown) => void;
}

/**
 * The ports on etcd, for one prefix. A lock is a line of contenders' keys (`q/<name>/<owner>`),
 * each on a session lease of its store: the key with the lowest create revision holds the lock,
 * and its create revision is the fencing token: issued by etcd's raft log, so it only grows, across
 * restarts and leader changes alike. Every step that decides something is one transaction,
 * compared on create revisions (never a read then a write), and idempotent when re-sent.
 *
 * Waiting is etcd's own: a refused caller that will wait puts its key at the end of the line and
 * watches only the key just before it (see Tracker). A release deletes the holder's key; the next
 * key is then first, so the lock is handed on in arrival order without a reservation to lapse,
 * and only that waiter's store hears of it. Shared holds (semaphores, a read-write lock's shared
 * mode) are keys in the same line, with their kind in the value: shared.ts, line.ts.
 */
export class EtcdStore implements Port.Store, Port.JobStore, Port.AdminStore, Port.SharedStore {
  readonly [STORE] = true;
  readonly kind = 'etcd3';
  readonly address: string;
  readonly #client: EtcdClient;
  readonly #space: KeySpace;
  readonly #sessions: Sessions;
  readonly #contenders: Contenders;
  readonly #onError: (error: unknown) => void;
  /** What every call of this store's instance shares (its instance label, its waiters' lease). */
  readonly #settings: Port.StoreSettings;
  #lastError: unknown;

  constructor(client: EtcdClient, { sessionTtl = DEFAULTS.ttl, onError = () => {}, ...given }: EtcdStoreOptions) {
    this.#client = client;
    this.address = addressOf(client);
    this.#settings = storeSettings(given);
    this.#space = new KeySpace(client.prefix ?? Buffer.alloc(0), this.#settings.prefix);
    this.#onError = onError;
    this.#sessions = new Sessions(client, sessionTtl, (error) => onError(this.#error(error, 'keepalive')));
    this.#contenders = new Contenders(client, this.#space, (error) => onError(this.#error(error, 'watch')));
    // The session is granted now, so the first acquisition is one round trip; a failure here is
    // retried by the first call that needs it.
    this.#sessions.main().catch(() => undefined);
  }

  /** The last error a call to etcd failed with (the cause of a call left unanswered). */
  lastError(): unknown {
    return this.#lastError;
  }

  #error(error: unknown, action: string): LockError {
    const mapped = storeError(error, action, this.address);
    if (mapped.code === ErrorCode.STORE_UNAVAILABLE) this.#lastError = error;
    return mapped;
  }

  /** Run one port call, its failures as LockErrors that say what happened. */
  async #call<T>(action: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      throw this.#error(error, action);
    }
  }

  #txn(request: TxnRequest): Promise<TxnResponse> {
    return this.#client.kv.txn(request);
  }

  /** The job steps' view of the store. */
  get #jobs(): JobContext {
    return {
      client: this.#client,
      space: this.#space,
      sessions: this.#sessions,
      contenders: this.#contenders,
      confirm: (entry, renewal, ttl, since) => this.#confirm(entry, renewal, ttl, since),
      onError: (error) => this.#onError(this.#error(error, 'trim-history')),
    };
  }

  /** The shared steps' view of the store. */
  get #shared(): SharedContext {
    return {
      settings: this.#settings,
      space: this.#space,
      sessions: this.#sessions,
      contenders: this.#contenders,
      txn: (request) => this.#txn(request),
      confirm: (entry, renewal, ttl, since) => this.#confirm(entry, renewal, ttl, since),
    };
  }

  acquire(name: string, request: Port.AcquireRequest): Promise<Port.AcquireReply | Port.HeldAsReply> {
    const since = now();
    const entry = this.#contenders.get(name, request.owner);
    return this.#call('acquire', () =>
      entry ? this.#again(entry, request, since, true) : this.#first(name, request, since, true),
    );
  }

  /**
   * A first attempt: take the lock if nobody is in line, else (for a caller that will wait) put
   * our key at the end of the line. One transaction either way.
   */
  async #first(
    name: string,
    r: Port.AcquireRequest,
    since: number,
    retry: boolean,
  ): Promise<Port.AcquireReply | Port.HeldAsReply> {
    const keys = this.#space.lock(name);
    const key = keys.member(r.owner);
    // A caller that will wait joins the line in the same step when refused, on the main session.
    const [session, waiters] = await Promise.all([
      this.#sessions.get(r.ttl),
      r.queue ? this.#sessions.main() : undefined,
    ]);
    const renewal = renewFor(session, since, r.ttl);
    const granted: Member = { owner: r.owner, instance: this.#settings.instance, ttl: r.ttl, takenAt: Date.now() };
    let response: TxnResponse;
    try {
      response = await this.#txn({
        compare: [emptyRange(keys.queue)],
        success: [put(key, encodeMember(granted), session.id), remove(keys.released)],
        // A line of a semaphore's is another kind of lock: joined only when it holds none (line.ts).
        failure: waiters
          ? [
              nested(
                [valuesAbove(keys.queue, EXCLUSIVE_OR_SHARED)],
                [put(key, encodeMember({ ...granted, takenAt: null }), waiters.id), firstOf(keys.queue), get(key)],
                [firstOf(keys.queue)],
              ),
            ]
          : [firstOf(keys.queue)],
      });
    } catch (error) {
      // A lease etcd did not know: its grant was still on the way, or it ended (then a new one is taken).
      if (!retry || !(await Sessions.recheck(error, [session, waiters]))) throw error;
      return this.#first(name, r, since, false);
    }
    if (response.succeeded) {
      const fence = revision(response.header.revision, 'the grant');
      const entry = this.#contenders.add(name, r.owner, keys, fence, session, granted);
      return this.#granted(entry, renewal, r, since, retry);
    }
    const joined = waiters ? txnAt(response, 0, 'acquire') : response;
    const head = kvsAt(joined, waiters && joined.succeeded ? 1 : 0, 'acquire')[0];
    const headed = head ? decodeMember(head) : undefined;
    if (headed && isSemaphore(headed)) return { acquired: false, heldAs: headed.limit as number };
    if (waiters && !joined.succeeded) return { acquired: false, pttl: pttlOf(head) };
    if (!waiters) {
      const first = head;
      if (!first?.key.equals(key) || first.lease !== session.id) return { acquired: false, pttl: pttlOf(first) };
      // A re-sent attempt whose first send took the lock: that grant is ours.
      const entry = this.#contenders.add(name, r.owner, keys, revision(first.create_revision, 'a grant'), session, {
        ...granted,
        takenAt: decodeMember(first).takenAt,
      });
      return this.#granted(entry, renewal, r, since, retry);
    }
    const first = kvsAt(joined, 1, 'acquire')[0];
    const mine = kvsAt(joined, 2, 'acquire')[0];
    if (!mine) throw new LockError(ErrorCode.STORE_ERROR, 'etcd3: acquire: the key just put is not there');
    const entry = this.#contenders.add(name, r.owner, keys, revision(mine.create_revision, 'a waiter'), waiters, {
      ...granted,
      takenAt: null,
    });
    // A re-sent first attempt may find our own key first in line: then it is ours to take.
    if (first?.key.equals(key)) return this.#again(entry, r, since, retry);
    this.#contenders.queue(entry, this.#settings.waiterLease);
    return { acquired: false, pttl: pttlOf(first) };
  }

  /**
   * A later attempt by a waiter (or a re-sent one by a holder): the lock is ours if our key is
   * still there and no key in line is older. Granted, the key moves to the session of the lease.
   */
  async #again(
    entry: Entry,
    r: Port.AcquireRequest,
    since: number,
    retry: boolean,
  ): Promise<Port.AcquireReply | Port.HeldAsReply> {
    const { keys } = entry;
    const key = keys.member(r.owner);
    const session = await this.#sessions.get(r.ttl);
    const renewal = renewFor(session, since, r.ttl);
    const takenAt = entry.state === 'queued' ? Date.now() : (entry.member.takenAt ?? Date.now());
    const granted: Member = { owner: r.owner, instance: this.#settings.instance, ttl: r.ttl, takenAt };
    let response: TxnResponse;
    try {
      response = await this.#txn({
        compare: [createdAt(key, entry.revision), noneBefore(keys.queue, entry.revision)],
        success: [put(key, encodeMember(granted), session.id), remove(keys.released)],
        failure: [firstOf(keys.queue), get(key)],
      });
    } catch (error) {
      if (!retry || !(await Sessions.recheck(error, [session]))) throw error;
      return this.#again(entry, r, since, false);
    }
    if (response.succeeded) {
      entry.session = session;
      entry.member = granted;
      return this.#granted(entry, renewal, r, since, retry);
    }
    const first = kvsAt(response, 0, 'acquire')[0];
    if (!kvsAt(response, 1, 'acquire')[0]) {
      // Our key is gone (its session ended, it was dropped): join again, at the end of the line.
      this.#contenders.forget(entry);
      return this.#first(entry.name, r, since, retry);
    }
    this.#contenders.queue(entry, this.#settings.waiterLease);
    return { acquired: false, pttl: pttlOf(first) };
  }

  /** A grant stands once its session is confirmed alive past the lease; a lost session means trying again. */
  async #granted(
    entry: Entry,
    renewal: Promise<Renewal>,
    r: Port.AcquireRequest,
    since: number,
    retry: boolean,
  ): Promise<Port.AcquireReply | Port.HeldAsReply> {
    try {
      await this.#confirm(entry, renewal, r.ttl, since);
    } catch (error) {
      if (!(error instanceof Unconfirmed) || !retry) throw error instanceof Unconfirmed ? error.cause : error;
      return this.#first(entry.name, r, since, false);
    }
    return { acquired: true, fence: entry.revision };
  }

  /**
   * Hold `entry` for `ttl` ms from `since` once its session's renewal came back: etcd then keeps
   * the key at least that long. Throws Unconfirmed (cause: SessionLost) when the session is gone
   * and the key with it, or the renewal's error when it cannot tell (the key is then given back).
   */
  async #confirm(entry: Entry, renewal: Promise<Renewal>, ttl: number, since: number): Promise<void> {
    const renewed = await renewal;
    if (!renewed.ok) {
      if (renewed.error instanceof SessionLost) {
        this.#contenders.forget(entry);
        throw new Unconfirmed('session lost', { cause: renewed.error });
      }
      if (entry.session.coveredUntil < since + ttl) {
        this.#contenders.forget(entry);
        const key = entry.keys.member(entry.owner);
        this.#txn({ compare: [createdAt(key, entry.revision)], success: [remove(key)], failure: [] }).catch(
          () => undefined,
        );
        throw renewed.error;
      }
    }
    this.#contenders.hold(entry, ttl, since);
  }

  release(name: string, owner: string): Promise<Port.ReleaseReply> {
    return this.#release(name, owner, notOurs);
  }

  /**
   * End a shared hold: delete its key, as a release. Deleting it wakes what it kept out: an
   * exclusive waiter right behind, or the shared waiters it counted against (share-tracker.ts).
   */
  releaseShared(name: string, owner: string): Promise<Port.ReleaseReply> {
    return this.#release(name, owner, goneShared);
  }

  /** Delete `owner`'s key; `gone` says what a key found gone answers. */
  async #release(name: string, owner: string, gone: Gone): Promise<Port.ReleaseReply> {
    const entry = this.#contenders.get(name, owner);
    const keys = entry?.keys ?? this.#space.lock(name);
    const key = keys.member(owner);
    if (entry) this.#contenders.forget(entry);
    return this.#call('release', async () => {
      const request = (marker: boolean): TxnRequest => ({
        compare: [entry ? createdAt(key, entry.revision) : exists(key)],
        success:
          entry && marker
            ? [remove(key), put(keys.released, encodeReleased({ owner, fence: entry.revision }), entry.session.id)]
            : [remove(key)],
        failure: [firstOf(keys.queue), get(keys.released)],
      });
      // The marker lives on the key's own session; if etcd ended that meanwhile, release without it.
      const response = await this.#txn(request(true)).catch((error: unknown) => {
        if (isLeaseGone(error)) return this.#txn(request(false));
        throw error;
      });
      if (response.succeeded) return 'released';
      if (decodeReleased(kvsAt(response, 1, 'release')[0])?.owner === owner) return 'released';
      return gone(kvsAt(response, 0, 'release')[0]);
    });
  }

  extend(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#extendAny(name, owner, ttl, notOurs);
  }

  /** Extending a shared hold is extending its key, as a holder's. */
  extendShared(name: string, owner: string, ttl: number): Promise<Port.ExtendReply> {
    return this.#extendAny(name, owner, ttl, goneShared);
  }

  #extendAny(name: string, owner: string, ttl: number, gone: Gone): Promise<Port.ExtendReply> {
    const since = now();
    const entry = this.#contenders.get(name, owner);
    if (entry?.state === 'held' && entry.session.lost) {
      // etcd ended the session, and every key on it: told at once, without asking.
      this.#contenders.forget(entry);
      return Promise.resolve('expired');
    }
    if (entry?.state !== 'held') {
      if (entry?.state === 'expiring') return Promise.resolve('expired');
      return this.#call('extend', () => this.#absent(name, owner, gone));
    }
    // Push the local end first: the ttl timer must not delete the key under a confirmation in flight.
    this.#contenders.extendTo(entry, since + ttl);
    return this.#call('extend', () => this.#extend(entry, ttl, since, gone, true));
  }

  async #extend(entry: Entry, ttl: number, since: number, gone: Gone, retry: boolean): Promise<Port.ExtendReply> {
    const key = entry.keys.member(entry.owner);
    const target = await this.#sessions.get(ttl);
    const moving = target !== entry.session;
    const member = moving ? { ...entry.member, ttl } : entry.member;
    const renewal = renewFor(target, since, ttl);
    let response: TxnResponse;
    try {
      response = await this.#txn(
        moving
          ? {
              // A lease of another length lives on that length's session: move the key (same create revision).
              compare: [createdAt(key, entry.revision)],
              success: [put(key, encodeMember(member), target.id)],
              failure: [firstOf(entry.keys.queue)],
            }
          : {
              compare: [createdAt(key, entry.revision), onLease(key, target.id)],
              success: [],
              failure: [firstOf(entry.keys.queue)],
            },
      );
    } catch (error) {
      if (!retry || !(await Sessions.recheck(error, [target]))) throw error;
      return this.#extend(entry, ttl, since, gone, false);
    }
    if (!response.succeeded) {
      this.#contenders.forget(entry);
      return gone(kvsAt(response, 0, 'extend')[0]);
    }
    if (moving) {
      entry.session = target;
      entry.member = member;
    }
    const renewed = await renewal;
    if (renewed.ok) return 'extended';
    if (renewed.error instanceof SessionLost) {
      this.#contenders.forget(entry);
      return 'expired';
    }
    // Not confirmed, not refused: the Lock tries again while its validity lasts.
    throw renewed.error;
  }

  /** An extension of a lock this store does not hold: whose is it? */
  async #absent(name: string, owner: string, gone: Gone): Promise<Port.ExtendReply> {
    const keys = this.#space.lock(name);
    const response = await this.#txn({ compare: [], success: [firstOf(keys.queue)], failure: [] });
    const first = kvsAt(response, 0, 'extend')[0];
    return first && decodeMember(first).owner === owner ? 'expired' : gone(first);
  }

  /** A shared waiter gives up: its key goes, as an exclusive waiter's (it may make room behind it). */
  leaveShared(name: string, owner: string): Promise<void> {
    return this.leave(name, owner);
  }

  acquireShared(name: string, request: Port.SharedRequest): Promise<Port.SharedAcquireReply> {
    const since = now();
    return this.#call('acquire-shared', () => acquireShared(this.#shared, name, request, since));
  }

  async leave(name: string, owner: string): Promise<void> {
    const entry = this.#contenders.get(name, owner);
    const keys = entry?.keys ?? this.#space.lock(name);
    const key = keys.member(owner);
    if (entry) this.#contenders.forget(entry);
    // Deleting our key hands the lock on if we were first: the next in line is woken by it.
    await this.#call('leave', () =>
      this.#txn({
        compare: [entry ? createdAt(key, entry.revision) : exists(key)],
        success: [remove(key)],
        failure: [],
      }),
    );
  }

  async inspect(name: string): Promise<Port.LockState> {
    const keys = this.#space.lock(name);
    return this.#call('inspect', async () => {
      const response = await this.#txn({
        compare: [],
        success: [lineOf(keys.queue), get(keys.released)],
        failure: [],
      });
      const line = readLine(kvsAt(response, 0, 'inspect'));
      const first = line[0]?.kv;
      const member = line[0]?.member ?? null;
      const released = decodeReleased(kvsAt(response, 1, 'inspect')[0]);
      if (!first || member?.takenAt === null || member === null || member.limit !== undefined) {
        // Shared holds are no owner's (inspectShared lists them); the newest holds the latest token.
        const tokens = holders(line).map((k) => k.revision);
        return {
          owner: null,
          pttl: -2,
          fence: Math.max(released?.fence ?? 0, ...tokens),
          holder: null,
          releasedBy: released?.owner ?? null,
        };
      }
      const token = revision(first.create_revision, 'a holder');
      return {
        owner: member.owner,
        pttl: await this.#leaseLeft(first.lease),
        fence: token,
        holder: { token, takenAt: member.takenAt, instance: member.instance },
        releasedBy: null,
      };
    });
  }

  async inspectShared(name: string): Promise<Port.SharedState> {
    const keys = this.#space.lock(name);
    return this.#call('inspect-shared', async () => {
      const response = await this.#txn({ compare: [], success: [lineOf(keys.queue)], failure: [] });
      const line = readLine(kvsAt(response, 0, 'inspect-shared'));
      const reserved = admitted(line).map((k) => k.member.owner);
      const held = holders(line);
      const limit = line[0]?.member.limit;
      if (held.length === 0) return { mode: 'free', limit: null, holds: [], reserved };
      if (limit === undefined) return { mode: 'exclusive', limit: null, holds: [], reserved: [] };
      const holds = await Promise.all(held.map((k) => this.#sharedHold(k)));
      holds.sort((a, b) => a.pttl - b.pttl);
      return { mode: limit === 0 ? 'shared' : 'semaphore', limit: limit === 0 ? null : limit, holds, reserved };
    });
  }

  /** One shared hold as operator tooling shows it: what its key says, and what its lease has left. */
  async #sharedHold({ kv, revision: token, member }: InLine): Promise<Port.SharedHold> {
    const pttl = Math.min(member.ttl, await this.#leaseLeft(kv.lease));
    return { owner: member.owner, pttl, token, takenAt: member.takenAt ?? 0, instance: member.instance };
  }

  /** ms etcd keeps a lease unrenewed (whole seconds, as etcd counts them). */
  async #leaseLeft(lease: string): Promise<number> {
    const { TTL } = await this.#client.leaseClient.leaseTimeToLive({ ID: lease });
    return Math.max(0, Number(TTL) * 1000);
  }

  watch(name: string, onHandOff: (handOff: Port.HandOff) => void): Promise<() => void> {
    return this.#call('watch', () => this.#contenders.watch(name, onHandOff));
  }

  claimTick(name: string, request: Port.ClaimRequest): Promise<Port.ClaimReply> {
    return this.#call('claim-tick', () => claimTick(this.#jobs, name, request));
  }

  finishTick(name: string, request: Port.FinishRequest): Promise<Port.FinishReply> {
    return this.#call('finish-tick', () => finishTick(this.#jobs, name, request));
  }

  readJob(name: string, limit: number): Promise<Port.JobState> {
    return this.#call('read-job', () => readJob(this.#jobs, name, limit));
  }

  forgetJob(name: string): Promise<void> {
    return this.#call('forget-job', () => forgetJob(this.#jobs, name));
  }

  async *scanLocks(match: string, count: number): AsyncGenerator<string> {
    const matches = globMatcher(match);
    const { start, end } = this.#space.queues;
    const seen = new Set<string>();
    const limit = Math.max(1, count);
    let from = start;
    for (;;) {
      const page = await this.#call('scan-locks', () => this.#client.kv.range({ key: from, range_end: end, limit }));
      for (const kv of page.kvs) {
        const found = this.#space.member(kv.key);
        // Only holders count: a key is held once granted (a waiter's carries no grant time).
        if (!found || seen.has(found.name) || decodeMember(kv).takenAt === null) continue;
        seen.add(found.name);
        if (matches(found.name)) yield found.name;
      }
      const last = page.kvs.at(-1);
      if (!page.more || !last) return;
      from = Buffer.concat([last.key, Buffer.from([0])]);
    }
  }

  async forceRelease(name: string): Promise<Port.ForceReleaseReply> {
    const keys = this.#space.lock(name);
    return this.#call('force-release', async () => {
      const read = await this.#txn({ compare: [], success: [firstOf(keys.queue, 2)], failure: [] });
      const [first, next] = kvsAt(read, 0, 'force-release');
      const member = first ? decodeMember(first) : null;
      if (!first || !member || member.takenAt === null) return { result: 'not-held' };
      const token = revision(first.create_revision, 'a holder');
      const deleted = await this.#txn({
        compare: [createdAt(first.key, token)],
        success: [remove(first.key)],
        failure: [],
      });
      if (!deleted.succeeded) return { result: 'not-held' };
      return {
        result: 'released',
        owner: member.owner,
        holder: { token, takenAt: member.takenAt, instance: member.instance },
        woken: next ? decodeMember(next).owner : null,
      };
    });
  }

  async queued(name: string, limit: number): Promise<Port.QueueState> {
    const keys = this.#space.lock(name);
    return this.#call('queued', async () => {
      const response = await this.#txn({ compare: [], success: [lineOf(keys.queue)], failure: [] });
      const line = readLine(kvsAt(response, 0, 'queued'));
      // A waiter admitted and not holding yet (the first in line, or a shared one with room) is
      // what a Redis reservation is; the others wait.
      const ready = admitted(line);
      const waiting = line.filter((k) => k.member.takenAt === null && !ready.includes(k));
      const next = ready[0];
      const reserved = next ? { owner: next.member.owner, pttl: await this.#leaseLeft(next.kv.lease) } : null;
      return {
        count: waiting.length,
        first: waiting.slice(0, Math.max(0, limit)).map((k) => k.member.owner),
        reserved,
      };
    });
  }

  /** Stop what this store runs (timers, watches). The keys are left to their sessions, the client to the caller. */
  async close(): Promise<void> {
    this.#contenders.close();
    this.#sessions.close();
  }
}

/** The holder's lease length: a waiter's hint of when trying again is worth it. */
function pttlOf(first: EtcdKeyValue | undefined): number {
  return first ? decodeMember(first).ttl : 0;
}

/** What a key found gone answers, by the first key in line. */
type Gone = (first: EtcdKeyValue | undefined) => 'not-owner' | 'expired';

/** Our key is gone: another owner holds the lock, or nobody does. */
function notOurs(first: EtcdKeyValue | undefined): 'not-owner' | 'expired' {
  return first && decodeMember(first).takenAt !== null ? 'not-owner' : 'expired';
}

/** A shared hold is gone: `not-owner` only when another owner holds the lock exclusively. */
function goneShared(first: EtcdKeyValue | undefined): 'not-owner' | 'expired' {
  const member = first ? decodeMember(first) : null;
  return member && member.takenAt !== null && member.limit === undefined ? 'not-owner' : 'expired';
}
