import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import {
  type ScheduleReport,
  type ScheduleWorkerConfig,
  startScheduleWorkers,
  startsPerTick,
  stopScheduleWorker,
} from '../harness/schedule-workers.js';
import { postgresFixture } from './fixture.js';

/**
 * The scheduler on PostgreSQL: the tick claim (lock, tick marker and a running record in one
 * statement), lockAtLeastFor, the history; one tick, one run across three Leaseholds in one
 * process and across three processes, one of them killed with kill -9 mid-run.
 */

type Report = ScheduleReport;

describe('scheduled jobs on PostgreSQL', () => {
  const db = postgresFixture();

  /** `count` Leaseholds of one prefix, each on a pool of its own. */
  function instances(prefix: string, count: number): Leasehold[] {
    return Array.from({ length: count }, () => db.leasehold(db.ownPool({ max: 3 }), { prefix }));
  }

  /** ms left on `name`'s lease, read behind the scheduler's back; -2 when free. */
  async function leaseLeft(prefix: string, name: string): Promise<number> {
    return (await new PostgresStore(db.pool, { prefix }).inspect(name)).pttl;
  }

  it('a tick is claimed once across instances; never an earlier tick after a later one, nor one too far ahead', async () => {
    const [a, b] = instances(randomPrefix(), 2) as [Leasehold, Leasehold];
    const minute = (m: number) => Date.UTC(2024, 4, 1, 3, m);
    expect(await a.runOnce('rates', () => 'a', { tick: minute(5) })).toEqual({ ran: true, value: 'a' });
    for (const tick of [minute(5), minute(0)]) {
      expect(await b.runOnce('rates', () => 'b', { tick })).toEqual({ ran: false, reason: 'already-ran' });
    }
    expect(await b.runOnce('rates', () => 'b', { tick: minute(10) })).toEqual({ ran: true, value: 'b' });
    const ahead = Date.now() + 60_000;
    expect(await a.runOnce('rates', () => 'a', { tick: ahead })).toEqual({ ran: false, reason: 'clock-skew' });
  });

  it('lockAtLeastFor keeps a short run’s lock for the rest of it, on the server’s clock; then it ends by itself', async () => {
    const prefix = randomPrefix();
    const [a, b] = instances(prefix, 2) as [Leasehold, Leasehold];
    let token = 0;
    const ran = await a.runOnce(
      'short',
      (_signal, run) => {
        token = run.fencingToken ?? 0;
      },
      { lockAtLeastFor: 700 },
    );
    expect(ran.ran).toBe(true);
    const left = await leaseLeft(prefix, 'short');
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(700);
    expect(await b.runOnce('short', () => 'b')).toEqual({ ran: false, reason: 'locked' });
    const next = await b.acquire('short', { wait: 3_000 });
    expect(next.fencingToken).toBeGreaterThan(token);
    expect(await next.release()).toBe(true);
  });

  it('the history: outcomes newest first, trimmed to historyLimit, kept past the lease; forgetJob clears it and the tick marker', async () => {
    const prefix = randomPrefix();
    const [locks] = instances(prefix, 1) as [Leasehold];
    for (const i of [1, 2, 3, 4]) {
      const task = () => {
        if (i === 2) throw new Error('second fails');
      };
      await locks.runOnce('hist', task, { tick: i * 1_000, instance: `pod-${i}`, historyLimit: 3 }).catch(() => null);
    }
    const history = await locks.jobHistory('hist');
    expect(history.map((r) => [r.tick?.getTime(), r.outcome, r.instance])).toEqual([
      [4_000, 'ok', 'pod-4'],
      [3_000, 'ok', 'pod-3'],
      [2_000, 'failed', 'pod-2'],
    ]);
    expect(history[2]?.error).toBe('Error: second fails');
    const tokens = history.map((r) => r.fencingToken);
    expect(tokens).toEqual([...tokens].sort((x, y) => y - x));
    expect(await leaseLeft(prefix, 'hist')).toBe(-2);
    expect(await locks.runOnce('hist', () => 1, { tick: 4_000 })).toEqual({ ran: false, reason: 'already-ran' });

    const store = new PostgresStore(db.pool, { prefix });
    await store.forgetJob('hist');
    expect(await locks.jobHistory('hist')).toEqual([]);
    expect(await locks.runOnce('hist', () => 1, { tick: 4_000 })).toEqual({ ran: true, value: 1 });
    expect((await locks.jobHistory('hist'))[0]?.fencingToken).toBeGreaterThan(tokens[0] as number);
  });

  it('three Leaseholds scheduling one job: every tick runs once, fencing tokens in tick order, the history agrees', async () => {
    const prefix = randomPrefix();
    const runs: Array<{ tick: number; fence: number }> = [];
    const jobs = instances(prefix, 3).map((locks) =>
      locks.schedule('every', 150, (_signal, run) => {
        runs.push({ tick: run.tick?.getTime() ?? 0, fence: run.fencingToken ?? 0 });
      }),
    );
    await waitFor(() => runs.length >= 15, { timeout: 10_000 });
    await Promise.all(jobs.map((job) => job.stop()));
    const ticks = runs.map((r) => r.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    expect(ticks).toEqual([...ticks].sort((x, y) => x - y));
    const fences = runs.map((r) => r.fence);
    expect(fences).toEqual([...fences].sort((x, y) => x - y));
    const history = await instances(prefix, 1)[0]?.jobHistory('every', 100);
    expect(history?.map((r) => r.tick?.getTime()).sort()).toEqual([...ticks].sort());
    expect(new Set(history?.map((r) => r.outcome))).toEqual(new Set(['ok']));
  });

  describe('across processes', () => {
    const workers: ChildProcess[] = [];

    /** Start `count` worker processes of one job; resolves their reports (appended as they come). */
    async function start(prefix: string, count: number, config: { job: string } & Record<string, number | string>) {
      const started = await startScheduleWorkers(count, {
        backend: 'postgres',
        url: db.server.url,
        prefix,
        ...(config as unknown as Omit<ScheduleWorkerConfig, 'backend' | 'url' | 'prefix'>),
      });
      workers.push(...started.workers);
      db.later(() => Promise.all(workers.splice(0).map(stopScheduleWorker)));
      return started.reports;
    }

    it('three processes, one job, 15+ ticks: every tick runs exactly once', async () => {
      const reports = await start(randomPrefix(), 3, {
        job: 'rates',
        every: 300,
        lockAtMostFor: 2_000,
        lockAtLeastFor: 150,
        taskMs: 30,
      });
      await sleep(6_000);
      await Promise.all(workers.splice(0).map(stopScheduleWorker));
      const perTick = startsPerTick(reports);
      expect(perTick.length).toBeGreaterThanOrEqual(15);
      expect(perTick.filter((n) => n !== 1)).toEqual([]);
    }, 30_000);

    it('every process paused across a tick: its claim lands 700 ms late, lockAtLeastFor reaches past the next tick, and every tick still runs once', async () => {
      const prefix = randomPrefix();
      const config = { job: 'late', every: 1_000, lockAtMostFor: 3_000, lockAtLeastFor: 500, taskMs: 20 };
      const reports = await start(prefix, 3, config);
      const late = (Math.floor(Date.now() / config.every) + 2) * config.every;
      await sleep(late - 100 - Date.now());
      for (const worker of workers) worker.kill('SIGSTOP');
      await sleep(late + 700 - Date.now());
      for (const worker of workers) worker.kill('SIGCONT');
      await sleep(late + 3_500 - Date.now());
      await Promise.all(workers.splice(0).map(stopScheduleWorker));

      for (const tick of [late, late + 1_000, late + 2_000]) {
        const fired = reports.map((mine) => mine.filter((r) => r.tick === tick && (r.e === 'start' || r.e === 'skip')));
        expect(fired.map((mine) => mine.length)).toEqual([1, 1, 1]);
        expect(fired.flat().filter((r) => r.e === 'start')).toHaveLength(1);
      }
      // The late run's claim (server time) kept the lock past the next tick, which took it over.
      const history = (await instances(prefix, 1)[0]?.jobHistory('late')) ?? [];
      const lateRun = history.find((r) => r.tick?.getTime() === late);
      expect((lateRun?.startedAt.getTime() ?? 0) + config.lockAtLeastFor).toBeGreaterThan(late + config.every);
      const fences = history.map((r) => r.fencingToken);
      expect(fences).toEqual([...fences].sort((x, y) => y - x));
    }, 30_000);

    it('kill -9 of the process running a task: nobody reruns that tick, a later one runs elsewhere, the run is abandoned', async () => {
      const prefix = randomPrefix();
      const reports = await start(prefix, 3, { job: 'report', every: 800, lockAtMostFor: 600, taskMs: 400 });
      let victim = -1;
      await waitFor(
        () => {
          victim = reports.findIndex((mine) => mine.some((r) => r.e === 'start'));
          return victim >= 0;
        },
        { timeout: 5_000, message: 'a first run' },
      );
      const killed = reports[victim]?.find((r) => r.e === 'start') as Report & { tick: number };
      workers[victim]?.kill('SIGKILL');
      const left = await leaseLeft(prefix, 'report');
      expect(left).toBeGreaterThan(0);
      expect(left).toBeLessThanOrEqual(600);
      const others = reports.filter((_, i) => i !== victim);
      await waitFor(() => others.some((mine) => mine.some((r) => r.e === 'end' && (r.tick ?? 0) > killed.tick)), {
        timeout: 5_000,
        message: 'a later tick run by a survivor',
      });
      const starts = reports.flat().filter((r) => r.e === 'start' && r.tick === killed.tick);
      expect(starts).toHaveLength(1);
      const history = await instances(prefix, 1)[0]?.jobHistory('report');
      expect(history?.find((r) => r.tick?.getTime() === killed.tick)?.outcome).toBe('abandoned');
    }, 30_000);
  });
});
