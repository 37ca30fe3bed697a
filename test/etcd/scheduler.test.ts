import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { randomPrefix, startEtcd, waitFor } from '../harness/index.js';
import { etcdFixture } from './fixture.js';

/**
 * The scheduler on etcd, through the public API: each claim is one transaction (the line empty,
 * no tick at or after this one recorded: take the lock, record the tick and a running run).
 */
describe('scheduler on etcd', () => {
  const etcd = etcdFixture(() => startEtcd());
  const three = (prefix: string): Leasehold[] =>
    ['a', 'b', 'c'].map((instance) => etcd.leasehold(prefix, 2_000, { instance }));

  it('a tick runs once across three Leaseholds, whichever claims it first', async () => {
    const prefix = randomPrefix();
    const pods = three(prefix);
    const at = (minute: number) => Date.UTC(2024, 4, 1, 3, minute);
    for (const minute of [0, 5, 10]) {
      const results = await Promise.all(pods.map((pod) => pod.runOnce('settle', () => minute, { tick: at(minute) })));
      const ran = results.filter((r) => r.ran);
      expect(ran).toEqual([{ ran: true, value: minute }]);
      for (const r of results) if (!r.ran) expect(['already-ran', 'locked']).toContain(r.reason);
    }
    // An earlier tick never runs after a later one.
    expect(await pods[0]?.runOnce('settle', () => 'late', { tick: at(7) })).toEqual({
      ran: false,
      reason: 'already-ran',
    });
    const history = (await pods[1]?.jobHistory('settle')) ?? [];
    expect(history.map((r) => r.tick?.getTime())).toEqual([at(10), at(5), at(0)]);
    expect(history.map((r) => r.outcome)).toEqual(['ok', 'ok', 'ok']);
    const tokens = history.map((r) => r.fencingToken);
    expect(tokens).toEqual([...tokens].sort((x, y) => y - x));
  });

  it('scheduled on an interval on three Leaseholds: each tick once, tokens in tick order', async () => {
    const prefix = randomPrefix();
    const runs: Array<{ tick: number; fence: number | null }> = [];
    const task = (_s: AbortSignal, run: { tick: Date | null; fencingToken: number | null }) =>
      void runs.push({ tick: run.tick?.getTime() ?? 0, fence: run.fencingToken });
    const jobs = three(prefix).map((pod) => pod.schedule('beat', 200, task));
    await waitFor(() => runs.length >= 5, { timeout: 5_000 });
    await Promise.all(jobs.map((job) => job.stop()));
    const ticks = runs.map((r) => r.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(ticks).toEqual([...ticks].sort((x, y) => x - y));
    const fences = runs.map((r) => r.fence as number);
    expect(fences).toEqual([...fences].sort((x, y) => x - y));
  });

  it('lockAtLeastFor: a short run keeps the lock on a lease of its own, which etcd ends by itself, even with the instance closed', async () => {
    const prefix = randomPrefix();
    const [a, b] = three(prefix) as [Leasehold, Leasehold];
    const tokens: number[] = [];
    const record = (_s: AbortSignal, run: { fencingToken: number | null }) => void tokens.push(run.fencingToken ?? 0);
    expect((await a.runOnce('short', record, { lockAtLeastFor: 1_500 })).ran).toBe(true);
    const keptAt = performance.now();
    await a.close();
    expect(await b.runOnce('short', () => 2)).toEqual({ ran: false, reason: 'locked' });
    expect(await b.tryAcquire('short')).toBeNull();
    // Whole seconds, at least etcd's minimum TTL: kept 1.5 s or more, and gone a little after.
    const next = await b.acquire('short', { wait: 6_000 });
    expect(performance.now() - keptAt).toBeGreaterThan(1_000);
    expect(next.fencingToken).toBeGreaterThan(tokens[0] as number);
    await next.release();
  });

  it('history: outcomes and errors newest first, trimmed to historyLimit; a vanished run is abandoned and its lease ends by its ttl', async () => {
    const prefix = randomPrefix();
    const [locks, doomed] = three(prefix) as [Leasehold, Leasehold];
    for (let i = 1; i <= 4; i++) {
      const task = async () => {
        await sleep(10);
        if (i === 3) throw new Error('third fails');
      };
      await locks.runOnce('hist', task, { tick: i * 1_000, historyLimit: 3 }).catch(() => undefined);
    }
    await waitFor(async () => (await locks.jobHistory('hist')).length === 3);
    const history = await locks.jobHistory('hist');
    expect(history.map((r) => r.tick?.getTime())).toEqual([4_000, 3_000, 2_000]);
    expect(history.map((r) => r.outcome)).toEqual(['ok', 'failed', 'ok']);
    expect(history[1]?.error).toBe('Error: third fails');

    // A run whose instance is closed mid-task: nobody reports its end.
    await new Promise<void>((began) => {
      const task = (signal: AbortSignal) => {
        began();
        return new Promise((settle) => signal.addEventListener('abort', settle));
      };
      void doomed.runOnce('vanish', task, { lockAtMostFor: 500, keepAlive: false });
    });
    const outcome = async () => (await locks.jobHistory('vanish'))[0]?.outcome;
    expect(await outcome()).toBe('running');
    // close() tells the store nothing: the lease ends by its ttl (the store's timer deletes the key then).
    await doomed.close();
    await waitFor(async () => (await outcome()) === 'abandoned', { timeout: 3_000 });
    expect(await locks.tryAcquire('vanish')).not.toBeNull();
  });
});
