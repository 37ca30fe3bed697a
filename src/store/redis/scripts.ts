import { createHash } from 'node:crypto';
import { ErrorCode, LockError } from '../../core/errors.js';
import type {
  AcquireReply,
  AcquireRequest,
  ClaimReply,
  ClaimRequest,
  FinishReply,
  FinishRequest,
  ForceReleaseReply,
  HeldAsReply,
  JobState,
  LockState,
  QueueState,
  ReleaseReply,
  SharedAcquireReply,
  SharedRequest,
  SharedState,
  StoreSettings,
} from '../port.js';
import { jobKeys, type LockKeys, lockKeys } from './keys.js';
import acquireSource from './lua/acquire.lua';
import acquireSharedSource from './lua/acquire-shared.lua';
import claimTickSource from './lua/claim-tick.lua';
import extendSource from './lua/extend.lua';
import extendSharedSource from './lua/extend-shared.lua';
import finishTickSource from './lua/finish-tick.lua';
import forceReleaseSource from './lua/force-release.lua';
import forgetJobSource from './lua/forget-job.lua';
import freeSource from './lua/free.lua';
import inspectSource from './lua/inspect.lua';
import inspectSharedSource from './lua/inspect-shared.lua';
import leaveSource from './lua/leave.lua';
import leaveSharedSource from './lua/leave-shared.lua';
import handOnLib from './lua/lib/hand-on.lua';
import leaseLib from './lua/lib/lease.lua';
import sharedLib from './lua/lib/shared.lua';
import queuedSource from './lua/queued.lua';
import raiseFenceSource from './lua/raise-fence.lua';
import readJobSource from './lua/read-job.lua';
import releaseSource from './lua/release.lua';
import releaseSharedSource from './lua/release-shared.lua';
import scanLocksSource from './lua/scan-locks.lua';
import {
  BadReply,
  byCode,
  type Decoder,
  integer,
  integerReply,
  parseCounter,
  positiveOr,
  readLockValue,
  shaped,
  storedRun,
} from './replies.js';

/**
 * What a script may do, as Redis Functions flags: `read` runs no write command; `free` only ends or
 * shortens leases, so it must run even when the server is out of memory (release, leave, extend);
 * `scan` reads the keys a SCAN found, of any slot a cluster node serves.
 */
type Access = 'write' | 'read' | 'free' | 'scan';

/**
 * A Lua script: its source and SHA1 for EVALSHA/EVAL, and its name in the function library for
 * FCALL (see LIBRARY_SOURCE below).
 */
export interface Script {
  readonly name: string;
  /** The script as EVAL runs it, includes resolved. */
  readonly source: string;
  readonly sha: string;
  /** Its function's name in the library: `leasehold_<version>_<name>`. */
  readonly fn: string;
  readonly access: Access;
  /** The script's own text, includes left out (the library defines them once). */
  readonly body: string;
  /** Its body runs inside lib/lease.lua's `run_call` (it reads and changes lock records). */
  readonly records: boolean;
}

/** KEYS and ARGV of one call, in the order the script's header lists them. */
export interface ScriptInput {
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
}

/**
 * The ARGV every call of one store shares, from the store's settings: built once, with the store.
 */
export interface BoundArgs {
  /** The instance label recorded next to each lease (StoreSettings.instance). */
  readonly instance: string;
  /** ms the fencing record is kept (StoreSettings.fenceRetention). */
  readonly fenceRetention: number;
  /** ms a queued waiter stays queued without trying again (StoreSettings.waiterLease). */
  readonly waiterLease: number;
  /** ms the lock is reserved for the waiter a hand-on wakes (HandOn.reservation). */
  readonly reservation: number;
  /** HandOn.announce, as the scripts take it: '1' or '0'. */
  readonly announce: '1' | '0';
  /**
   * The store's own (random) mark on the waiters it queues, by which a release grants the lock
   * directly to a waiter that queued through the same store (lua/lib/hand-on.lua); '' for none.
   */
  readonly room: string;
  /** The room a release grants directly to: `room` when the store's hand-on is direct (HandOn.direct), else ''. */
  readonly directRoom: string;
}

