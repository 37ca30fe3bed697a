import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Backend } from '../../../src/index.js';
import { Leasehold, MemoryStore, type SkipReason } from '../../../src/index.js';
import { jobKeys } from '../../../src/store/redis/keys.js';
import { storeSettings } from '../../../src/store/settings.js';
import { randomPrefix, startRedis } from '../../harness/index.js';
import { deferrals, ioredis } from './fixture.js';

/**
 * One instance whose clock runs a minute ahead must not stop a job everywhere: its ticks lie in
 * the future by the server's clock, so their claims are refused (`clock-skew`) without moving the
 * job's tick marker, and the instances with a right clock run every tick.
 */
describe('a fast clock on one instance', () => {
  const defer = deferrals();

  async function run(
    backend: () => Promise<{ a: Backend; b: Backend; lastTick(prefix: string): Promise<number | null> }>,
  ) {
    const { a, b, lastTick } = await backend();
    const prefix = randomPrefix();
    const fast = new Leasehold(a, { prefix });
    const right = new Leasehold(b, { prefix });
    defer(() => fast.close());
    defer(() => right.close());
    const ranFast: number[] = [];
    const ranRight: number[] = [];
    const skippedFast: SkipReason[] = [];
    fast.on('jobSkipped', (e) => skippedFast.push(e.reason));
    const ahead = 60_000;
    const jobs = [
      fast.schedule('rates', 200, (_s, r) => void ranFast.push(r.tick?.getTime() ?? 0), {
        clock: () => Date.now() + ahead,
      }),
      right.schedule('rates', 200, (_s, r) => void ranRight.push(r.tick?.getTime() ?? 0)),
    ];
    await sleep(1_500);
    await Promise.all(jobs.map((j) => j.stop()));
    expect(ranFast).toEqual([]);
    expect(skippedFast.length).toBeGreaterThan(3);
    expect(new Set(skippedFast)).toEqual(new Set(['clock-skew']));
    expect(ranRight.length).toBeGreaterThanOrEqual(5);
    // The marker never ran ahead of the real clock.
    const marker = await lastTick(prefix);
    expect(marker).toBe(Math.max(...ranRight));
    expect(marker).toBeLessThanOrEqual(Date.now());
  }

  it('on Redis', async () => {
    const server = await startRedis();
    defer(() => server.stop());
    const admin = ioredis(server.port);
    const a = ioredis(server.port);
    const b = ioredis(server.port);
    defer(() => {
      for (const c of [admin, a, b]) c.disconnect();
    });
    await run(async () => ({
      a,
      b,
      lastTick: async (prefix) => Number(await admin.get(jobKeys(prefix, 'rates').tick)),
    }));
  });

  it('on the memory store', async () => {
    const store = new MemoryStore();
    await run(async () => ({
      a: store,
      b: store,
      lastTick: async (prefix) => (await store.bind(storeSettings({ prefix })).readJob('rates', 1)).lastTick,
    }));
  });
});
