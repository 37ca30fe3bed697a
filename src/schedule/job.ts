import { DEFAULTS } from '../core/defaults.js';
import { optionalInteger } from '../core/validate.js';
import type { RunRecord } from './history.js';
import { MAX_HISTORY, MAX_TIMER, type ScheduleSettings } from './options.js';
import type { Runner } from './run.js';
import type { TickSource } from './tick.js';
import type { JobTask } from './types.js';

/**
 * A scheduled job on one instance. At each tick it tries to claim the tick in the store; the
 * instance that claims it runs the task, the others skip it. Missed ticks (a blocked event loop,
 * a paused process) are not replayed: the job moves on to the next tick after now.
 */
export class Job {
  /** The job's name, which is also its lock's name. */
  readonly name: string;
  readonly #runner: Runner;
  readonly #source: TickSource;
  readonly #task: JobTask;
  readonly #settings: ScheduleSettings;
  readonly #onStop: (job: Job) => void;
  readonly #running = new Set<Promise<void>>();
  #next: number | null;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;

  /** @internal Created by `Leasehold.schedule`. */
  constructor(
    name: string,
    source: TickSource,
    task: JobTask,
    settings: ScheduleSettings,
    runner: Runner,
    onStop: (job: Job) => void,
  ) {
    this.name = name;
    this.#source = source;
    this.#task = task;
    this.#settings = settings;
    this.#runner = runner;
    this.#onStop = onStop;
    this.#next = source.next(settings.clock());
    this.#arm();
  }

  /** The next tick's scheduled time, or null once stopped (or when the cron expression has no more). */
  nextRun(): Date | null {
    return this.#stopped || this.#next === null ? null : new Date(this.#next);
  }

  /** True while a run of this job is in progress on this instance. */
  get running(): boolean {
    return this.#running.size > 0;
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Stop scheduling and wait for a run in progress here to finish. Its lock is not dropped early:
   * the finish keeps it until lockAtLeastFor from the run's claim, like any run's.
   */
  async stop(): Promise<void> {
    this.halt();
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }

  /** The job's runs across every instance, newest first, from the store. Default limit 50. */
  history(limit?: number): Promise<RunRecord[]> {
    return this.#runner.history(this.name, optionalInteger(limit, 'limit', 1, MAX_HISTORY, DEFAULTS.historyLimit));
  }

  /** @internal Stop scheduling without waiting (Leasehold.close). */
  halt(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#onStop(this);
  }

  #arm(): void {
    if (this.#stopped || this.#next === null) return;
    const delay = Math.min(Math.max(0, this.#next - this.#settings.clock()), MAX_TIMER);
    this.#timer = setTimeout(() => this.#fire(), delay);
    if (this.#settings.unref) this.#timer.unref();
  }

  #fire(): void {
    this.#timer = undefined;
    if (this.#stopped || this.#next === null) return;
    const at = this.#settings.clock();
    // Timers may wake a little early by the wall clock, or long delays are capped: look again.
    if (at < this.#next) {
      this.#arm();
      return;
    }
    const tick = this.#next;
    this.#next = this.#source.next(Math.max(tick, at));
    this.#arm();
    // runTick rejects only when the instance was closed meanwhile: nothing left to do then.
    const run = this.#runner.runTick(this.name, tick, this.#settings, this.#task).then(
      () => undefined,
      () => undefined,
    );
    this.#running.add(run);
    void run.finally(() => this.#running.delete(run));
  }
}