/** The ARGV a store with `settings` sends on every call, its room `room` ('' for none). */
export function boundArgs(settings: Omit<StoreSettings, 'prefix'>, room = ''): BoundArgs {
  const { instance, fenceRetention, waiterLease, handOn } = settings;
  return Object.freeze({
    instance,
    fenceRetention,
    waiterLease,
    reservation: handOn.reservation,
    announce: handOn.announce ? '1' : '0',
    room,
    directRoom: handOn.direct === true ? room : '',
  });
}

/**
 * A script declared once: its source, the KEYS and ARGV a request becomes, and how its reply
 * becomes the port's reply. `handsOn`: the script may publish to waiters (hand the lock on, or
 * wake one to ask again), so it is given the publish command (`publish`), which its ARGV carries
 * with the channel (a hand-on's ARGV also the reservation and announce).
 * `bound`: the calling store's own ARGV (its settings and room, see BoundArgs).
 */
export interface ScriptCall<Request, Reply> extends Script {
  readonly handsOn: boolean;
  readonly input: (prefix: string, name: string, request: Request, publish: string, bound: BoundArgs) => ScriptInput;
  readonly reply: Decoder<Reply>;
}

/** The shared steps a script may include, by the path its `-- include:` line names. */
const LIBRARY: Readonly<Record<string, string>> = {
  'lib/lease.lua': leaseLib,
  'lib/hand-on.lua': handOnLib,
  'lib/shared.lua': sharedLib,
};

const INCLUDE = /^-- include: (\S+)$/gm;

/**
 * Whether a script reads and changes lock records through lib/lease.lua: then its body runs inside
 * `run_call`, which writes back what it changed.
 */
const usesRecords = (lua: string): boolean => lua.includes('-- include: lib/lease.lua');

/** A script's body as a Lua function of (KEYS, ARGV). */
const bodyFunction = (body: string): string => `function(KEYS, ARGV)\n${body}\nend`;

/** A script's source as EVAL runs it: each `-- include: lib/…` file in its place, then its body. */
export function resolveIncludes(name: string, source: string): string {
  const libs = [...source.matchAll(INCLUDE)].map(([, path]) => {
    const lib = path === undefined ? undefined : LIBRARY[path];
    if (lib === undefined) throw new Error(`${name}.lua includes ${path}, which is not in the Lua library`);
    return lib.trimEnd();
  });
  const body = source.replace(INCLUDE, '').trim();
  return [...libs, usesRecords(source) ? `return run_call(${bodyFunction(body)}, KEYS, ARGV)` : body].join('\n');
}

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

/** A declaration before the library's version is known (it hashes every script). */
type Declared<Request, Reply> = Omit<ScriptCall<Request, Reply>, 'fn'>;

/**
 * One script's declaration: its file, what it may do, its KEYS (from the lock's keys, or the job's:
 * `layout`) and ARGV (from the request), in its header's order, and its reply's decoding.
 */
interface Spec<K, Request, Reply> {
  readonly name: string;
  readonly lua: string;
  readonly access: Access;
  readonly layout: (prefix: string, name: string) => K;
  readonly keys: (keys: K, request: Request) => readonly string[];
  readonly args: (request: Request, keys: K, publish: string, bound: BoundArgs) => readonly (string | number)[];
  readonly handsOn?: boolean;
  readonly reply: Decoder<Reply>;
}

function declare<K, Request, Reply>(spec: Spec<K, Request, Reply>): Declared<Request, Reply> {
  const { name, lua, layout, keys, args, reply } = spec;
  const source = resolveIncludes(name, lua);
  return {
    name,
    source,
    sha: sha1(source),
    access: spec.access,
    body: lua.replace(INCLUDE, '').trim(),
    records: usesRecords(lua),
    handsOn: spec.handsOn ?? false,
    input: (prefix, lock, request, publish, bound) => {
      const k = layout(prefix, lock);
      return { keys: keys(k, request), args: args(request, k, publish, bound) };
    },
    reply: {
      codes: reply.codes,
      ...(reply.positive ? { positive: true } : {}),
      decode: (raw) => {
        try {
          return reply.decode(raw);
        } catch (error) {
          if (!(error instanceof BadReply)) throw error;
          throw new LockError(ErrorCode.STORE_ERROR, `unexpected reply from ${name}: ${JSON.stringify(raw)}`);
        }
      },
    },
  };
}

