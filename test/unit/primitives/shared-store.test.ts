import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, MemoryStore } from '../../../src/index.js';
import type { HandOff } from '../../../src/store/index.js';
import type { AdminStore, HandOn, SharedRequest, SharedStore, Store, StoreSettings } from '../../../src/store/port.js';
import { resolveStore } from '../../../src/store/registry.js';
import { storeSettings } from '../../../src/store/settings.js';
import { randomPrefix, waitFor } from '../../harness/index.js';
import { suiteRedis } from './redis-fixture.js';

/**
 * The shared holds' steps at the store port, on the MemoryStore and on a real redis-server, with
 * the same expectations: the semantics are one, whichever backend keeps them.
 */

type SharedBackend = Store & SharedStore & AdminStore;

const handOn: HandOn = { reservation: DEFAULTS.reservation, announce: false };

/** Each store's settings, under a prefix of its own. */
function settings(): StoreSettings {
  return storeSettings({
    prefix: randomPrefix(),
    instance: 'test',
    fenceRetention: 60_000,
    waiterLease: 5_000,
    handOn,
  });
}

function request(owner: string, limit: number, extra: Partial<SharedRequest> = {}): SharedRequest {
  return { owner, ttl: 30_000, limit, ...extra };
}

const redis = suiteRedis();

const BACKENDS: readonly [string, () => SharedBackend][] = [
  ['MemoryStore', () => new MemoryStore().bind(settings()) as SharedBackend],
  ['redis-server', () => resolveStore(redis.client(), { ...settings(), onError: () => {} }).store as SharedBackend],
];

