import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EtcdServer, randomPrefix, startEtcd, waitFor } from '../harness/index.js';

/** The scheduler on etcd across processes: three worker processes of one job, every tick run exactly once. */
const WORKER = fileURLToPath(new URL('./schedule-worker.mjs', import.meta.url));

interface Report {
  e: 'ready' | 'start' | 'end' | 'skip' | 'aborted';
  tick?: number;
}

let etcd: EtcdServer;
const workers: ChildProcess[] = [];
beforeAll(async () => {
  etcd = await startEtcd();
});
afterAll(async () => {
  await Promise.all(workers.splice(0).map(stop));
  await etcd?.stop();
});

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}

describe('the scheduler on etcd across processes', () => {
  it('three processes, one job, 10+ ticks: every tick runs exactly once', async () => {
    const prefix = randomPrefix();
    const reports: Report[][] = [];
    for (let i = 0; i < 3; i++) {
      const config = {
        url: etcd.url,
        prefix,
        instance: `w${i}`,
        job: 'rates',
        every: 500,
        lockAtMostFor: 3_000,
        // etcd ends a kept lock on a lease of whole seconds (at least its minimum TTL), so a
        // lockAtLeastFor shorter than the period would hold the next ticks off: none here.
        lockAtLeastFor: 0,
        taskMs: 30,
      };
      const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
      workers.push(child);
      const mine: Report[] = [];
      reports.push(mine);
      createInterface({ input: child.stdout }).on('line', (line) => mine.push(JSON.parse(line) as Report));
    }
    await waitFor(() => reports.every((r) => r.some((m) => m.e === 'ready')), { timeout: 10_000 });
    await sleep(6_000);
    await Promise.all(workers.splice(0).map(stop));
    // For each tick every worker fired (a start or a skip from each), how many started it.
    const by = new Map<number, { seen: Set<number>; starts: number }>();
    for (const [worker, mine] of reports.entries()) {
      for (const r of mine) {
        if (r.tick === undefined || (r.e !== 'start' && r.e !== 'skip')) continue;
        const entry = by.get(r.tick) ?? { seen: new Set(), starts: 0 };
        entry.seen.add(worker);
        if (r.e === 'start') entry.starts++;
        by.set(r.tick, entry);
      }
    }
    const perTick = [...by.values()].filter((t) => t.seen.size === reports.length).map((t) => t.starts);
    expect(perTick.length).toBeGreaterThanOrEqual(10);
    expect(perTick.filter((n) => n !== 1)).toEqual([]);
  }, 30_000);
});
