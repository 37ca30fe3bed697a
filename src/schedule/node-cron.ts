import { ErrorCode, LockError, StoreUnavailableError } from '../core/errors.js';
import { coordinatorSettings, type RunDefaults } from './options.js';
import { type Claim, HeldRun, type Runner } from './run.js';
import type { JobRun, JobTask } from './types.js';

/** What the coordinator reads from node-cron's task context (structurally node-cron v4's TaskContext). */
export interface NodeCronContext {
  readonly date: Date;
  readonly task?: { readonly name?: string | undefined } | undefined;
}

/**
 * A run coordinator for node-cron v4 (`runCoordinator` with `distributed: true`, or
 * `cron.setRunCoordinator`): each fire of a named task runs on one instance only, with the same
 * tick identity, lease and history as `schedule()`. node-cron asks `shouldRun(key, ttlMs)` before
 * each fire (key = task name + ':' + the fire's ISO time, ttlMs = its `distributedLease`) and calls
 * `onComplete(key)` after it.
 */
export interface NodeCronCoordinator {
  shouldRun(key: string, ttlMs: number): Promise<boolean>;
  onComplete(key: string): Promise<void>;
  /**
   * Wrap a task for node-cron so it receives `(signal, run)` like a scheduled job's task, runs
   * where `assertLocked()` works, and its result (ok or failed) reaches the run history. Throws
   * NOT_LOCKED if node-cron runs it without asking this coordinator.
   */
  task<T>(fn: JobTask<T>): (context: NodeCronContext) => Promise<T>;
  /** The run a node-cron context belongs to on this instance, or null when this instance did not claim it. */
  current(context: NodeCronContext): JobRun | null;
}

// node-cron's key: `${task name}:${slot.toISOString()}`.
const KEY = /^(.+):(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$/;

function parseKey(key: string): { name: string; tick: number } {
  const match = typeof key === 'string' ? KEY.exec(key) : null;
  const tick = match ? Date.parse(match[2] as string) : Number.NaN;
  if (!match || Number.isNaN(tick)) {
    throw new LockError(
      ErrorCode.INVALID_ARGUMENT,
      `not a node-cron run key (task name, ':', ISO time): ${JSON.stringify(key)}`,
    );
  }
  return { name: match[1] as string, tick };
}

function keyOf(context: NodeCronContext): string {
  return `${context.task?.name ?? ''}:${context.date.toISOString()}`;
}

export function nodeCronCoordinator(runner: Runner, options: unknown, defaults: RunDefaults): NodeCronCoordinator {
  const settingsFor = coordinatorSettings(options, defaults);
  // Claimed runs between shouldRun and onComplete, by node-cron's key.
  const claimed = new Map<string, HeldRun | JobRun>();
  return {
    async shouldRun(key, ttlMs) {
      const { name, tick } = parseKey(key);
      // Asked once the instance is closed: a task left running on it, which throws CLOSED. Closed
      // while the claim was on its way (a shutdown racing a fire, which node-cron's shutdown does
      // not wait for): the fire is skipped like a refused one, with no error logged.
      const asked = !runner.closed;
      let claim: Claim;
      try {
        claim = await runner.claim(name, tick, settingsFor(ttlMs));
      } catch (error) {
        if (asked && error instanceof LockError && error.code === ErrorCode.CLOSED) return false;
        throw error;
      }
      if (claim.kind === 'held') {
        claimed.set(key, claim.held);
        return true;
      }
      if (claim.kind === 'unlocked') {
        claimed.set(key, claim.run);
        return true;
      }
      // Throwing makes node-cron skip with 'coordinator-error' (fail closed) rather than 'not-elected'.
      if (claim.reason === 'unavailable') {
        throw claim.error instanceof StoreUnavailableError
          ? claim.error
          : new StoreUnavailableError(`cannot claim ${key}: the backend is unavailable`);
      }
      if (claim.reason === 'error') throw claim.error;
      return false;
    },

    async onComplete(key) {
      const entry = claimed.get(key);
      claimed.delete(key);
      if (entry instanceof HeldRun) await entry.finish();
    },

    task<T>(fn: JobTask<T>) {
      return async (context: NodeCronContext): Promise<T> => {
        const entry = claimed.get(keyOf(context));
        if (!entry) {
          throw new LockError(
            ErrorCode.NOT_LOCKED,
            `node-cron ran ${JSON.stringify(keyOf(context))} without this coordinator's claim: set distributed: true and runCoordinator`,
          );
        }
        const result = await runner.perform(entry, fn);
        runner.report(entry instanceof HeldRun ? entry.run : entry, result);
        if (!result.ok) throw result.error;
        return result.value;
      };
    },

    current(context) {
      const entry = claimed.get(keyOf(context));
      if (!entry) return null;
      return entry instanceof HeldRun ? entry.run : entry;
    },
  };
}