describe.each(BACKENDS)('shared holds at the store port: %s', (_label, make) => {
  it('a semaphore admits `limit` holds, each with its own increasing token, and refuses one more', async () => {
    const store = make();
    const tokens: number[] = [];
    for (const owner of ['A', 'B', 'C']) {
      const reply = await store.acquireShared('pool', request(owner, 3));
      if (!reply.acquired) throw new Error(`${owner} refused`);
      tokens.push(reply.fence);
    }
    expect(tokens[1]).toBeGreaterThan(tokens[0] as number);
    expect(tokens[2]).toBeGreaterThan(tokens[1] as number);
    expect(await store.acquireShared('pool', request('D', 3))).toMatchObject({ acquired: false });
    // A re-sent acquire gets its own grant back.
    expect(await store.acquireShared('pool', request('B', 3))).toEqual({ acquired: true, fence: tokens[1] });
    const state = await store.inspectShared('pool');
    expect(state).toMatchObject({ mode: 'semaphore', limit: 3, reserved: [] });
    expect(state.holds.map((h) => h.owner).sort()).toEqual(['A', 'B', 'C']);
    expect(state.holds.map((h) => h.token).sort()).toEqual([...tokens].sort());
    // The lock is held: a mutex is refused, and the lock shows no single owner.
    expect(await store.acquire('pool', { owner: 'M', ttl: 1_000 })).toMatchObject({ acquired: false });
    expect(await store.inspect('pool')).toMatchObject({ owner: null });
    expect(await store.releaseShared('pool', 'A')).toBe('released');
    expect(await store.releaseShared('pool', 'A')).toBe('released');
    expect(await store.acquireShared('pool', request('D', 3))).toMatchObject({ acquired: true });
  });

  it('a limit other than the held one is told what the lock is held as', async () => {
    const store = make();
    expect(await store.acquireShared('s', request('A', 2))).toMatchObject({ acquired: true });
    expect(await store.acquireShared('s', request('B', 5))).toEqual({ acquired: false, heldAs: 2 });
    expect(await store.acquireShared('s', request('B', 0))).toEqual({ acquired: false, heldAs: 2 });
    expect(await store.releaseShared('s', 'A')).toBe('released');
    expect(await store.acquireShared('s', request('B', 0))).toMatchObject({ acquired: true });
    expect(await store.acquireShared('s', request('C', 2))).toEqual({ acquired: false, heldAs: 0 });
  });

  it('an expired permit is reclaimed on the store’s clock; extend keeps one', async () => {
    const store = make();
    expect(await store.acquireShared('e', request('A', 1, { ttl: 60 }))).toMatchObject({ acquired: true });
    expect(await store.acquireShared('e', request('B', 1))).toMatchObject({ acquired: false });
    await sleep(90);
    expect(await store.extendShared('e', 'A', 1_000)).toBe('expired');
    expect(await store.releaseShared('e', 'A')).toBe('expired');
    expect(await store.acquireShared('e', request('B', 1, { ttl: 60 }))).toMatchObject({ acquired: true });
    expect(await store.extendShared('e', 'B', 5_000)).toBe('extended');
    await sleep(90);
    expect(await store.acquireShared('e', request('C', 1))).toMatchObject({ acquired: false });
    expect((await store.inspectShared('e')).holds[0]?.pttl).toBeGreaterThan(4_000);
  });

  it('shared holds coexist; an exclusive holder excludes them and they exclude it', async () => {
    const store = make();
    expect(await store.acquireShared('rw', request('R1', 0))).toMatchObject({ acquired: true });
    expect(await store.acquireShared('rw', request('R2', 0))).toMatchObject({ acquired: true });
    expect(await store.acquire('rw', { owner: 'W', ttl: 1_000 })).toMatchObject({ acquired: false });
    expect(await store.release('rw', 'R1')).toBe('not-owner');
    expect(await store.releaseShared('rw', 'R1')).toBe('released');
    expect(await store.releaseShared('rw', 'R2')).toBe('released');
    expect(await store.acquire('rw', { owner: 'W', ttl: 1_000 })).toMatchObject({ acquired: true });
    expect(await store.acquireShared('rw', request('R3', 0))).toMatchObject({ acquired: false });
    expect(await store.extendShared('rw', 'R3', 1_000)).toBe('not-owner');
    expect(await store.inspectShared('rw')).toMatchObject({ mode: 'exclusive', holds: [] });
  });

  it('writers are not starved: once an exclusive waiter queues, later shared requests queue behind it', async () => {
    const store = make();
    const heard: HandOff[] = [];
    const unwatch = await store.watch('wp', (h) => {
      heard.push(h);
    });
    expect(await store.acquireShared('wp', request('R1', 0))).toMatchObject({ acquired: true });
    expect(await store.acquire('wp', { owner: 'W', ttl: 30_000, queue: 'join' })).toMatchObject({
      acquired: false,
    });
    expect(await store.acquireShared('wp', request('R2', 0, { queue: 'join' }))).toMatchObject({ acquired: false });
    expect(await store.acquireShared('wp', request('R3', 0, { queue: 'join' }))).toMatchObject({ acquired: false });
    // The last reader out hands the lock to the writer.
    expect(await store.releaseShared('wp', 'R1')).toBe('released');
    expect((await store.queued('wp', 5)).reserved?.owner).toBe('W');
    expect(await store.acquire('wp', { owner: 'W', ttl: 30_000, queue: 'member' })).toMatchObject({
      acquired: true,
    });
    // The writer out admits both readers at the head together, each told.
    expect(await store.release('wp', 'W')).toBe('released');
    expect(await store.inspectShared('wp')).toMatchObject({ mode: 'free', reserved: ['R2', 'R3'] });
    await waitFor(async () => heard.some((h) => h.woken === 'R3'), { timeout: 2_000 });
    expect(heard.map((h) => h.woken)).toEqual(['W', 'R2', 'R3']);
    expect(await store.acquire('wp', { owner: 'M', ttl: 1_000 })).toMatchObject({ acquired: false });
    expect(await store.acquireShared('wp', request('R3', 0, { queue: 'member' }))).toMatchObject({ acquired: true });
    expect(await store.inspectShared('wp')).toMatchObject({ mode: 'shared', reserved: ['R2'] });
    expect(await store.acquireShared('wp', request('R2', 0, { queue: 'member' }))).toMatchObject({ acquired: true });
    const state = await store.inspectShared('wp');
    expect(state.holds.map((h) => h.owner).sort()).toEqual(['R2', 'R3']);
    expect(state.reserved).toEqual([]);
    expect((await store.queued('wp', 5)).count).toBe(0);
    unwatch();
  });

  it('a freed permit is reserved for the first waiter; a waiter that leaves passes it on', async () => {
    const store = make();
    expect(await store.acquireShared('q', request('A', 1))).toMatchObject({ acquired: true });
    for (const owner of ['B', 'C']) {
      expect(await store.acquireShared('q', request(owner, 1, { queue: 'join' }))).toMatchObject({ acquired: false });
    }
    expect(await store.releaseShared('q', 'A')).toBe('released');
    expect(await store.inspectShared('q')).toMatchObject({ reserved: ['B'] });
    // Nobody barges past the reservation.
    expect(await store.acquireShared('q', request('X', 1))).toMatchObject({ acquired: false });
    await store.leaveShared('q', 'B');
    expect(await store.inspectShared('q')).toMatchObject({ reserved: ['C'] });
    expect(await store.acquireShared('q', request('C', 1, { queue: 'member' }))).toMatchObject({ acquired: true });
    expect((await store.queued('q', 5)).count).toBe(0);
  });

  it('a mutex of a semaphore’s name, and a semaphore of a name held exclusively, are told the kind it is held as', async () => {
    const store = make();
    expect(await store.acquireShared('mx', request('A', 2))).toMatchObject({ acquired: true });
    // Refused as another kind, and not queued: a permit stays free for the next semaphore request.
    expect(await store.acquire('mx', { owner: 'M', ttl: 30_000, queue: 'join' })).toEqual({
      acquired: false,
      heldAs: 2,
    });
    expect(await store.acquireShared('mx', request('B', 2))).toMatchObject({ acquired: true });
    expect(await store.acquire('plain', { owner: 'P', ttl: 30_000 })).toMatchObject({ acquired: true });
    expect(await store.acquireShared('plain', request('C', 2))).toEqual({ acquired: false, heldAs: -1 });
    // A read-write lock's shared request on it waits, as its exclusive mode is the mutex.
    expect(await store.acquireShared('plain', request('R', 0))).toMatchObject({
      acquired: false,
      pttl: expect.any(Number),
    });
  });
});
