import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { DEFAULTS, Leasehold, MemoryStore } from '../../../src/index.js';
import { storeSettings } from '../../../src/store/settings.js';
import { randomPrefix, waitFor } from '../../harness/index.js';

/**
 * Dead waiters on the memory store, as the Redis scripts treat them (test/faults/safety/waiters.test.ts
 * kills real processes there). A waiter that joined the queue and never tries again is dead: here it
 * is an owner queued by a call on the store itself that nobody repeats.
 */
describe('memory store: dead waiters', () => {
  const opened: Leasehold[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((locks) => locks.close()));
  });

  function setup() {
    const store = new MemoryStore();
    const prefix = randomPrefix();
    const instance = () => {
      const locks = new Leasehold(store, { prefix });
      opened.push(locks);
      return locks;
    };
    const scoped = store.bind(storeSettings({ prefix }));
    const dead = store.bind(storeSettings({ prefix, instance: 'dead' }));
    const queued = async (name: string) => (await scoped.queued(name, 0)).count;
    /** A waiter that queues once and never tries again. */
    const deadWaiter = (name: string, owner: string) => dead.acquire(name, { owner, ttl: 10_000, queue: 'join' });
    return { instance, queued, deadWaiter };
  }

  it('dead waiters skipped once leave the queue: three at the head cost the live waiter behind them three reservations in all, over three releases', async () => {
    const { instance, queued, deadWaiter } = setup();
    const holder = instance();
    const live = instance();
    let held = await holder.acquire('skip', { ttl: 30_000 });
    for (const owner of ['dead-1', 'dead-2', 'dead-3']) {
      expect(await deadWaiter('skip', owner)).toMatchObject({ acquired: false });
    }
    let waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued('skip')) === 4);
    let extra = 0;
    for (let round = 0; round < 3; round++) {
      // Let the live waiter settle into its park: its fallback timer is the holder's lease, capped.
      await sleep(300);
      await held.release();
      const released = now();
      const lock = await waiting;
      extra += now() - released;
      // The first release named the dead waiters after the one it woke; none came in its turn.
      if (round === 0) expect(await queued('skip')).toBe(0);
      await lock.release();
      if (round === 2) break;
      held = await holder.acquire('skip', { ttl: 30_000, wait: 0 });
      const before = await queued('skip');
      waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
      await waitFor(async () => (await queued('skip')) === before + 1);
    }
    // One reservation each (the live waiter is third after the one woken), once.
    expect(extra).toBeGreaterThanOrEqual(3 * DEFAULTS.reservation);
    expect(extra).toBeLessThan(3 * (DEFAULTS.reservation + DEFAULTS.expiryMargin) + 2 * DEFAULTS.reservation);
  });

  it('a dead exclusive waiter keeps new shared requests out two reservations at most after its last try, not its whole liveness, while a reader holds', async () => {
    const { instance, queued, deadWaiter } = setup();
    const reader = await instance().acquire('rw', { mode: 'shared', ttl: 30_000 });
    expect(await deadWaiter('rw', 'dead-writer')).toMatchObject({ acquired: false });
    const started = now();
    const late = await instance().acquire('rw', { mode: 'shared', ttl: 30_000, wait: 20_000 });
    // Silent for a reservation, the writer is asked whether it is alive; never answering, it is dead
    // one reservation later: long before its liveness (DEFAULTS.waiterLease) would run out, and
    // before the request's fallback timer (maxPark) fires.
    expect(now() - started).toBeLessThan(DEFAULTS.reservation + DEFAULTS.maxPark / 2);
    expect(await queued('rw')).toBe(0);
    expect(await reader.release()).toBe(true);
    expect(await late.release()).toBe(true);
  });

  it('a live exclusive waiter asked whether it is alive answers each time, and keeps new shared requests out until it has had the lock', async () => {
    const { instance, queued } = setup();
    const reader = await instance().acquire('rw', { mode: 'shared', ttl: 30_000 });
    const writing = instance().acquire('rw', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued('rw')) === 1);
    let admitted = false;
    const late = instance()
      .acquire('rw', { mode: 'shared', ttl: 30_000, wait: 20_000 })
      .then((lock) => {
        admitted = true;
        return lock;
      });
    // The writer, once silent for a reservation, is asked whether it is alive, and each time it
    // answers in time.
    await sleep(6 * (DEFAULTS.reservation + DEFAULTS.expiryMargin));
    expect(admitted).toBe(false);
    expect(await queued('rw')).toBe(2);
    expect(await reader.release()).toBe(true);
    const writer = await writing;
    expect(admitted).toBe(false);
    expect(await writer.release()).toBe(true);
    expect(await (await late).release()).toBe(true);
  });
});
