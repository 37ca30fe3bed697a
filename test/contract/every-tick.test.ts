import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../src/index.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { type ContractBackend, ioredisBackend, memoryBackend } from './backends.js';
import { etcdBackend } from './etcd.js';
import { EVERY_TICK_JOB, scheduleEveryTick } from './every-tick.js';
import { postgresPoolBackend } from './postgres.js';

/**
 * A job every second with a sub-second lockAtLeastFor runs every tick, exactly once, on every
 * backend: the lock kept after a short run never costs the next tick (etcd: test/etcd/every-tick.test.ts),
 * not even when the run's claim landed late and what lockAtLeastFor keeps reaches past the next
 * tick: the claim of a later tick takes over a lock that only lockAtLeastFor keeps.
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

  async function pods(prefix: string): Promise<Leasehold[]> {
    for (const instance of ['a', 'b', 'c']) instances.push(new Leasehold(await backend.client(), { prefix, instance }));
    return instances.slice(-3);
  }

  it('three instances, a 1000 ms job with lockAtLeastFor 500: every tick runs, exactly once', async () => {
    const { fired, ran } = await scheduleEveryTick(
      await pods(randomPrefix()),
      { every: 1_000, lockAtLeastFor: 500, ticks: 7 },
      sleep,
    );
    expect(fired.length).toBeGreaterThanOrEqual(6);
    expect(ran.missed).toEqual([]);
    expect(ran.twice).toEqual([]);
  }, 30_000);

  it('the same with one tick claimed 700 ms late, its lockAtLeastFor reaching past the next tick: every tick runs, exactly once', async () => {
    const all = await pods(randomPrefix());
    const plan = { every: 1_000, lockAtLeastFor: 500, ticks: 6, lateBy: 700 };
    const { fired, ran, late } = await scheduleEveryTick(all, plan, sleep);
    expect(ran.missed).toEqual([]);
    expect(ran.twice).toEqual([]);
    const next = (late ?? 0) + plan.every;
    expect(fired).toEqual(expect.arrayContaining([late, next, next + plan.every]));
    // The late run's claim (server time) kept the lock past the next tick: that tick took it over.
    const history = await (all[0] as Leasehold).jobHistory(EVERY_TICK_JOB);
    const lateRun = history.find((r) => r.tick?.getTime() === late);
    expect((lateRun?.startedAt.getTime() ?? 0) + plan.lockAtLeastFor).toBeGreaterThan(next);
    const fences = history.map((r) => r.fencingToken);
    expect(fences).toEqual([...fences].sort((x, y) => y - x));
  }, 30_000);
}

/**
 * The takeover, made deterministic with runOnce and explicit ticks in the past (so a later tick
 * is already due when the earlier one is claimed, as for a claim that landed late), and what it
 * never takes: a run still running, a lock a waiter is queued behind, a claim of the same or an
 * earlier tick, a claim without a tick, a run without a tick, a plain acquire.
 */
