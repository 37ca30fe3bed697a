import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Backend, Leasehold, MemoryStore } from '../../src/index.js';
import { jobKeys } from '../../src/store/index.js';
import { storeSettings } from '../../src/store/settings.js';
import { lockRecord, type RedisServer, randomPrefix, startRedis, untilAborted, waitFor } from '../harness/index.js';
import {
  type ContractBackend,
  ioredisBackend,
  ioredisClusterBackend,
  memoryBackend,
  nodeRedisBackend,
} from './backends.js';

/**
 * The scheduler's store semantics (claim-tick, finish-tick, read-job) through the public API, the
 * same cases on the MemoryStore and on Redis: ioredis and node-redis on a standalone server, and
 * ioredis on a 3-master cluster (every key of a job shares the lock's hash slot). Then Redis down.
 */

/** ms left on a job's lease, read behind the scheduler's back; -2 when free. */
async function pttl(client: Backend, prefix: string, name: string): Promise<number> {
  if (client instanceof MemoryStore) return (await client.bind(storeSettings({ prefix })).inspect(name)).pttl;
  const keys = jobKeys(prefix, name);
  // ioredis and node-redis both read a string by get().
  const c = client as unknown as { get: (key: string) => Promise<string | null> };
  return lockRecord(await c.get(keys.lock)).pttl;
}