/** A script that names no keys (it finds them itself). */
const noKeys = (): null => null;

/** The hand-on's ARGV, last in every script that may free a lock (see lib/hand-on.lua). */
function handOnArgs(keys: LockKeys, publish: string, bound: BoundArgs): (string | number)[] {
  return [publish, keys.channel, bound.reservation, bound.announce];
}

const QUEUE_MODE = { join: '1', member: '2' } as const;

/** The three outcomes of a call on a lease held (or not) by an owner: release, extend. */
function ownerCodes<Done extends string>(done: Done): Decoder<Done | 'expired' | 'not-owner'> {
  return byCode<Done | 'expired' | 'not-owner'>({ 1: () => done, 0: () => 'expired', [-1]: () => 'not-owner' });
}

/** What release returns: its outcome, and the hand-off messages it published (to wake this instance's own waiters). */
export interface Released {
  readonly outcome: ReleaseReply;
  readonly told: readonly string[];
  /** The fencing token of the lock granted directly to the first waiter told, or null. */
  readonly granted: number | null;
  /**
   * Whether `told` was published too (and so comes back on the subscriber connection): false for
   * a direct grant whose messages name only waiters that queued through the releasing store.
   */
  readonly published: boolean;
}

const releaseCodes: Decoder<Released> = (() => {
  const NONE: readonly string[] = Object.freeze([]);
  const plain = {
    released: Object.freeze({ outcome: 'released', told: NONE, granted: null, published: false }),
    expired: Object.freeze({ outcome: 'expired', told: NONE, granted: null, published: false }),
  } as const;
  const released = (outcome: 'released' | 'expired', reply: readonly unknown[]): Released => {
    if (reply.length === 1) return plain[outcome];
    const told = reply.slice(1);
    // 'here' after a direct grant's token: the messages were not published.
    const published = !(told.at(-1) === 'here' && typeof told.at(-2) === 'number');
    if (!published) told.pop();
    const last = told.at(-1);
    const granted = last === undefined || typeof last === 'string' ? null : integer(told.pop());
    if (!told.every((m): m is string => typeof m === 'string')) throw new BadReply();
    if (granted !== null && told.length === 0) throw new BadReply();
    return { outcome, told, granted, published };
  };
  return byCode<Released>({
    1: (r) => released('released', r),
    0: (r) => released('expired', r),
    [-1]: () => ({ outcome: 'not-owner', told: NONE, granted: null, published: false }),
  });
})();

/** A shared hold, as inspect-shared returns it: owner, end (server ms), grant or false for a reservation. */
function sharedState(reply: readonly unknown[]): SharedState {
  if (reply.length < 2 || (reply.length - 2) % 3 !== 0) throw new BadReply();
  const value = readLockValue(reply[0]);
  const now = integer(reply[1]);
  const holds: SharedState['holds'][number][] = [];
  const reserved = [...value.reserved];
  for (let i = 2; i < reply.length; i += 3) {
    const [owner, end, grant] = [String(reply[i]), integer(reply[i + 1]), reply[i + 2]];
    const holder = typeof grant === 'string' ? parseCounter(grant).holder : null;
    if (holder === null) reserved.push(owner);
    else holds.push({ owner, pttl: Math.max(0, end - now), ...holder });
  }
  const shared = value.shared;
  const mode = shared === null ? (value.owner === null ? 'free' : 'exclusive') : shared === 0 ? 'shared' : 'semaphore';
  return { mode, limit: shared === null || shared === 0 ? null : shared, holds, reserved };
}

