import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EtcdServer, randomPrefix, startEtcd } from '../harness/index.js';
import { startScheduleWorkers, startsPerTick, stopScheduleWorker } from '../harness/schedule-workers.js';

/** The scheduler on etcd across processes: three worker processes of one job, every tick run exactly once. */
let etcd: EtcdServer;
const running: ChildProcess[] = [];
beforeAll(async () => {
  etcd = await startEtcd();
});
afterAll(async () => {
  await Promise.all(running.splice(0).map(stopScheduleWorker));
  await etcd?.stop();
});

describe('the scheduler on etcd across processes', () => {
  it('three processes, one job, 10+ ticks: every tick runs exactly once', async () => {
    const { workers, reports } = await startScheduleWorkers(3, {
      backend: 'etcd',
      url: etcd.url,
      prefix: randomPrefix(),
      job: 'rates',
      every: 500,
      lockAtMostFor: 3_000,
      // A later tick takes over a lock kept by lockAtLeastFor once that ran out, though etcd's
      // lease (whole seconds) still holds it: every tick runs.
      lockAtLeastFor: 200,
      taskMs: 30,
    });
    running.push(...workers);
    await sleep(6_000);
    await Promise.all(running.splice(0).map(stopScheduleWorker));
    const perTick = startsPerTick(reports);
    expect(perTick.length).toBeGreaterThanOrEqual(10);
    expect(perTick.filter((n) => n !== 1)).toEqual([]);
  }, 30_000);
});
