import { describe, expect, it } from 'vitest';
import type { HandOff } from '../../../src/core/engine.js';
import {
  decodeFence,
  decodeLockRecord,
  decodeRun,
  decodeWaiter,
  encodeFence,
  encodeLockRecord,
  encodeWaiter,
  type FenceRecord,
  heldBy,
  type LockRecord,
  reservedFor,
  sharedBy,
  type WaiterEntry,
} from '../../../src/store/formats.js';
import type { HandOn } from '../../../src/store/port.js';
import { IORedisConnection, type IORedisLike } from '../../../src/store/redis/ioredis-adapter.js';
import { jobKeys, lockKeys } from '../../../src/store/redis/keys.js';
import { RedisStore } from '../../../src/store/redis/redis-store.js';
import { ioredis, suiteServer } from '../../faults/safety/fixture.js';
import { randomPrefix, waitFor } from '../../harness/index.js';

/**
 * The scripts write what src/store/formats.ts declares: each test runs real scripts through the
 * store's methods, reads the keys they wrote with plain commands, and decodes them with formats.ts.
 * Each value read is also encoded back to the very same text, so the Lua writer and the TypeScript
 * encoder (the memory store's) are held to one declaration.
 */

const TTL = 30_000;
const RETENTION = 60_000;
const WAITER_LEASE = 5_000;
/** Every store's hand-on: a release grants the lock outright to a waiter queued through its own store. */
const handOn: HandOn = { reservation: 1_000, announce: false, direct: true };