const DECLARED = {
  acquire: declare({
    name: 'acquire',
    lua: acquireSource,
    access: 'write',
    layout: lockKeys,
    // A caller that does not queue (every Redlock node's) needs none of the queue's keys, the waiter
    // lease or the room, and they are left out; refused by a store that announces its releases, it
    // flags the lease ('3'), so that lease's release is announced. Only a queued caller may wake
    // the waiter after it (ask_first), so only it is given the channel.
    keys: (k, r: AcquireRequest) => (r.queue === undefined ? [k.lock] : [k.lock, k.waiters, k.alive]),
    args: (r: AcquireRequest, k, publish, b) => {
      const { owner, ttl, minFence = 0, queue } = r;
      if (queue === undefined) {
        return [owner, ttl, minFence, b.announce === '1' ? '3' : '0', b.instance, b.fenceRetention];
      }
      const head = [owner, ttl, minFence, QUEUE_MODE[queue], b.instance, b.fenceRetention, b.waiterLease, b.room];
      return queue === 'member' ? [...head, publish, k.channel] : head;
    },
    handsOn: true,
    reply: positiveOr<AcquireReply | HeldAsReply>(
      (fence) => ({ acquired: true, fence }),
      byCode<AcquireReply | HeldAsReply>({
        0: (r) => ({ acquired: false, pttl: integer(r[1]) }),
        [-1]: (r) => ({ acquired: false, heldAs: integer(r[1]) }),
      }),
    ),
  }),

  release: declare({
    name: 'release',
    lua: releaseSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive],
    args: (owner: string, k, publish, b) => [owner, ...handOnArgs(k, publish, b), b.directRoom],
    handsOn: true,
    reply: releaseCodes,
  }),

  free: declare({
    name: 'free',
    lua: freeSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock],
    args: (owner: string) => [owner],
    reply: byCode<boolean>({ 1: () => true, 0: () => false }),
  }),

  leave: declare({
    name: 'leave',
    lua: leaveSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive],
    args: (owner: string, k, publish, b) => [owner, ...handOnArgs(k, publish, b)],
    handsOn: true,
    reply: byCode<void>({ 1: () => undefined, 0: () => undefined }),
  }),

  extend: declare({
    name: 'extend',
    lua: extendSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock],
    args: (r: { readonly owner: string; readonly ttl: number }) => [r.owner, r.ttl],
    reply: ownerCodes('extended'),
  }),

  acquireShared: declare({
    name: 'acquire-shared',
    lua: acquireSharedSource,
    access: 'write',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive, k.holds, k.grants],
    args: (r: SharedRequest, k, publish, b) => [
      r.owner,
      r.ttl,
      r.limit,
      r.queue === undefined ? '0' : QUEUE_MODE[r.queue],
      b.instance,
      b.fenceRetention,
      b.waiterLease,
      ...handOnArgs(k, publish, b),
    ],
    handsOn: true,
    reply: byCode<SharedAcquireReply>({
      1: (r) => ({ acquired: true, fence: integer(r[1]) }),
      0: (r) => ({ acquired: false, pttl: integer(r[1]) }),
      [-1]: (r) => ({ acquired: false, heldAs: integer(r[1]) }),
    }),
  }),

  releaseShared: declare({
    name: 'release-shared',
    lua: releaseSharedSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive, k.holds, k.grants],
    args: (owner: string, k, publish, b) => [owner, ...handOnArgs(k, publish, b)],
    handsOn: true,
    reply: ownerCodes('released'),
  }),

  leaveShared: declare({
    name: 'leave-shared',
    lua: leaveSharedSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive, k.holds, k.grants],
    args: (owner: string, k, publish, b) => [owner, ...handOnArgs(k, publish, b)],
    handsOn: true,
    reply: byCode<void>({ 1: () => undefined, 0: () => undefined }),
  }),

  extendShared: declare({
    name: 'extend-shared',
    lua: extendSharedSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.holds, k.grants],
    args: (r: { readonly owner: string; readonly ttl: number }) => [r.owner, r.ttl],
    reply: ownerCodes('extended'),
  }),

  inspectShared: declare({
    name: 'inspect-shared',
    lua: inspectSharedSource,
    access: 'read',
    layout: lockKeys,
    keys: (k) => [k.lock, k.holds, k.grants],
    args: (_: undefined) => [],
    reply: shaped<SharedState>(sharedState),
  }),

  raiseFence: declare({
    name: 'raise-fence',
    lua: raiseFenceSource,
    access: 'write',
    layout: lockKeys,
    keys: (k) => [k.lock],
    args: (fence: number, _, _publish, b) => [fence, b.fenceRetention],
    reply: integerReply,
  }),

  inspect: declare({
    name: 'inspect',
    lua: inspectSource,
    access: 'read',
    layout: lockKeys,
    keys: (k) => [k.lock],
    args: (_: undefined) => [],
    reply: shaped<LockState>((reply) => {
      if (reply.length !== 3) throw new BadReply();
      const [value, pttl, counter] = reply;
      const parsed = typeof counter === 'string' ? parseCounter(counter) : { token: 0, holder: null, releasedBy: null };
      const { owner } = readLockValue(value);
      const held = owner !== null;
      return {
        owner,
        pttl: held ? integer(pttl) : -2,
        fence: parsed.token,
        // The counter tells who holds the lock while its grant is not released by that holder (a
        // mark of another owner is the release that granted it outright: lib/hand-on.lua).
        holder: held && parsed.releasedBy !== owner ? parsed.holder : null,
        releasedBy: parsed.releasedBy,
      };
    }),
  }),

  claimTick: declare({
    name: 'claim-tick',
    lua: claimTickSource,
    access: 'write',
    layout: jobKeys,
    keys: (k) => [k.lock, k.tick, k.runs],
    args: (r: ClaimRequest, _, _publish, b) => [
      r.owner,
      r.ttl,
      r.tick ?? '',
      r.instance,
      r.historyLimit,
      b.fenceRetention,
      r.clockTolerance,
    ],
    reply: byCode<ClaimReply>({
      1: (r) => ({ claimed: true, fence: integer(r[1]), startedAt: integer(r[2]) }),
      0: (r) => ({ claimed: false, reason: 'locked', pttl: integer(r[1]) }),
      [-1]: (r) => ({ claimed: false, reason: 'already-ran', lastTick: integer(r[1]) }),
      [-2]: (r) => ({ claimed: false, reason: 'clock-skew', now: integer(r[1]) }),
    }),
  }),

  finishTick: declare({
    name: 'finish-tick',
    lua: finishTickSource,
    access: 'free',
    layout: jobKeys,
    keys: (k) => [k.lock, k.runs, k.waiters, k.alive],
    args: (r: FinishRequest, k, publish, b) => [
      r.owner,
      r.fence,
      r.startedAt,
      r.outcome,
      r.error ?? '',
      r.lockAtLeastFor,
      ...handOnArgs(k, publish, b),
    ],
    handsOn: true,
    reply: byCode<FinishReply>({
      1: (r) => ({ lease: 'kept', remaining: integer(r[1]) }),
      2: () => ({ lease: 'released' }),
      0: () => ({ lease: 'expired' }),
      [-1]: () => ({ lease: 'not-owner' }),
    }),
  }),

  readJob: declare({
    name: 'read-job',
    lua: readJobSource,
    access: 'read',
    layout: jobKeys,
    keys: (k) => [k.lock, k.tick, k.runs],
    args: (limit: number) => [limit],
    reply: shaped<JobState>((reply) => {
      if (reply.length < 3) throw new BadReply();
      const lastTick = integer(reply[2]);
      return {
        held: integer(reply[0]) === 1,
        fence: integer(reply[1]),
        lastTick: lastTick < 0 ? null : lastTick,
        runs: reply.slice(3).map(storedRun),
      };
    }),
  }),

  forgetJob: declare({
    name: 'forget-job',
    lua: forgetJobSource,
    access: 'free',
    layout: jobKeys,
    keys: (k) => [k.tick, k.runs],
    args: () => [],
    reply: integerReply,
  }),

  forceRelease: declare({
    name: 'force-release',
    lua: forceReleaseSource,
    access: 'free',
    layout: lockKeys,
    keys: (k) => [k.lock, k.waiters, k.alive],
    args: (_: undefined, k, publish, b) => handOnArgs(k, publish, b),
    handsOn: true,
    reply: byCode<ForceReleaseReply>({
      1: ([, owner, woken, counter]) => {
        if (typeof owner !== 'string' || typeof woken !== 'string') throw new BadReply();
        const holder = typeof counter === 'string' ? parseCounter(counter).holder : null;
        return { result: 'released', owner, holder, woken: woken === '' ? null : woken };
      },
      0: () => ({ result: 'not-held' }),
    }),
  }),

  queued: declare({
    name: 'queued',
    lua: queuedSource,
    access: 'read',
    layout: lockKeys,
    keys: (k) => [k.waiters, k.lock],
    args: (limit: number) => [limit],
    reply: shaped<QueueState>((reply) => {
      if (reply.length < 3) throw new BadReply();
      const { reservedFor } = readLockValue(reply[1]);
      return {
        count: integer(reply[0]),
        first: reply.slice(3).map(String),
        reserved: reservedFor === null ? null : { owner: reservedFor, pttl: integer(reply[2]) },
      };
    }),
  }),

  scanLocks: declare({
    name: 'scan-locks',
    lua: scanLocksSource,
    access: 'scan',
    layout: noKeys,
    keys: () => [],
    args: (r: { readonly cursor: string; readonly pattern: string; readonly count: number }) => [
      r.cursor,
      r.pattern,
      r.count,
    ],
    reply: shaped<{ readonly cursor: string; readonly keys: readonly string[] }>((reply) => {
      const [cursor, keys] = reply;
      if (reply.length !== 2 || !Array.isArray(keys)) throw new BadReply();
      return { cursor: String(cursor), keys: keys.filter((k): k is string => typeof k === 'string') };
    }),
  }),
};

