import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../src/index.js';
import { randomPrefix } from '../harness/index.js';
import { type ContractBackend, ioredisBackend, memoryBackend } from './backends.js';
import { scheduleEveryTick } from './every-tick.js';
import { postgresPoolBackend } from './postgres.js';

/**
 * A job every second with a sub-second lockAtLeastFor runs every tick, exactly once, on every
 * backend: the lock kept after a short run never costs the next tick (etcd: test/etcd/every-tick.test.ts).
 */
function everyTick(make: () => Promise<ContractBackend>): void {
  let backend: ContractBackend;
  const instances: Leasehold[] = [];
  beforeAll(async () => {
    backend = await make();
  });
  afterEach(async () => {
    await Promise.all(instances.splice(0).map((l) => l.close()));
  });
  afterAll(async () => {
    await backend?.close();
  });

  it('three instances, a 1000 ms job with lockAtLeastFor 500: every tick runs, exactly once', async () => {
    const prefix = randomPrefix();
    for (const instance of ['a', 'b', 'c']) instances.push(new Leasehold(await backend.client(), { prefix, instance }));
    const { fired, ran } = await scheduleEveryTick(instances, { every: 1_000, lockAtLeastFor: 500, ticks: 7 }, sleep);
    expect(fired.length).toBeGreaterThanOrEqual(6);
    expect(ran.missed).toEqual([]);
    expect(ran.twice).toEqual([]);
  }, 30_000);
}

describe('MemoryStore', () => everyTick(async () => memoryBackend()));
describe('ioredis', () => everyTick(ioredisBackend));
describe('PostgreSQL (pg.Pool)', () => everyTick(postgresPoolBackend));
