import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { waitFor } from './util.js';

/**
 * Worker processes of one scheduled job (schedule-worker.mjs, here on PostgreSQL or etcd), the reports
 * each prints, and what the multi-process scheduler tests count from them.
 */
const WORKER = fileURLToPath(new URL('./schedule-worker.mjs', import.meta.url));

export interface ScheduleReport {
  readonly e: 'ready' | 'start' | 'end' | 'aborted' | 'skip';
  readonly pid: number;
  readonly tick?: number;
  readonly fence?: number | null;
  readonly reason?: string;
}

export interface ScheduleWorkerConfig {
  readonly backend: 'postgres' | 'etcd';
  readonly url: string;
  readonly prefix: string;
  readonly job: string;
  readonly every: number;
  readonly lockAtMostFor: number;
  readonly lockAtLeastFor?: number;
  readonly taskMs: number;
}

/** `count` workers of one job, started and ready; each one's reports are appended as they come. */
export async function startScheduleWorkers(
  count: number,
  config: ScheduleWorkerConfig,
): Promise<{ workers: ChildProcess[]; reports: ScheduleReport[][] }> {
  const workers: ChildProcess[] = [];
  const reports: ScheduleReport[][] = [];
  for (let i = 0; i < count; i++) {
    const child = spawn(process.execPath, [WORKER, JSON.stringify({ ...config, instance: `w${i}` })], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    workers.push(child);
    const mine: ScheduleReport[] = [];
    reports.push(mine);
    createInterface({ input: child.stdout }).on('line', (line) => mine.push(JSON.parse(line) as ScheduleReport));
  }
  await waitFor(() => reports.every((r) => r.some((m) => m.e === 'ready')), { timeout: 10_000 });
  return { workers, reports };
}

/** SIGTERM (the worker stops its job and closes), SIGKILL if it has not exited within 3 s. */
export async function stopScheduleWorker(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}

/** For each tick every worker fired (a start or a skip from each), how many started it. */
export function startsPerTick(reports: readonly ScheduleReport[][]): number[] {
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
  return [...by.values()].filter((t) => t.seen.size === reports.length).map((t) => t.starts);
}
