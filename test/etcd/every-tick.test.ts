import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { scheduleEveryTick } from '../contract/every-tick.js';
import { randomPrefix, startEtcd } from '../harness/index.js';
import { etcdFixture } from './fixture.js';

/**
 * A job every second with a sub-second lockAtLeastFor on etcd: etcd's leases are whole seconds
 * (at least its minimum TTL), yet the lock kept after a short run must not cost the next tick.
 */
describe('lockAtLeastFor shorter than the period on etcd', () => {
  const etcd = etcdFixture(() => startEtcd());

  it('three Leaseholds, a 1000 ms job with lockAtLeastFor 500: every tick runs, exactly once', async () => {
    const prefix = randomPrefix();
    const pods: Leasehold[] = ['a', 'b', 'c'].map((instance) => etcd.leasehold(prefix, 2_000, { instance }));
    const { fired, ran } = await scheduleEveryTick(pods, { every: 1_000, lockAtLeastFor: 500, ticks: 7 }, sleep);
    expect(fired.length).toBeGreaterThanOrEqual(6);
    expect(ran.missed).toEqual([]);
    expect(ran.twice).toEqual([]);
  }, 30_000);

  it('a later tick takes over at once a lock lockAtLeastFor keeps; the same tick and a run without one are refused', async () => {
    const prefix = randomPrefix();
    const [a, b] = ['a', 'b'].map((instance) => etcd.leasehold(prefix, 2_000, { instance })) as [Leasehold, Leasehold];
    const lockAtLeastFor = 30_000;
    expect(await a.runOnce('kept', () => 1, { tick: 1_000, lockAtLeastFor })).toEqual({ ran: true, value: 1 });
    expect(await b.runOnce('kept', () => 2)).toEqual({ ran: false, reason: 'locked' });
    expect(await b.runOnce('kept', () => 2, { tick: 1_000 })).toMatchObject({ ran: false, reason: 'already-ran' });
    expect(await b.runOnce('kept', () => 3, { tick: 2_000 })).toEqual({ ran: true, value: 3 });
    const history = await b.jobHistory('kept');
    expect(history.map((r) => r.tick?.getTime())).toEqual([2_000, 1_000]);
  }, 30_000);
});