describe('kept values on a real redis-server', () => {
  const redis = suiteServer();

  /** Stores on one prefix (one per instance label), and reads of the raw keys of a lock name. */
  function setup() {
    const prefix = randomPrefix();
    const stores = new Map<string, RedisStore>();
    /** The store of the instance labelled `instance`: one per label, each its own connection and room. */
    const storeOf = (instance: string) => {
      let store = stores.get(instance);
      if (store === undefined) {
        const connection = new IORedisConnection(ioredis(redis.server.port) as unknown as IORedisLike, () => {});
        const settings = { prefix, instance, fenceRetention: RETENTION, waiterLease: WAITER_LEASE, handOn };
        store = new RedisStore(connection, settings);
        stores.set(instance, store);
      }
      return store;
    };
    const close = () => Promise.all([...stores.values()].map((s) => s.close()));
    const admin = redis.admin;
    const record = async (name: string): Promise<LockRecord | null> => {
      const raw = await admin.get(lockKeys(prefix, name).lock);
      if (raw === null) return null;
      expect(encodeLockRecord(decodeLockRecord(raw))).toBe(raw);
      return decodeLockRecord(raw);
    };
    /** The lease's state while it lasts (the test's clock is the server's). */
    const lock = async (name: string) => {
      const lease = (await record(name))?.lease;
      return lease && lease.end >= Date.now() ? lease.value : null;
    };
    const fenceRecord = async (raw: string | null): Promise<FenceRecord> => {
      if (raw === null) throw new Error('no fence record');
      expect(encodeFence(decodeFence(raw))).toBe(raw);
      return decodeFence(raw);
    };
    const fence = async (name: string) => {
      const kept = (await record(name))?.fence;
      if (!kept) throw new Error('no fence record');
      return kept;
    };
    const grant = async (name: string, owner: string) =>
      fenceRecord(await admin.hget(lockKeys(prefix, name).grants, owner));
    const waiter = async (name: string, owner: string): Promise<WaiterEntry> => {
      const raw = await admin.hget(lockKeys(prefix, name).alive, owner);
      if (raw === null) throw new Error(`no liveness entry for ${owner}`);
      expect(encodeWaiter(decodeWaiter(raw))).toBe(raw);
      return decodeWaiter(raw);
    };
    const queue = (name: string) => admin.zrange(lockKeys(prefix, name).waiters, 0, -1);
    return { prefix, admin, storeOf, close, lock, fence, grant, waiter, queue };
  }

  const request = (owner: string) => ({ owner, ttl: TTL });

  /** A server time read as the client's clock brackets it (one host: one clock). */
  function within(us: number, before: number, after: number): void {
    expect(Math.floor(us / 1000)).toBeGreaterThanOrEqual(before);
    expect(Math.floor(us / 1000)).toBeLessThanOrEqual(after);
  }

  it('a counter raise-fence lifted alone is its token, and inspect reports that token', async () => {
    const { storeOf, close, fence } = setup();
    const mine = storeOf('pod r');
    try {
      const raised = await mine.raiseFence('r', 12_345);
      expect(raised).toBeGreaterThanOrEqual(12_345);
      expect(await fence('r')).toEqual({ token: raised, grant: null, releasedBy: null });
      expect((await mine.inspect('r')).fence).toBe(raised);
    } finally {
      await close();
    }
  });

  it('an acquire, a queue, and releases that reserve the lock and grant it outright', async () => {
    const { storeOf, close, lock, fence, waiter, queue } = setup();
    const [mine, theirs] = [storeOf('pod w'), storeOf('pod x')];
    try {
      const before = Date.now();
      const a = await storeOf('pod a 1').acquire('m', request('A'));
      const after = Date.now();
      if (!a.acquired) throw new Error('not acquired');
      expect(await lock('m')).toEqual(heldBy('A'));
      const granted = await fence('m');
      expect(granted).toMatchObject({ token: a.fence, grant: { instance: 'pod a 1' }, releasedBy: null });
      within(granted.grant?.takenAtUs ?? 0, before, after);

      // W queues through its own store, X through another: the lock is flagged, each has its entry.
      const queuedAt = Date.now();
      expect(await mine.acquire('m', { ...request('W'), queue: 'join' })).toMatchObject({ acquired: false });
      expect(await theirs.acquire('m', { ...request('X'), queue: 'join' })).toMatchObject({ acquired: false });
      const queuedBy = Date.now();
      expect(await lock('m')).toEqual(heldBy('A', true));
      expect(await queue('m')).toEqual(['W', 'X']);
      const w = await waiter('m', 'W');
      expect(w).toMatchObject({ shared: null, direct: { ttl: TTL, retention: RETENTION, instance: 'pod w' } });
      expect(w.deadline).toBeGreaterThanOrEqual(queuedAt + WAITER_LEASE);
      expect(w.deadline).toBeLessThanOrEqual(queuedBy + WAITER_LEASE);
      const x = await waiter('m', 'X');
      expect(x.direct?.room).not.toBe(w.direct?.room);

      // A release through W's own store grants it the lock outright (W, watching there, answers
      // that it waits here): its grant is recorded, and A's release mark is kept after it (a
      // re-sent release still answers released).
      const stop = await mine.watch('m', (handOff) => handOff.woken === 'W');
      expect(await mine.release('m', 'A')).toBe('released');
      expect(await lock('m')).toEqual(heldBy('W', true));
      const handed = await fence('m');
      expect(handed).toMatchObject({ grant: { instance: 'pod w' }, releasedBy: 'A' });
      expect(handed.token).toBeGreaterThan(a.fence);
      expect(await queue('m')).toEqual(['X']);
      stop();

      // W's release through its store reserves the lock for X, who queued elsewhere.
      expect(await mine.release('m', 'W')).toBe('released');
      expect(await lock('m')).toEqual(reservedFor(['X']));
      expect(await fence('m')).toMatchObject({ token: handed.token, releasedBy: 'W' });
    } finally {
      await close();
    }
  });

  it('a hand-off names the waiter woken and the live ones of the four behind the next; a dead next is dropped, a dead one behind skipped', async () => {
    const { prefix, admin, storeOf, close, queue } = setup();
    const theirs = storeOf('pod q');
    // Whose liveness deadline is long past: a waiter that died (lib/hand-on.lua drops or skips it).
    const kill = (name: string, owner: string) => admin.hset(lockKeys(prefix, name).alive, owner, '1');
    const handOffOf = async (name: string, holder: string): Promise<HandOff> => {
      const heard: HandOff[] = [];
      const stop = await storeOf('pod watch').watch(name, (handOff) => {
        heard.push(handOff);
      });
      try {
        expect(await storeOf('pod h').release(name, holder)).toBe('released');
        await waitFor(() => heard.length > 0);
      } finally {
        stop();
      }
      expect(heard).toHaveLength(1);
      return heard[0] as HandOff;
    };
    try {
      for (const name of ['behind', 'next']) {
        expect(await storeOf('pod h').acquire(name, request('H'))).toMatchObject({ acquired: true });
        for (const w of ['W1', 'W2', 'W3', 'W4', 'W5', 'W6', 'W7']) {
          expect(await theirs.acquire(name, { ...request(w), queue: 'join' })).toMatchObject({ acquired: false });
        }
      }
      // W1 is woken; W2 is next; of the four behind it (W3 to W6), W3 died and is skipped, not dropped.
      await kill('behind', 'W3');
      expect(await handOffOf('behind', 'H')).toEqual({ woken: 'W1', next: ['W2', 'W4', 'W5'] });
      expect(await queue('behind')).toEqual(['W2', 'W3', 'W4', 'W5', 'W6', 'W7']);
      // W2, which would be next, died: it is dropped, and W3 is next with two live ones behind it.
      await kill('next', 'W2');
      expect(await handOffOf('next', 'H')).toEqual({ woken: 'W1', next: ['W3', 'W4', 'W5'] });
      expect(await queue('next')).toEqual(['W3', 'W4', 'W5', 'W6', 'W7']);
    } finally {
      await close();
    }
  });

  it('a semaphore: the mark, each hold’s grant, a shared waiter, and the permit a release reserves for it', async () => {
    const { prefix, admin, storeOf, close, lock, fence, grant, waiter } = setup();
    const shared = (owner: string) => ({ ...request(owner), limit: 2 });
    try {
      const s1 = await storeOf('pod 1').acquireShared('s', shared('S1'));
      const s2 = await storeOf('pod 2').acquireShared('s', shared('S2'));
      if (!s1.acquired || !s2.acquired) throw new Error('not acquired');
      expect(await lock('s')).toEqual(sharedBy(2));
      expect(await grant('s', 'S1')).toMatchObject({ token: s1.fence, grant: { instance: 'pod 1' }, releasedBy: null });
      expect(await grant('s', 'S2')).toMatchObject({ token: s2.fence, grant: { instance: 'pod 2' }, releasedBy: null });
      // The counter records the latest grant.
      expect(await fence('s')).toMatchObject({ token: s2.fence, grant: { instance: 'pod 2' } });

      expect(await storeOf('pod 3').acquireShared('s', { ...shared('S3'), queue: 'join' })).toMatchObject({
        acquired: false,
      });
      expect(await lock('s')).toEqual(sharedBy(2, true));
      expect(await waiter('s', 'S3')).toMatchObject({ shared: 2, direct: null });

      // S1's release reserves its permit for S3: a hold without a grant until S3 comes.
      expect(await storeOf('pod 1').releaseShared('s', 'S1')).toBe('released');
      const holds = lockKeys(prefix, 's').holds;
      expect(Number(await admin.zscore(holds, 'S1'))).toBe(0);
      expect(Number(await admin.zscore(holds, 'S3'))).toBeGreaterThan(0);
      expect(await admin.hget(lockKeys(prefix, 's').grants, 'S3')).toBeNull();
      const s3 = await storeOf('pod 3').acquireShared('s', { ...shared('S3'), queue: 'member' });
      if (!s3.acquired) throw new Error('not acquired');
      expect(await grant('s', 'S3')).toMatchObject({ token: s3.fence, grant: { instance: 'pod 3' } });
      // The mark of waiters stays until the lock is free again.
      expect(await lock('s')).toEqual(sharedBy(2, true));
    } finally {
      await close();
    }
  });

  it('a read-write lock: shared holds, an exclusive waiter behind them, and the lock reserved for it', async () => {
    const { storeOf, close, lock, waiter } = setup();
    const [mine, theirs] = [storeOf('reader'), storeOf('writer')];
    try {
      const r = await mine.acquireShared('rw', { ...request('R'), limit: 0 });
      expect(r).toMatchObject({ acquired: true });
      expect(await lock('rw')).toEqual(sharedBy(0));
      expect(await theirs.acquire('rw', { ...request('E'), queue: 'join' })).toMatchObject({
        acquired: false,
      });
      expect(await lock('rw')).toEqual(sharedBy(0, true));
      expect(await waiter('rw', 'E')).toMatchObject({ shared: null, direct: { instance: 'writer' } });
      expect(await mine.releaseShared('rw', 'R')).toBe('released');
      expect(await lock('rw')).toEqual(reservedFor(['E']));
    } finally {
      await close();
    }
  });

  it('a job tick: the run record as claimed, then as finished', async () => {
    const { prefix, admin, storeOf, close, lock, fence } = setup();
    const mine = storeOf('pod j');
    const keys = jobKeys(prefix, 'job');
    const tick = Date.now() - 1_000;
    const claim = { ttl: TTL, instance: 'pod j', historyLimit: 5, clockTolerance: 1_000 };
    try {
      const claimed = await mine.claimTick('job', { owner: 'J', tick, ...claim });
      if (!claimed.claimed) throw new Error('not claimed');
      expect(await lock('job')).toEqual(heldBy('J'));
      expect(await fence('job')).toMatchObject({ token: claimed.fence, grant: { instance: 'pod j' } });
      expect(await admin.get(keys.tick)).toBe(String(tick));
      const running = (await admin.zrange(keys.runs, 0, -1)).map(decodeRun);
      expect(running).toEqual([
        {
          fence: claimed.fence,
          tick,
          instance: 'pod j',
          startedAt: claimed.startedAt,
          finishedAt: null,
          outcome: 'running',
          error: null,
        },
      ]);

      const finish = { owner: 'J', fence: claimed.fence, startedAt: claimed.startedAt, lockAtLeastFor: 0 };
      const before = Date.now();
      expect(await mine.finishTick('job', { ...finish, outcome: 'failed', error: 'boom' })).toEqual({
        lease: 'released',
      });
      const after = Date.now();
      const [finished] = (await admin.zrange(keys.runs, 0, -1)).map(decodeRun);
      expect(finished).toMatchObject({
        ...running[0],
        outcome: 'failed',
        error: 'boom',
        finishedAt: expect.any(Number),
      });
      expect(finished?.finishedAt).toBeGreaterThanOrEqual(before);
      expect(finished?.finishedAt).toBeLessThanOrEqual(after);
      expect(await lock('job')).toBeNull();
      expect(await fence('job')).toMatchObject({ token: claimed.fence, releasedBy: 'J' });
    } finally {
      await close();
    }
  });
});