/** What the library's text hashes to (every shared step, every script's body): its version, in its name. */
const VERSION = sha1([...Object.values(LIBRARY), ...Object.values(DECLARED).map((d) => d.body)].join('\0')).slice(
  0,
  10,
);

/** The function library's name on the server; a different build of leasehold loads its own. */
export const LIBRARY_NAME = `leasehold_${VERSION}`;

type Named<T> = { readonly [K in keyof T]: T[K] extends Declared<infer Q, infer R> ? ScriptCall<Q, R> : never };

/** One script per state change; each file's header documents its KEYS, ARGV and every return code. */
export const SCRIPTS: Named<typeof DECLARED> = Object.freeze(
  Object.fromEntries(
    Object.entries(DECLARED).map(([key, d]) => [
      key,
      Object.freeze({ ...d, fn: `${LIBRARY_NAME}_${d.name.replace(/-/g, '_')}` }),
    ]),
  ) as Named<typeof DECLARED>,
);

const FLAGS: Readonly<Record<Access, string>> = {
  write: '{}',
  read: "{'no-writes'}",
  free: "{'allow-oom'}",
  scan: "{'no-writes', 'allow-cross-slot-keys'}",
};

/**
 * Every script as one Redis Functions library (Redis 7 and later): the shared steps defined once,
 * each script a function of (KEYS, ARGV) with its own text as the body. FCALL skips what EVALSHA
 * does on every call (look the script up, build the KEYS and ARGV globals), and a function library
 * is replicated and persisted with the data, so a promoted replica or a restarted server has it.
 */
export const LIBRARY_SOURCE = [
  `#!lua name=${LIBRARY_NAME}`,
  ...Object.values(LIBRARY).map((lib) => lib.trimEnd()),
  ...Object.values(SCRIPTS).map((s: Script) => {
    const body = bodyFunction(s.body);
    // A body that changes records is defined once, and each call runs it through run_call.
    const callback = s.records ? `function(KEYS, ARGV) return run_call(${s.fn}, KEYS, ARGV) end` : body;
    return `${s.records ? `local ${s.fn} = ${body}\n` : ''}redis.register_function{function_name='${s.fn}', flags=${FLAGS[s.access]}, callback=${callback}}`;
  }),
].join('\n');
