import { Redis } from 'ioredis';
import { createSentinel } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { type Backend, Leasehold, Lock, LockTimeoutError, StoreUnavailableError } from '../../src/index.js';
import { lockKeys } from '../../src/store/index.js';
import { lockRecord, randomPrefix, type SentinelGroup, startSentinelGroup, waitFor } from '../harness/index.js';

/**
 * Sentinel: the client follows the master through a failover. A lock that reached the replica
 * before the master died is still held on the promoted replica, its owner can still release it,
 * and the fencing counter carries on from where it was.
 */
const clients: Array<[string, (group: SentinelGroup) => Promise<{ client: Backend; close(): Promise<void> }>]> = [
  [
    'ioredis',
    async (group) => {
      const client = new Redis({
        sentinels: [{ host: group.sentinel.host, port: group.sentinel.port }],
        name: group.name,
      });
      client.on('error', () => {});
      return { client, close: async () => client.disconnect() };
    },
  ],
  [
    'node-redis',
    async (group) => {
      const client = createSentinel({
        name: group.name,
        sentinelRootNodes: [{ host: group.sentinel.host, port: group.sentinel.port }],
      });
      client.on('error', () => {});
      await client.connect();
      return { client, close: async () => void (await client.destroy()) };
    },
  ],
];

describe.each(clients)('Sentinel through %s', (_label, connect) => {
  const stops: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  });

  it('locks, waits and fences across a failover', async () => {
    const group = await startSentinelGroup();
    stops.push(() => group.stop());
    const { client, close } = await connect(group);
    stops.push(close);
    const prefix = randomPrefix();
    const locks = new Leasehold(client, { prefix, commandTimeout: 1_000 });
    stops.push(() => locks.close());

    const first = await locks.acquire('invoice', { ttl: 5_000 });
    const waiting = locks.acquire('invoice', { wait: 5_000 });
    expect(await first.release()).toBe(true);
    const second = await waiting;
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await second.release()).toBe(true);

    const held = await locks.acquire('invoice', { ttl: 30_000 });
    const keys = lockKeys(prefix, 'invoice');
    await waitFor(async () => lockRecord(await group.replica.get(keys.lock)).state === held.owner, {
      timeout: 5_000,
    });

    // Waiters parked through the failover: one whose wait ends during it, one whose wait outlasts
    // it. Neither hangs: a waiter whose retry meets the dead master fails with StoreUnavailableError
    // at once (fail closed); one that retries after the promotion is handed the lock.
    const parkedAt = performance.now();
    const short = locks.acquire('invoice', { wait: 2_000 }).then(
      () => 'acquired',
      (error: unknown) => ({ error, after: performance.now() - parkedAt }),
    );
    const long = locks.acquire('invoice', { wait: 40_000 }).catch((error: unknown) => error);
    await group.master.kill9();
    await waitFor(async () => (await group.masterPort()) === group.replica.port, {
      timeout: 20_000,
      message: 'sentinel did not promote the replica',
    });
    // The short waiter did not hang past its wait (a margin for the reconnection's commandTimeout).
    const gaveUp = await short;
    expect(gaveUp).not.toBe('acquired');
    const error = (gaveUp as { error: unknown }).error;
    expect(error instanceof LockTimeoutError || error instanceof StoreUnavailableError).toBe(true);
    expect((gaveUp as { after: number }).after).toBeLessThan(2_000 + 3_000);
    // The lock survived on the promoted replica: nobody else gets it, its owner still releases it.
    await waitFor(async () => (await locks.tryAcquire('invoice').catch(() => undefined)) === null, { timeout: 15_000 });
    expect(await held.release()).toBe(true);
    // The long waiter settled too: handed the lock on the new master, or failed closed.
    const handed = await long;
    let last = held.fencingToken;
    if (handed instanceof Lock) {
      expect(handed.fencingToken).toBeGreaterThan(held.fencingToken);
      last = handed.fencingToken;
      expect(await handed.release()).toBe(true);
    } else {
      expect(handed).toBeInstanceOf(StoreUnavailableError);
    }
    const after = await locks.acquire('invoice', { ttl: 5_000, wait: 5_000 });
    expect(after.fencingToken).toBeGreaterThan(last);
    expect(await after.release()).toBe(true);
  }, 60_000);
});