function lateClaim(make: () => Promise<ContractBackend>): void {
  let backend: ContractBackend;
  let prefix: string;
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

  async function leaseholds(count: number): Promise<Leasehold[]> {
    prefix = randomPrefix();
    for (let i = 0; i < count; i++) instances.push(new Leasehold(await backend.client(), { prefix }));
    return instances.slice(-count);
  }

  /** A tick 10 s ago, and the ones after it: all of them due already. */
  const T = Math.floor(Date.now() / 1_000) * 1_000 - 10_000;
  const fenceOf = (into: number[]) => (_signal: AbortSignal, run: { fencingToken: number | null }) => {
    into.push(run.fencingToken ?? 0);
    return run.fencingToken;
  };

  it('a later tick takes over at once a lock lockAtLeastFor keeps, with a higher fencing token', async () => {
    const [a, b] = (await leaseholds(2)) as [Leasehold, Leasehold];
    const fences: number[] = [];
    expect((await a.runOnce('late', fenceOf(fences), { tick: T, lockAtLeastFor: 20_000 })).ran).toBe(true);
    const next = await b.runOnce('late', fenceOf(fences), { tick: T + 1_000 });
    expect(next).toEqual({ ran: true, value: fences[1] });
    expect(fences[1]).toBeGreaterThan(fences[0] as number);
    const history = await b.jobHistory('late');
    expect(history.map((r) => [r.tick?.getTime(), r.outcome])).toEqual([
      [T + 1_000, 'ok'],
      [T, 'ok'],
    ]);
    // The taker's run had no lockAtLeastFor: its finish freed the lock.
    const lock = await b.tryAcquire('late');
    expect(lock?.fencingToken).toBeGreaterThan(fences[1] as number);
    await lock?.release();
  }, 30_000);

  it('a kept lock is not taken over by the same or an earlier tick, a claim without a tick, or a plain acquire', async () => {
    const [a, b] = (await leaseholds(2)) as [Leasehold, Leasehold];
    expect((await a.runOnce('kept', () => 1, { tick: T, lockAtLeastFor: 20_000 })).ran).toBe(true);
    for (const tick of [T, T - 1_000]) {
      expect(await b.runOnce('kept', () => 2, { tick })).toEqual({ ran: false, reason: 'already-ran' });
    }
    expect(await b.runOnce('kept', () => 2)).toEqual({ ran: false, reason: 'locked' });
    expect(await b.tryAcquire('kept')).toBeNull();
    // A run without a tick keeps its whole lockAtLeastFor, against a claim with a tick too.
    expect((await a.runOnce('tickless', () => 1, { lockAtLeastFor: 20_000 })).ran).toBe(true);
    expect(await b.runOnce('tickless', () => 2, { tick: T })).toEqual({ ran: false, reason: 'locked' });
  }, 30_000);

  it('a run still running is never taken over, whatever tick is claimed', async () => {
    const [a, b] = (await leaseholds(2)) as [Leasehold, Leasehold];
    const inside: unknown[] = [];
    const outer = await a.runOnce(
      'busy',
      async () => {
        for (const tick of [T + 1_000, T + 9_000]) inside.push(await b.runOnce('busy', () => 2, { tick }));
        return 1;
      },
      { tick: T, lockAtLeastFor: 20_000 },
    );
    expect(outer).toEqual({ ran: true, value: 1 });
    expect(inside).toEqual([
      { ran: false, reason: 'locked' },
      { ran: false, reason: 'locked' },
    ]);
    expect((await b.jobHistory('busy')).map((r) => r.tick?.getTime())).toEqual([T]);
  }, 30_000);

  it('a waiter queued behind a kept lock keeps its turn: the later tick is refused, the waiter gets the lock once lockAtLeastFor ends', async () => {
    const [a, b, c] = (await leaseholds(3)) as [Leasehold, Leasehold, Leasehold];
    const fences: number[] = [];
    const lockAtLeastFor = 3_000;
    const before = performance.now();
    expect((await a.runOnce('queued', fenceOf(fences), { tick: T, lockAtLeastFor })).ran).toBe(true);
    const waiting = b.acquire('queued', { wait: 15_000 });
    await waitFor(async () => (await backend.queued(prefix, 'queued')) >= 1, { message: 'the waiter queued' });
    const refused = await c.runOnce('queued', () => 2, { tick: T + 1_000 });
    // lockAtLeastFor counts from the claim, made after `before`: the refusal came inside it.
    expect(performance.now() - before).toBeLessThan(lockAtLeastFor);
    const lock = await waiting;
    expect(refused).toEqual({ ran: false, reason: 'locked' });
    expect(lock.fencingToken).toBeGreaterThan(fences[0] as number);
    expect(await lock.release()).toBe(true);
    // The refused tick was not recorded: it runs now.
    expect(await c.runOnce('queued', () => 3, { tick: T + 1_000 })).toEqual({ ran: true, value: 3 });
  }, 30_000);
}

describe('MemoryStore', () => everyTick(async () => memoryBackend()));
describe('ioredis', () => everyTick(ioredisBackend));
describe('PostgreSQL (pg.Pool)', () => everyTick(postgresPoolBackend));

describe('a claim that landed late, MemoryStore', () => lateClaim(async () => memoryBackend()));
describe('a claim that landed late, ioredis', () => lateClaim(ioredisBackend));
describe('a claim that landed late, PostgreSQL (pg.Pool)', () => lateClaim(postgresPoolBackend));
describe('a claim that landed late, etcd3', () => lateClaim(etcdBackend));
