import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { DEFAULTS, ErrorCode, Leasehold, type Lock, LockError } from '../../../src/index.js';
import type { HandOn } from '../../../src/store/port.js';
import type { RedisConnection } from '../../../src/store/redis/connection.js';
import { IORedisConnection, type IORedisLike } from '../../../src/store/redis/ioredis-adapter.js';
import { jobKeys, lockKeys } from '../../../src/store/redis/keys.js';
import { RedisStore } from '../../../src/store/redis/redis-store.js';
import { boundArgs, SCRIPTS, type ScriptCall } from '../../../src/store/redis/scripts.js';
import { storeSettings } from '../../../src/store/settings.js';
import { ioredis, suiteServer } from '../../faults/safety/fixture.js';
import { randomPrefix, waitFor } from '../../harness/index.js';
import { watchingScripts } from './script-calls.js';

/**
 * Each Lua script's header is its contract: KEYS, ARGV and every return code. These tests hold the
 * declarations in scripts.ts to it: the KEYS and ARGV a declaration builds are as many as the header
 * lists; every code the header documents decodes, and a code it does not document is a store error;
 * and on a real redis-server every documented code is produced, and nothing else.
 */

type AnyScript = ScriptCall<never, unknown>;
const ALL = Object.values(SCRIPTS) as readonly AnyScript[];

/** One alternative of a header's `returns`: its return code (null for a reply without one) and its parts. */
interface Documented {
  readonly code: number | null;
  /** The reply's parts as the header names them ('token', '0', …); null for a plain value. */
  readonly parts: readonly string[] | null;
}

/** The top-level parts of a `{a, {b...}, c}` reply as the header writes it. */
function partsOf(text: string): string[] {
  const inner = text.slice(1, -1);
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of inner) {
    if (ch === '{') depth++;
    if (ch === '}') depth--;
    if (ch === ',' && depth === 0) {
      parts.push(current.trim());
      current = '';
    } else current += ch;
  }
  parts.push(current.trim());
  return parts;
}

/** The braced reply at the start of `text` (nested braces included). */
function braced(text: string): string {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '{') depth++;
    if (text[i] === '}' && --depth === 0) return text.slice(0, i + 1);
  }
  throw new Error(`unbalanced braces in ${text}`);
}

const INTEGER = /^-?\d+$/;

/**
 * The return alternatives a script's header documents: the `-- returns` line, then each comment
 * line whose text starts in the same column with a reply (`{…}` or an integer); other lines in
 * that column, or further in, continue the description.
 */
