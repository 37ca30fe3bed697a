import type { Leasehold } from '../../src/index.js';
import { blockFor } from '../harness/index.js';

export interface EveryTickPlan {
  /** The job's period in ms (ticks aligned to the epoch). */
  readonly every: number;
  readonly lockAtLeastFor: number;
  /** How many periods to let the job run. */
  readonly ticks: number;
  /**
   * Make the claims of one tick (the third after scheduling) land this many ms late: the event
   * loop, which every instance of this process shares, is blocked from just before that tick until
   * this long after it. Default: no tick is made late.
   */
  readonly lateBy?: number;
}

export interface EveryTickResult {
  /** Every tick some instance fired (ran it, or skipped it), in order. */
  readonly fired: number[];
  readonly ran: {
    /** Ticks fired but run by no instance, with why each instance skipped it. */
    readonly missed: Array<{ tick: number; skipped: string[] }>;
    /** Ticks run more than once. */
    readonly twice: number[];
  };
  /** The tick whose claims were made late (see `lateBy`), or null. */
  readonly late: number | null;
}

/** The job's name in every plan. */
export const EVERY_TICK_JOB = 'every-tick';

/**
 * Schedule one job on every instance of `pods` for `ticks` periods, then stop it everywhere, and
 * tell which fired ticks no instance ran and which ran more than once.
 */
export async function scheduleEveryTick(
  pods: readonly Leasehold[],
  plan: EveryTickPlan,
  sleep: (ms: number) => Promise<unknown>,
): Promise<EveryTickResult> {
  const name = EVERY_TICK_JOB;
  const runs = new Map<number, number>();
  const skipped = new Map<number, string[]>();
  for (const pod of pods) {
    pod.on('jobSkipped', (e) => {
      if (e.name !== name || e.tick === null) return;
      const tick = e.tick.getTime();
      skipped.set(tick, [...(skipped.get(tick) ?? []), `${e.instance}: ${e.reason}`]);
    });
  }
  const task = (_signal: AbortSignal, run: { tick: Date | null }) => {
    const tick = run.tick?.getTime() ?? 0;
    runs.set(tick, (runs.get(tick) ?? 0) + 1);
  };
  const jobs = pods.map((pod) => pod.schedule(name, plan.every, task, { lockAtLeastFor: plan.lockAtLeastFor }));
  let late: number | null = null;
  let stall: ReturnType<typeof setTimeout> | undefined;
  const { lateBy } = plan;
  if (lateBy !== undefined) {
    const tick = (Math.floor(Date.now() / plan.every) + 3) * plan.every;
    late = tick;
    stall = setTimeout(() => blockFor(tick + lateBy - Date.now()), tick - 50 - Date.now());
  }
  await sleep(plan.ticks * plan.every);
  clearTimeout(stall);
  await Promise.all(jobs.map((job) => job.stop()));
  const fired = [...new Set([...runs.keys(), ...skipped.keys()])].sort((x, y) => x - y);
  return {
    fired,
    ran: {
      missed: fired.filter((t) => !runs.has(t)).map((tick) => ({ tick, skipped: skipped.get(tick) ?? [] })),
      twice: fired.filter((t) => (runs.get(t) ?? 0) > 1),
    },
    late,
  };
}
