import { DEFAULTS } from '../core/defaults.js';
import { closedError } from '../core/errors.js';
import * as validate from '../core/validate.js';
import type { RunRecord } from './history.js';
import type { SchedulerHost } from './host.js';
import { Job } from './job.js';
import { type NodeCronCoordinator, nodeCronCoordinator } from './node-cron.js';
import { MAX_HISTORY, runOnceSettings, scheduleSettings } from './options.js';
import { Runner } from './run.js';
import { tickSource } from './tick.js';
import type { JobTask, RunOnceResult } from './types.js';

/** The jobs of one Leasehold instance. Created on first use; close() halts them all. */
export class Scheduler {
  readonly #host: SchedulerHost;
  readonly #runner: Runner;
  readonly #jobs = new Set<Job>();

  constructor(host: SchedulerHost) {
    this.#host = host;
    this.#runner = new Runner(host);
  }

  schedule(name: unknown, when: unknown, task: unknown, options: unknown): Job {
    if (this.#host.isClosed()) throw closedError();
    validate.lockName(name, 'job name');
    validate.fn(task, 'schedule task');
    const settings = scheduleSettings(options, this.#host);
    const source = tickSource(when, settings.timezone);
    const job = new Job(name as string, source, task as JobTask, settings, this.#runner, (j) => this.#jobs.delete(j));
    this.#jobs.add(job);
    return job;
  }

  async runOnce<T>(name: unknown, task: unknown, options: unknown): Promise<RunOnceResult<T>> {
    validate.lockName(name, 'job name');
    validate.fn(task, 'runOnce task');
    const settings = runOnceSettings(options, this.#host);
    const { claim, result } = await this.#runner.runTick(name as string, settings.tick, settings, task as JobTask<T>);
    if (claim.kind === 'skipped') {
      if (claim.reason === 'error') throw claim.error;
      return { ran: false, reason: claim.reason };
    }
    if (!result) throw new Error('unreachable: a claimed run has a result');
    if (!result.ok) throw result.error;
    return { ran: true, value: result.value };
  }

  history(name: unknown, limit: unknown): Promise<RunRecord[]> {
    validate.lockName(name, 'job name');
    return this.#runner.history(
      name as string,
      validate.optionalInteger(limit, 'limit', 1, MAX_HISTORY, DEFAULTS.historyLimit),
    );
  }

  nodeCronCoordinator(options: unknown): NodeCronCoordinator {
    if (this.#host.isClosed()) throw closedError();
    return nodeCronCoordinator(this.#runner, options, this.#host);
  }

  /** Halt every job's timer; runs in progress see their signals abort as close() abandons their locks. */
  close(): void {
    for (const job of [...this.#jobs]) job.halt();
  }
}
