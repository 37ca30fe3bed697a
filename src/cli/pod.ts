import { setTimeout as sleep } from 'node:timers/promises';
import type { Leasehold } from '../leasehold.js';

/** What the demo's job looks like; the same numbers for the in-process and the multi-process demo. */
export interface DemoPlan {
  /** Job name (fresh per demo run, so a second run does not see the first one's ticks). */
  readonly job: string;
  /** Scheduled time of the first tick to run and of the last, ms since the epoch. */
  readonly first: number;
  readonly last: number;
  readonly cron: string;
  readonly every: number;
  readonly taskMs: number;
  readonly lockAtMostFor: number;
  readonly lockAtLeastFor: number;
}

/** What a pod reports to the timeline; child processes send these as JSON lines on stdout. */
export type PodEvent =
  | { readonly type: 'ready'; readonly pod: string; readonly pid: number }
  | { readonly type: 'start'; readonly pod: string; readonly tick: number; readonly fence: number | null }
  | { readonly type: 'done'; readonly pod: string; readonly tick: number; readonly ms: number }
  | { readonly type: 'skip'; readonly pod: string; readonly tick: number; readonly reason: string }
  | { readonly type: 'failed'; readonly pod: string; readonly tick: number; readonly error: string }
  | { readonly type: 'lost'; readonly pod: string; readonly tick: number }
  | { readonly type: 'stopped'; readonly pod: string };

async function until(at: number): Promise<void> {
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait);
}

/**
 * One pod: schedule the demo job just before its first tick, run ticks until the last, then stop
 * the job (waiting for a run in progress). Every run takes `taskMs` and stops early if its lease is lost.
 */
export async function runPod(locks: Leasehold, pod: string, plan: DemoPlan, report: (e: PodEvent) => void) {
  const tickOf = (tick: Date | null) => tick?.getTime() ?? 0;
  locks.on('jobSkipped', (e) => report({ type: 'skip', pod, tick: tickOf(e.tick), reason: e.reason }));
  locks.on('jobFailed', (e) =>
    report({ type: 'failed', pod, tick: tickOf(e.tick), error: e.error instanceof Error ? e.error.message : '?' }),
  );
  locks.on('jobLost', (e) => report({ type: 'lost', pod, tick: tickOf(e.tick) }));
  await until(plan.first - Math.min(400, plan.every / 2));
  const job = locks.schedule(
    plan.job,
    plan.cron,
    async (signal, run) => {
      const tick = tickOf(run.tick);
      const started = performance.now();
      report({ type: 'start', pod, tick, fence: run.fencingToken });
      await sleep(plan.taskMs, undefined, { signal });
      report({ type: 'done', pod, tick, ms: Math.round(performance.now() - started) });
    },
    { lockAtMostFor: plan.lockAtMostFor, lockAtLeastFor: plan.lockAtLeastFor, instance: pod },
  );
  await until(plan.last + Math.min(300, plan.every / 3));
  await job.stop();
  report({ type: 'stopped', pod });
}