function documented(body: string): Documented[] {
  const lines = body.split('\n');
  const first = lines.findIndex((l) => l.startsWith('-- returns'));
  if (first < 0) throw new Error('no returns in the header');
  const column = (lines[first] as string).search(/(?<=^-- returns\s+)\S/);
  const found: Documented[] = [];
  for (let i = first; i < lines.length && (lines[i] as string).startsWith('--'); i++) {
    const text = (lines[i] as string).slice(column);
    if (i > first && (!/^\s*$/.test((lines[i] as string).slice(2, column)) || !/^[{\d-]/.test(text))) continue;
    if (text.startsWith('{')) {
      const parts = partsOf(braced(text));
      found.push({ code: INTEGER.test(parts[0] as string) ? Number(parts[0]) : null, parts });
    } else {
      const word = text.split(/\s/)[0] as string;
      found.push({ code: INTEGER.test(word) ? Number(word) : null, parts: null });
    }
  }
  return found;
}

/** The highest KEYS[n] (or ARGV[n]) the header documents. */
function documentedCount(body: string, what: 'KEYS' | 'ARGV'): number {
  const indices = [...body.matchAll(new RegExp(`^-- ${what}\\[(\\d+)\\]`, 'gm'))].map((m) => Number(m[1]));
  return indices.length === 0 ? 0 : Math.max(...indices);
}

/** A reply as the header shows it: integer literals as they are, every named part a digit string (as a client returns a bulk string). */
function sample(alternative: Documented): unknown {
  if (alternative.parts === null) return alternative.code ?? 7;
  return alternative.parts.map((p) => (INTEGER.test(p) ? Number(p) : '7'));
}

/** The real server's store hands a freed lock on by reserving it, never granting it outright. */
const handOn: HandOn = { reservation: DEFAULTS.reservation, announce: false };

/** A request for each script, to count the KEYS and ARGV its declaration builds. */
const REQUESTS: Readonly<Record<string, unknown>> = {
  acquire: { owner: 'o', ttl: 1_000, queue: 'member' },
  release: 'o',
  free: 'o',
  leave: 'o',
  extend: { owner: 'o', ttl: 1_000 },
  'raise-fence': 1,
  inspect: undefined,
  'claim-tick': {
    owner: 'o',
    ttl: 1_000,
    tick: 1,
    instance: 'i',
    historyLimit: 5,
    clockTolerance: 1_000,
  },
  'finish-tick': {
    owner: 'o',
    fence: 1,
    startedAt: 1,
    outcome: 'ok',
    error: null,
    lockAtLeastFor: 0,
  },
  'read-job': 5,
  'forget-job': undefined,
  'force-release': undefined,
  queued: 5,
  'scan-locks': { cursor: '0', pattern: 'p:{*}', count: 10 },
  'acquire-shared': {
    owner: 'o',
    ttl: 1_000,
    limit: 2,
    queue: 'join',
  },
  'release-shared': 'o',
  'leave-shared': 'o',
  'extend-shared': { owner: 'o', ttl: 1_000 },
  'inspect-shared': undefined,
};

describe('each script’s declaration matches its header', () => {
  it('every script is covered here, with a header that documents its replies', () => {
    expect(ALL.map((s) => s.name).sort()).toEqual(Object.keys(REQUESTS).sort());
    for (const script of ALL) expect(documented(script.body).length, script.name).toBeGreaterThan(0);
  });

  it.each(ALL.map((s) => [s.name, s] as const))('%s: KEYS and ARGV as many as the header lists', (_name, script) => {
    const input = script.input('p', 'n', REQUESTS[script.name] as never, 'PUBLISH', boundArgs(storeSettings()));
    expect(input.keys.length).toBe(documentedCount(script.body, 'KEYS'));
    expect(input.args.length).toBe(documentedCount(script.body, 'ARGV'));
    // Every key of one call shares the lock's hash slot.
    for (const key of input.keys) expect(key.startsWith('p:{n}')).toBe(true);
  });

  it.each(ALL.map((s) => [s.name, s] as const))(
    '%s: every documented code decodes; an undocumented one is a store error',
    (_name, script) => {
      const alternatives = documented(script.body);
      const codes = alternatives.map((a) => a.code).filter((c): c is number => c !== null);
      if (script.reply.codes === null) {
        // A reply without a code: one shape, and no code to decode.
        expect(codes).toEqual([]);
        expect(alternatives).toHaveLength(1);
        return;
      }
      // A script whose reply may be a positive integer alone (acquire's token) documents that
      // alternative without a code; every other alternative has one.
      const plain = script.reply.positive ? 1 : 0;
      expect(codes.length, 'every alternative has a code').toBe(alternatives.length - plain);
      expect([...codes].sort()).toEqual([...script.reply.codes].sort());
      for (const alternative of alternatives) {
        expect(() => script.reply.decode(sample(alternative)), `code ${alternative.code}`).not.toThrow();
      }
      if (plain) for (const bad of [0, -7, '']) expect(() => script.reply.decode(bad)).toThrow(LockError);
      for (const code of [Math.max(...codes) + 1, Math.min(...codes) - 1, 99]) {
        const shape = alternatives.find((a) => a.code !== null)?.parts === null ? code : [code, '7', '7', '7'];
        const error = (() => {
          try {
            script.reply.decode(shape);
          } catch (e) {
            return e;
          }
          return undefined;
        })();
        expect(error).toBeInstanceOf(LockError);
        expect((error as LockError).code).toBe(ErrorCode.STORE_ERROR);
        expect((error as Error).message).toContain(`unexpected reply from ${script.name}`);
      }
    },
  );
});

/** The raw replies of every script run on a connection, by script name. */
function recording(connection: RedisConnection): { connection: RedisConnection; replies: Map<string, unknown[]> } {
  const replies = new Map<string, unknown[]>();
  const wrapped = watchingScripts(connection, ({ name, reply }) => {
    reply.then(
      (value) => replies.set(name, [...(replies.get(name) ?? []), value]),
      () => undefined,
    );
  });
  return { connection: wrapped, replies };
}

/** The code of a raw reply: the reply itself, or its first element. */
const codeOf = (reply: unknown) => Number(Array.isArray(reply) ? reply[0] : reply);

describe('on a real redis-server', () => {
  const redis = suiteServer();

  it('every documented code of every script is produced, decodes, and no other code comes back', async () => {
    const client = ioredis(redis.server.port);
    const { connection, replies } = recording(new IORedisConnection(client as unknown as IORedisLike, () => {}));
    const settings = { prefix: randomPrefix(), instance: 'test', fenceRetention: 60_000, waiterLease: 5_000, handOn };
    const store = new RedisStore(connection, settings);
    try {
      const lease = { ttl: 30_000 };
      // acquire: acquired, refused (and queued); release: released, released again, expired, not-owner.
      expect(await store.acquire('a', { owner: 'A', ...lease })).toMatchObject({ acquired: true });
      expect(await store.acquire('a', { owner: 'W', ...lease, queue: 'join' })).toMatchObject({ acquired: false });
      expect(await store.release('a', 'B')).toBe('not-owner');
      expect(await store.release('a', 'A')).toBe('released');
      expect(await store.release('a', 'A')).toBe('released');
      expect(await store.release('never', 'A')).toBe('expired');
      // free: a name whose release here woke nobody is freed by free.lua; with a waiter (queued
      // through another store) flagged behind its lease, free.lua frees nothing and release.lua
      // hands the lock on.
      expect(await store.acquire('q', { owner: 'A', ...lease })).toMatchObject({ acquired: true });
      expect(await store.release('q', 'A')).toBe('released');
      expect(await store.acquire('q', { owner: 'A', ...lease })).toMatchObject({ acquired: true });
      expect(await store.release('q', 'A')).toBe('released');
      expect(await store.acquire('q', { owner: 'A', ...lease })).toMatchObject({ acquired: true });
      const other = new RedisStore(connection, settings);
      expect(await other.acquire('q', { owner: 'V', ...lease, queue: 'join' })).toMatchObject({ acquired: false });
      expect(await store.release('q', 'A')).toBe('released');
      expect((await store.queued('q', 5)).reserved?.owner).toBe('V');
      await store.leave('q', 'V');
      // leave: the waiter the release handed the lock to passes it on; another only leaves the queue.
      expect((await store.queued('a', 5)).reserved?.owner).toBe('W');
      await store.leave('a', 'W');
      await store.leave('a', 'X');
      expect((await store.queued('a', 5)).reserved).toBeNull();
      // extend: extended, not-owner, expired.
      expect(await store.acquire('e', { owner: 'A', ...lease })).toMatchObject({ acquired: true });
      expect(await store.extend('e', 'A', 30_000)).toBe('extended');
      expect(await store.extend('e', 'B', 30_000)).toBe('not-owner');
      expect(await store.extend('never', 'A', 30_000)).toBe('expired');
      // force-release: released, then not-held.
      expect(await store.forceRelease('e')).toMatchObject({ result: 'released', owner: 'A', woken: null });
      expect(await store.forceRelease('e')).toEqual({ result: 'not-held' });

      const claim = { ttl: 30_000, instance: 'test', historyLimit: 5, clockTolerance: 1_000 };
      const finish = { outcome: 'ok' as const, error: null };
      // claim-tick: claimed, locked, already-ran, clock-skew.
      const tick = Date.now() - 60_000;
      const c1 = await store.claimTick('job', { owner: 'J1', ...claim, tick });
      if (!c1.claimed) throw new Error('the first claim was refused');
      expect(await store.claimTick('job', { owner: 'J2', ...claim, tick: tick + 1 })).toMatchObject({
        reason: 'locked',
      });
      expect(await store.claimTick('job', { owner: 'J2', ...claim, tick: tick + 3_600_000 })).toMatchObject({
        reason: 'clock-skew',
      });
      // finish-tick: kept (lockAtLeastFor not over), then released.
      expect(await store.finishTick('job', { owner: 'J1', ...finish, ...c1, lockAtLeastFor: 60_000 })).toMatchObject({
        lease: 'kept',
      });
      expect(await store.finishTick('job', { owner: 'J1', ...finish, ...c1, lockAtLeastFor: 0 })).toEqual({
        lease: 'released',
      });
      expect(await store.claimTick('job', { owner: 'J2', ...claim, tick })).toMatchObject({ reason: 'already-ran' });
      // finish-tick: expired (the lease was deleted under it), not-owner (another owner took it since).
      const c2 = await store.claimTick('job', { owner: 'J2', ...claim, tick: null });
      if (!c2.claimed) throw new Error('the second claim was refused');
      await store.forceRelease('job');
      expect(await store.finishTick('job', { owner: 'J2', ...finish, ...c2, lockAtLeastFor: 0 })).toEqual({
        lease: 'expired',
      });
      const c3 = await store.claimTick('job', { owner: 'J3', ...claim, tick: null });
      if (!c3.claimed) throw new Error('the third claim was refused');
      await store.forceRelease('job');
      expect(await store.acquire('job', { owner: 'M', ...lease })).toMatchObject({ acquired: true });
      expect(await store.finishTick('job', { owner: 'J3', ...finish, ...c3, lockAtLeastFor: 0 })).toEqual({
        lease: 'not-owner',
      });

      // The scripts without a code: their replies decode too.
      expect(await store.raiseFence('a', 1)).toBeGreaterThan(1);
      expect(await store.inspect('job')).toMatchObject({ owner: 'M' });
      expect((await store.readJob('job', 5)).runs.map((r) => r.fence)).toEqual([c3.fence, c2.fence, c1.fence]);
      await store.forgetJob('job');
      expect(await store.readJob('job', 5)).toMatchObject({ lastTick: null, runs: [], held: true });
      const names: string[] = [];
      for await (const name of store.scanLocks('*', 100)) names.push(name);
      expect(names).toEqual(['job']);

      // The shared holds' scripts: acquired, refused (and queued), held as another kind; extended,
      // expired, not-owner; released, expired, not-owner; a reserved permit passed on, or only left.
      const shared = { ...lease, limit: 1 };
      expect(await store.acquireShared('h', { owner: 'S1', ...shared })).toMatchObject({ acquired: true });
      expect(await store.acquireShared('h', { owner: 'S2', ...shared, queue: 'join' })).toMatchObject({
        acquired: false,
      });
      expect(await store.acquireShared('h', { owner: 'S3', ...shared, limit: 2 })).toMatchObject({ heldAs: 1 });
      // A mutex of a semaphore's name is another kind of lock, and the reverse.
      expect(await store.acquire('h', { owner: 'M9', ...lease, queue: 'join' })).toEqual({
        acquired: false,
        heldAs: 1,
      });
      expect(await store.acquireShared('job', { owner: 'S4', ...shared })).toEqual({ acquired: false, heldAs: -1 });
      expect(await store.extendShared('h', 'S1', 30_000)).toBe('extended');
      expect(await store.extendShared('h', 'S9', 30_000)).toBe('expired');
      expect(await store.releaseShared('h', 'S1')).toBe('released');
      expect((await store.inspectShared('h')).reserved).toEqual(['S2']);
      await store.leaveShared('h', 'S2');
      await store.leaveShared('h', 'S9');
      expect(await store.releaseShared('h', 'S9')).toBe('expired');
      expect(await store.extendShared('job', 'S9', 30_000)).toBe('not-owner');
      expect(await store.releaseShared('job', 'S9')).toBe('not-owner');

      for (const script of ALL) {
        const seen = replies.get(script.name) ?? [];
        expect(seen.length, `${script.name} ran`).toBeGreaterThan(0);
        if (script.reply.codes === null) continue;
        // A positive integer alone (acquire's token) counts as the alternative without a code.
        const plain = (r: unknown) => script.reply.positive === true && !Array.isArray(r);
        const codes = [...new Set(seen.map((r) => (plain(r) ? 'plain' : codeOf(r))))].sort();
        expect(codes, script.name).toEqual([...script.reply.codes, ...(script.reply.positive ? ['plain'] : [])].sort());
      }
    } finally {
      await store.close();
      client.disconnect();
    }
  });

  it('a job lock ended by finish-tick is handed on to a queued mutex waiter of the same name, as a release hands it on', async () => {
    const prefix = randomPrefix();
    const listener = ioredis(redis.server.port);
    const clients = [ioredis(redis.server.port), ioredis(redis.server.port)];
    const [jobs, mutex] = clients.map((client) => new Leasehold(client, { prefix })) as [Leasehold, Leasehold];
    const published: string[] = [];
    try {
      const channel = lockKeys(prefix, 'nightly').channel;
      listener.on('message', (_channel: string, message: string) => published.push(message));
      await listener.subscribe(channel);
      let waiting: Promise<Lock> | undefined;
      const result = await jobs.runOnce('nightly', async () => {
        waiting = mutex.acquire('nightly', { ttl: 10_000, wait: 10_000 });
        await waitFor(async () => (await redis.admin.zcard(jobKeys(prefix, 'nightly').waiters)) === 1, {
          message: 'the mutex waiter queued on the job’s lock',
        });
        // Let the waiter park: its fallback timer is the job's remaining lease, capped at maxPark.
        await sleep(300);
        return 'ran';
      });
      expect(result).toEqual({ ran: true, value: 'ran' });
      const finished = now();
      const lock = await (waiting as Promise<Lock>);
      // Woken by the hand-off, not by its fallback timer.
      expect(now() - finished).toBeLessThan(DEFAULTS.maxPark / 2);
      // The hand-off named the waiter, exactly as a release of a mutex names it.
      await waitFor(() => published.length > 0);
      expect(published).toEqual([lock.owner]);
      expect(await lock.release()).toBe(true);
    } finally {
      await Promise.all([jobs.close(), mutex.close()]);
      for (const client of [listener, ...clients]) client.disconnect();
    }
  });
});