function scheduleContract(make: () => Promise<ContractBackend>): void {
  let backend: ContractBackend;
  let client: Backend;
  let prefix: string;
  const instances: Leasehold[] = [];

  async function leasehold(): Promise<Leasehold> {
    const locks = new Leasehold(await backend.client(), { prefix });
    instances.push(locks);
    return locks;
  }

  beforeAll(async () => {
    backend = await make();
    client = await backend.client();
  });
  afterEach(async () => {
    await Promise.all(instances.splice(0).map((l) => l.close()));
    prefix = randomPrefix();
  });
  afterAll(async () => {
    await backend?.close();
  });
  prefix = randomPrefix();

  it('tick identity: a tick is claimed once across instances; an earlier tick never after a later one', async () => {
    const [a, b] = [await leasehold(), await leasehold()];
    const at = (minute: number) => Date.UTC(2024, 4, 1, 3, minute);
    expect(await a.runOnce('rates', () => 'a', { tick: at(5) })).toEqual({ ran: true, value: 'a' });
    expect(await b.runOnce('rates', () => 'b', { tick: at(5) })).toEqual({ ran: false, reason: 'already-ran' });
    expect(await b.runOnce('rates', () => 'b', { tick: at(0) })).toEqual({ ran: false, reason: 'already-ran' });
    expect(await b.runOnce('rates', () => 'b', { tick: at(10) })).toEqual({ ran: true, value: 'b' });
  });

  it('lockAtLeastFor: a short run keeps the lock for the rest of it, then the lease ends by itself', async () => {
    const [a, b] = [await leasehold(), await leasehold()];
    let runToken = 0;
    const first = await a.runOnce(
      'short',
      (_s, run) => {
        runToken = run.fencingToken ?? 0;
        return 1;
      },
      { lockAtLeastFor: 600 },
    );
    expect(first).toEqual({ ran: true, value: 1 });
    const left = await pttl(client, prefix, 'short');
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(600);
    expect(await b.runOnce('short', () => 2)).toEqual({ ran: false, reason: 'locked' });
    expect(await b.tryAcquire('short')).toBeNull();
    const next = await b.acquire('short', { wait: 3_000 });
    expect(next.fencingToken).toBeGreaterThan(runToken);
    await next.release();
  });

  it('without lockAtLeastFor the finish deletes the lock at once and wakes a waiter', async () => {
    const [a, b] = [await leasehold(), await leasehold()];
    const released: boolean[] = [];
    a.on('released', (e) => released.push(e.released));
    let waiter: Promise<unknown> | undefined;
    let runToken = 0;
    const result = await a.runOnce('quick', async (_s, run) => {
      runToken = run.fencingToken ?? 0;
      waiter = b.acquire('quick', { wait: 5_000 });
      await sleep(50);
      return 'done';
    });
    expect(result).toEqual({ ran: true, value: 'done' });
    expect(released).toEqual([true]);
    const lock = (await waiter) as { fencingToken: number; release(): Promise<boolean> };
    expect(lock.fencingToken).toBeGreaterThan(runToken);
    await lock.release();
  });

  it('history: outcome, instance, server start time and duration per run, newest first, trimmed to historyLimit', async () => {
    const locks = await leasehold();
    for (let i = 1; i <= 4; i++) {
      await locks
        .runOnce(
          'hist',
          async () => {
            await sleep(20);
            if (i === 3) throw new Error('third fails');
          },
          { tick: i * 1_000, instance: `node-${i}`, historyLimit: 3 },
        )
        .catch(() => undefined);
    }
    const history = await locks.jobHistory('hist');
    expect(history.map((r) => r.tick?.getTime())).toEqual([4_000, 3_000, 2_000]);
    expect(history.map((r) => r.outcome)).toEqual(['ok', 'failed', 'ok']);
    expect(history.map((r) => r.instance)).toEqual(['node-4', 'node-3', 'node-2']);
    expect(history[1]?.error).toBe('Error: third fails');
    const tokens = history.map((r) => r.fencingToken ?? 0);
    expect(tokens).toEqual([...tokens].sort((x, y) => y - x));
    expect(new Set(tokens).size).toBe(3);
    for (const r of history) {
      expect(r.duration).toBeGreaterThanOrEqual(15);
      expect(r.finishedAt?.getTime()).toBe((r.startedAt.getTime() as number) + (r.duration as number));
      expect(Math.abs(r.startedAt.getTime() - Date.now())).toBeLessThan(60_000);
    }
    const starts = history.map((r) => r.startedAt.getTime());
    expect(starts).toEqual([...starts].sort((x, y) => y - x));
    expect(await locks.jobHistory('hist', 1)).toHaveLength(1);
  });

  it('the tick marker and the history outlive the lock key', async () => {
    const locks = await leasehold();
    await locks.runOnce('keep', () => undefined, { tick: 5_000 });
    await backend.expire(prefix, 'keep');
    expect(await pttl(client, prefix, 'keep')).toBe(-2);
    expect(await locks.runOnce('keep', () => undefined, { tick: 5_000 })).toEqual({
      ran: false,
      reason: 'already-ran',
    });
    expect((await locks.jobHistory('keep')).map((r) => r.outcome)).toEqual(['ok']);
  });

  it('a run whose lease was taken away records lost; one whose instance vanished is reported abandoned', async () => {
    const locks = await leasehold();
    const lost = await locks.runOnce(
      'taken',
      async (signal) => {
        await backend.expire(prefix, 'taken');
        await untilAborted(signal);
        return (signal.reason as { reason: string }).reason;
      },
      // The watchdog's extension (at a third) finds the lease gone long before its validity ends.
      { lockAtMostFor: 3_000 },
    );
    expect(lost).toEqual({ ran: true, value: 'expired' });
    expect((await locks.jobHistory('taken'))[0]?.outcome).toBe('lost');

    const doomed = await leasehold();
    const observer = await leasehold();
    let started = false;
    void doomed.runOnce(
      'vanish',
      async (signal) => {
        started = true;
        await untilAborted(signal);
      },
      { lockAtMostFor: 300, keepAlive: false },
    );
    await waitFor(() => started);
    expect((await observer.jobHistory('vanish'))[0]?.outcome).toBe('running');
    // close() abandons the lease without a word to the store, as a crash would.
    await doomed.close();
    await waitFor(async () => (await observer.jobHistory('vanish'))[0]?.outcome === 'abandoned', { timeout: 2_000 });
    expect(await pttl(client, prefix, 'vanish')).toBe(-2);
  });

  it('scheduled: two instances on an interval, each tick once, fencing tokens in tick order', async () => {
    const [a, b] = [await leasehold(), await leasehold()];
    const runs: Array<{ tick: number; fence: number | null }> = [];
    const task = (_s: AbortSignal, run: { tick: Date | null; fencingToken: number | null }) =>
      void runs.push({ tick: run.tick?.getTime() ?? 0, fence: run.fencingToken });
    const jobs = [a.schedule('tick', 150, task), b.schedule('tick', 150, task)];
    await waitFor(() => runs.length >= 4, { timeout: 3_000 });
    await Promise.all(jobs.map((j) => j.stop()));
    const ticks = runs.map((r) => r.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(ticks).toEqual([...ticks].sort((x, y) => x - y));
    const fences = runs.map((r) => r.fence as number);
    expect(fences).toEqual([...fences].sort((x, y) => x - y));
  });
}

describe('MemoryStore', () => scheduleContract(async () => memoryBackend()));
describe('ioredis', () => scheduleContract(ioredisBackend));
describe('node-redis', () => scheduleContract(nodeRedisBackend));
describe('ioredis Cluster, 3 masters', () => scheduleContract(ioredisClusterBackend));

describe('Redis down', () => {
  let server: RedisServer;
  let client: Redis;
  let locks: Leasehold;

  beforeAll(async () => {
    server = await startRedis();
    client = new Redis(server.port, server.host, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    client.on('error', () => {});
    locks = new Leasehold(client, { prefix: randomPrefix(), commandTimeout: 300 });
  });
  afterAll(async () => {
    await locks.close();
    client.disconnect();
    await server.stop();
  });

  it("'skip' skips with reason unavailable, 'run' runs unlocked; both run locked again once Redis is back", async () => {
    const skipped: string[] = [];
    const runs: Array<{ name: string; fencingToken: number | null }> = [];
    locks.on('jobSkipped', (e) => {
      if (e.name === 'fail-closed') skipped.push(e.reason);
    });
    locks.on('jobRun', (e) => runs.push({ name: e.name, fencingToken: e.fencingToken }));
    const closed = locks.schedule('fail-closed', 200, () => undefined);
    const open = locks.schedule('idempotent', 200, () => undefined, { whenUnavailable: 'run' });
    await waitFor(() => runs.filter((r) => r.name === 'fail-closed').length >= 1, { timeout: 3_000 });

    await server.stop();
    const before = runs.length;
    await waitFor(() => skipped.includes('unavailable') && runs.slice(before).some((r) => r.fencingToken === null), {
      timeout: 5_000,
      message: 'a skip and an unlocked run while Redis is down',
    });
    const whileDown = runs.slice(before);
    expect(whileDown.filter((r) => r.name === 'fail-closed')).toEqual([]);
    expect(whileDown.some((r) => r.name === 'idempotent' && r.fencingToken === null)).toBe(true);
    expect(await locks.runOnce('once', () => 1)).toEqual({ ran: false, reason: 'unavailable' });
    expect(await locks.runOnce('once', () => 1, { whenUnavailable: 'run' })).toEqual({ ran: true, value: 1 });

    // Back on the same port with an empty script cache: EVALSHA falls back to EVAL.
    await server.restart();
    const after = runs.length;
    await waitFor(
      () =>
        runs.slice(after).some((r) => r.name === 'fail-closed' && r.fencingToken !== null) &&
        runs.slice(after).some((r) => r.name === 'idempotent' && r.fencingToken !== null),
      { timeout: 5_000, message: 'locked runs after the restart' },
    );
    await Promise.all([closed.stop(), open.stop()]);
  });
});
