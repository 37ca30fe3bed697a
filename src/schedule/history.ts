import type { JobState, StoredOutcome } from '../store/port.js';

/**
 * How a run ended: `running` (its lease is still held), `ok` (the task returned), `failed` (the
 * task threw), `done` (finished, but the caller did not say how: node-cron's coordinator hook),
 * `lost` (the lease was lost while the task ran), `abandoned` (the lease ended without the run
 * reporting back: the instance crashed or was closed mid-run, or a claim was confirmed too late
 * for its task to run).
 */
export type RunOutcome = StoredOutcome;

/** One run of a job, from the history kept in the store. Times are the server's clock. */
export interface RunRecord {
  readonly name: string;
  /** The tick's scheduled time; null for a run without tick identity (`runOnce` without `tick`). */
  readonly tick: Date | null;
  /** The instance that ran it (the `instance` option). */
  readonly instance: string;
  readonly fencingToken: number;
  readonly startedAt: Date;
  readonly finishedAt: Date | null;
  /** ms from start to finish on the server's clock; null while running or when abandoned. */
  readonly duration: number | null;
  readonly outcome: RunOutcome;
  /** The task's error message (truncated), for `failed` and some `lost` or `abandoned` runs. */
  readonly error: string | null;
}

/**
 * Runs newest first. A record still marked running whose lease is gone (the lock is free, or
 * held under a newer fencing token) is reported as abandoned: nobody will report it back.
 */
export function runRecords(name: string, state: JobState): RunRecord[] {
  return state.runs.map((r) => {
    const live = state.held && state.fence === r.fence;
    return {
      name,
      tick: r.tick === null ? null : new Date(r.tick),
      instance: r.instance,
      fencingToken: r.fence,
      startedAt: new Date(r.startedAt),
      finishedAt: r.finishedAt === null ? null : new Date(r.finishedAt),
      duration: r.finishedAt === null ? null : Math.max(0, r.finishedAt - r.startedAt),
      outcome: r.outcome === 'running' && !live ? 'abandoned' : r.outcome,
      error: r.error,
    };
  });
}
