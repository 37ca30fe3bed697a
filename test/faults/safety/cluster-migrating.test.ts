import { Cluster } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { Leasehold, type Lock } from '../../../src/index.js';
import { lockKeys } from '../../../src/store/redis/keys.js';
import { type RedisCluster, type RedisServer, randomPrefix, slotOf, startCluster } from '../../harness/index.js';
import { deferrals } from './fixture.js';

/**
 * A slot in the middle of a migration, its keys still on the source: Redis deletes a key of
 * members (a queue, its liveness hash, a semaphore's holds, a job's history) with its last member,
 * and then refuses a script's command on it on the source ("non local key"), though every key the
 * script declared was there when it began. Each call below empties such a key and then reads or
 * writes it, as a live migration can catch it (test/faults/cluster-ha.test.ts found one such path);
 * each must still answer as it does on a settled slot.
 */
describe('a slot being migrated: a call that empties a key reads it as gone, and never writes it anew', () => {
  let cluster: RedisCluster;
  /** The tests' own client, for raw reads and writes of a lock's keys. */
  let admin: Cluster;
  const defer = deferrals();
  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    admin = new Cluster(cluster.startupNodes);
  });
  afterAll(async () => {
    admin?.disconnect();
    await cluster?.stop();
  });

  /**
   * Put the slot of `name`'s keys into migration, nothing moved yet. The function returned ends
   * it: every key still on the source moves to the target, which then serves the slot (as a
   * live migration goes on). A call refused meanwhile with TRYAGAIN (its keys split between the
   * nodes) is sent again by the client, up to 16 times 100 ms apart: the finish must come within
   * that, and it takes a few ms.
   */
  async function migrating(prefix: string, name: string): Promise<() => Promise<void>> {
    const slot = slotOf(lockKeys(prefix, name).lock);
    const from = await cluster.masterOfSlot(slot);
    const to = cluster.masters.find((m) => m !== from) as RedisServer;
    const [fromId, toId] = await Promise.all([cluster.nodeId(from), cluster.nodeId(to)]);
    await to.command('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
    await from.command('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
    return async () => {
      const listed = await from.command('CLUSTER', 'GETKEYSINSLOT', String(slot), '1000');
      if (listed !== '') {
        await from.command('MIGRATE', to.host, String(to.port), '', '0', '5000', 'KEYS', ...listed.split('\n'));
      }
      for (const master of [to, from, ...cluster.masters.filter((m) => m !== to && m !== from)]) {
        await master.command('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
      }
    };
  }

  /** What the test's instances reported as `backendError` (a failed leave among them). */
  let backendErrors: string[] = [];
  beforeEach(() => {
    backendErrors = [];
  });

  function instance(prefix: string): Leasehold {
    const client = new Cluster(cluster.startupNodes);
    const locks = new Leasehold(client, { prefix });
    locks.on('backendError', ({ error, operation }) => backendErrors.push(`${operation}: ${error}`));
    defer(async () => {
      await locks.close();
      client.disconnect();
    });
    return locks;
  }

  /** Until `name`'s queue holds `n` waiters. */
  async function queued(prefix: string, name: string, n: number): Promise<void> {
    const deadline = Date.now() + 5_000;
    while ((await admin.zcard(lockKeys(prefix, name).waiters)) !== n) {
      if (Date.now() > deadline) throw new Error(`${name}: ${n} waiters never queued`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it.each([
    ['hands the lock to the last waiter, of another instance (a reservation)', 'm1', false],
    ['grants the lock outright to the last waiter, of its own instance', 'm2', true],
  ])('a release %s', async (_label, name, sameInstance) => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = sameInstance ? a : instance(prefix);
    const held = await a.acquire(name, { ttl: 10_000 });
    const waiting = b.acquire(name, { ttl: 10_000, wait: 10_000 });
    await queued(prefix, name, 1);
    const finish = await migrating(prefix, name);
    expect(await held.release()).toBe(true);
    await finish();
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await next.release()).toBe(true);
    expect(backendErrors).toEqual([]);
  });

  it('the last waiter takes a lock whose lease ran out, with nobody to hand it on', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    const held = await a.acquire('m10', { ttl: 1_000, autoExtend: false });
    const waiting = b.acquire('m10', { ttl: 10_000, wait: 10_000 });
    await queued(prefix, 'm10', 1);
    const finish = await migrating(prefix, 'm10');
    // Its retry when the lease ends takes the lock free and leaves the queue, its last entry.
    const next = await waiting;
    await finish();
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await next.release()).toBe(true);
    expect(await held.release()).toBe(false);
    expect(backendErrors).toEqual([]);
  });

  it('the last waiter, first in line, leaves', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    const held = await a.acquire('m3', { ttl: 10_000 });
    const gaveUp = new AbortController();
    const waiting = b.acquire('m3', { ttl: 10_000, wait: 10_000, signal: gaveUp.signal });
    await queued(prefix, 'm3', 1);
    const finish = await migrating(prefix, 'm3');
    gaveUp.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    await queued(prefix, 'm3', 0);
    // Its leave ran on the source (a backendError would say otherwise).
    await finish();
    expect(await held.release()).toBe(true);
    expect(backendErrors).toEqual([]);
  });

  it('a semaphore: a permit given back goes to the last waiter', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    const one = await a.acquire('m4', { ttl: 10_000, limit: 2 });
    const two = await a.acquire('m4', { ttl: 10_000, limit: 2 });
    const waiting = b.acquire('m4', { ttl: 10_000, wait: 10_000, limit: 2 });
    await queued(prefix, 'm4', 1);
    const finish = await migrating(prefix, 'm4');
    expect(await one.release()).toBe(true);
    await finish();
    const three = await waiting;
    expect(await two.release()).toBe(true);
    expect(await three.release()).toBe(true);
    expect(backendErrors).toEqual([]);
  });

  it('a semaphore taken afresh by the waiter its last permit was handed to', async () => {
    const prefix = randomPrefix();
    const [a, b, c] = [instance(prefix), instance(prefix), instance(prefix)];
    const held = await a.acquire('m5', { ttl: 10_000, limit: 1 });
    const first = b.acquire('m5', { ttl: 10_000, wait: 10_000, limit: 1 });
    await queued(prefix, 'm5', 1);
    const second = c.acquire('m5', { ttl: 10_000, wait: 10_000, limit: 1 });
    await queued(prefix, 'm5', 2);
    const finish = await migrating(prefix, 'm5');
    expect(await held.release()).toBe(true);
    // Its holds start afresh on the source: the released permit's mark goes as its own is written.
    const next = await first;
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    await finish();
    expect(await next.release()).toBe(true);
    const last = await second;
    expect(await last.release()).toBe(true);
    expect(backendErrors).toEqual([]);
  });

  /**
   * An instance on its own client whose release channel's subscription lingers after its last
   * waiter, its slot moved under it; what it reported as `backendError` goes to `reported`.
   */
  async function movedUnderLingering(name: string) {
    const prefix = randomPrefix();
    const client = new Cluster(cluster.startupNodes);
    const locks = new Leasehold(client, { prefix });
    const reported: string[] = [];
    locks.on('backendError', ({ error, operation }) => reported.push(`${operation}: ${error}`));
    defer(() => client.disconnect());
    defer(() => locks.close());
    const held = await locks.acquire(name, { ttl: 10_000 });
    const waiting = locks.acquire(name, { ttl: 10_000, wait: 10_000 });
    await queued(prefix, name, 1);
    expect(await held.release()).toBe(true);
    expect(await (await waiting).release()).toBe(true);
    const slot = slotOf(lockKeys(prefix, name).lock);
    const from = await cluster.masterOfSlot(slot);
    await cluster.migrateSlot(slot, cluster.masters.find((m) => m !== from) as RedisServer);
    return { client, locks, reported };
  }

  it('an open instance drops a subscription that moved with its slot, once it lingered, reporting nothing', async () => {
    const { reported } = await movedUnderLingering('m6');
    // The idle subscriber closes as its last unsubscribe is on its way; a linger late by as
    // much again under load still lands within this wait (a later one only leaves nothing to see).
    await new Promise((resolve) => setTimeout(resolve, 2 * DEFAULTS.subscriptionLinger));
    expect(reported).toEqual([]);
  });

  it('a closed instance whose subscription moved with its slot reports nothing when its client ends', async () => {
    const { client, locks, reported } = await movedUnderLingering('m9');
    await locks.close();
    client.disconnect();
    // The client's end fails what it still had to send within a turn or two of its event loop.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(reported).toEqual([]);
  });

  it("a job's first run is recorded, and its lock handed to the waiter behind it", async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    let waiting: Promise<Lock> | undefined;
    let finish: (() => Promise<void>) | undefined;
    const run = await a.runOnce(
      'm7',
      async () => {
        waiting = b.acquire('m7', { ttl: 10_000, wait: 10_000 });
        await queued(prefix, 'm7', 1);
        finish = await migrating(prefix, 'm7');
        return 'ran';
      },
      { tick: Date.now() },
    );
    // Its record was the history's only one: written anew before the old one goes.
    expect(run).toEqual({ ran: true, value: 'ran' });
    await finish?.();
    const next = await (waiting as Promise<Lock>);
    expect(await next.release()).toBe(true);
    expect((await a.jobHistory('m7')).map((r) => r.outcome)).toEqual(['ok']);
    expect(backendErrors).toEqual([]);
  });

  it('a shared hold asked for as a hand-off takes the last waiter: refused, not queued, and taken later', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const keys = lockKeys(prefix, 'm8');
    // A read-write lock held shared and released: its record, holds and grants stay.
    const before = await a.acquire('m8', { ttl: 10_000, mode: 'shared' });
    expect(await before.release()).toBe(true);
    // An exclusive waiter queued while the lock is free (its holder's lease had run out): a shared
    // request hands the lock to it first, which empties the queue.
    const [seconds = '', micros = ''] = (await admin.time()).map(String);
    const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    await admin.zadd(keys.waiters, `${seconds}${micros.padStart(6, '0')}`, 'writer');
    await admin.hset(keys.alive, 'writer', String(nowMs + 10_000));
    const finish = await migrating(prefix, 'm8');
    const reader = a.acquire('m8', { ttl: 10_000, mode: 'shared', wait: 10_000 });
    await queued(prefix, 'm8', 0);
    await finish();
    // The writer never comes: its reservation lapses, and the reader's next try takes the lock.
    const held = await reader;
    expect(held.fencingToken).toBeGreaterThan(before.fencingToken);
    expect(await held.release()).toBe(true);
    expect(backendErrors).toEqual([]);
  });
});
