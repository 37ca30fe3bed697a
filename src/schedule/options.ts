import { DEFAULTS } from '../core/defaults.js';
import { invalidArgument } from '../core/errors.js';
import * as validate from '../core/validate.js';

export type JobWhenUnavailable = 'skip' | 'run';

/** What every run of a job shares: `schedule`, `runOnce` and the node-cron coordinator. */
export interface RunOptions {
  /**
   * ms a run holds the job's lock at most: how long a crashed instance can block the job. While
   * the task runs, the lease is extended (see `keepAlive`), and the task's `signal` aborts if it
   * is lost. Default 30_000.
   */
  lockAtMostFor?: number;
  /**
   * ms the lock is kept from the run's claim (server time), however short the task: an instance
   * whose clock lags finds the job locked. At most `lockAtMostFor`. Default 0. It holds off runs
   * without a tick, plain acquires and claims of the same or an earlier tick, not a later tick:
   * once the run finished, the claim of a later tick takes over a lock only this keeps, unless a
   * waiter is queued behind it (docs/scheduler.md, "lockAtLeastFor and the next tick").
   */
  lockAtLeastFor?: number;
  /**
   * When the backend is unreachable: `'skip'` does not run (fail closed); `'run'` runs the task
   * without a lock (`run.lock` is null; for idempotent work only). Default `'skip'`.
   */
  whenUnavailable?: JobWhenUnavailable;
  /** Extend the lease every lockAtMostFor/3 while the task runs. Default true. */
  keepAlive?: boolean;
  /** This instance's name in the run history and next to the run's lease. Default: the Leasehold's `instance`. */
  instance?: string;
  /**
   * ms a tick may lie ahead of the store's clock: an instance whose clock runs further ahead is
   * refused the tick (skipped as `clock-skew`) instead of claiming it early for everyone. Default 1_000.
   */
  clockTolerance?: number;
  /** Runs the store keeps in the job's history (the oldest beyond are dropped). Default 50. */
  historyLimit?: number;
}

/** Options of `schedule()`. */
export interface ScheduleOptions extends RunOptions {
  /** IANA time zone for a cron expression (e.g. `'Asia/Seoul'`). Default: the process's zone. Ignored for intervals. */
  timezone?: string;
  /**
   * The wall clock deciding when ticks are due, in ms since the epoch. Default `Date.now`.
   * Leases never use it: they run on the monotonic clock and the server's.
   */
  clock?: () => number;
  /** Let the process exit while this job waits for its next tick. Default false. */
  unref?: boolean;
}

/** Options of `runOnce()`. */
export interface RunOnceOptions extends RunOptions {
  /**
   * The identity of this run, such as the date of a nightly settlement: once a run with this tick
   * (or a later one) was claimed, another call with it reports `already-ran`. Default: none (only
   * the lock, and lockAtLeastFor, keep calls apart).
   */
  tick?: Date | number;
}

/** Options of the node-cron coordinator; the lease is node-cron's `distributedLease` (30_000 by default). */
export type NodeCronCoordinatorOptions = Omit<RunOptions, 'lockAtMostFor'>;

/** @internal */
export interface RunSettings {
  readonly lockAtMostFor: number;
  readonly lockAtLeastFor: number;
  readonly whenUnavailable: JobWhenUnavailable;
  readonly keepAlive: boolean;
  readonly instance: string;
  readonly historyLimit: number;
  readonly clockTolerance: number;
}

/** What a run's settings default to from the Leasehold instance. */
export interface RunDefaults {
  readonly instance: string;
  readonly driftFactor: number;
}

/** @internal */
export interface ScheduleSettings extends RunSettings {
  readonly timezone: string | undefined;
  readonly clock: () => number;
  readonly unref: boolean;
}

const WHEN_UNAVAILABLE: readonly JobWhenUnavailable[] = ['skip', 'run'];

/** The options each entry point takes: any other key is refused, naming it. */
const COORDINATOR_KEYS = [
  'lockAtLeastFor',
  'whenUnavailable',
  'keepAlive',
  'instance',
  'clockTolerance',
  'historyLimit',
] as const satisfies readonly (keyof NodeCronCoordinatorOptions)[];
const RUN_KEYS = [...COORDINATOR_KEYS, 'lockAtMostFor'] as const satisfies readonly (keyof RunOptions)[];
const SCHEDULE_KEYS = [...RUN_KEYS, 'timezone', 'clock', 'unref'] as const satisfies readonly (keyof ScheduleOptions)[];
const RUN_ONCE_KEYS = [...RUN_KEYS, 'tick'] as const satisfies readonly (keyof RunOnceOptions)[];
/** Largest history a job keeps, and the most runs one read returns. */
export const MAX_HISTORY = 10_000;

function runSettings(o: Record<string, unknown>, lockAtMostFor: number, d: RunDefaults): RunSettings {
  const lockAtLeastFor = validate.optionalDuration(o.lockAtLeastFor, 'lockAtLeastFor', 0, DEFAULTS.lockAtLeastFor);
  if (lockAtLeastFor > lockAtMostFor) {
    throw invalidArgument(
      `\`lockAtLeastFor\` (${lockAtLeastFor} ms) must not exceed \`lockAtMostFor\` (${lockAtMostFor} ms)`,
    );
  }
  return {
    lockAtMostFor,
    lockAtLeastFor,
    whenUnavailable: validate.optionalChoice(
      o.whenUnavailable,
      'whenUnavailable',
      WHEN_UNAVAILABLE,
      DEFAULTS.jobWhenUnavailable,
    ),
    keepAlive: validate.optionalBoolean(o.keepAlive, 'keepAlive', DEFAULTS.keepAlive),
    instance: validate.instance(o.instance, d.instance),
    historyLimit: validate.optionalInteger(o.historyLimit, 'historyLimit', 1, MAX_HISTORY, DEFAULTS.historyLimit),
    clockTolerance: validate.optionalDuration(o.clockTolerance, 'clockTolerance', 0, DEFAULTS.clockTolerance),
  };
}

function lockAtMostFor(o: Record<string, unknown>, d: RunDefaults): number {
  return validate.optionalTtl(o.lockAtMostFor, 'lockAtMostFor', d.driftFactor, DEFAULTS.lockAtMostFor);
}

export function scheduleSettings(options: unknown, d: RunDefaults): ScheduleSettings {
  const o = validate.options(options, 'schedule options', SCHEDULE_KEYS);
  const clock = validate.optionalFn<() => number>(o.clock, 'clock') ?? Date.now;
  const probe: unknown = clock();
  if (typeof probe !== 'number' || !Number.isFinite(probe)) {
    throw invalidArgument(`\`clock\` must return ms since the epoch, got ${validate.show(probe)}`);
  }
  return {
    ...runSettings(o, lockAtMostFor(o, d), d),
    timezone: validate.optionalTimezone(o.timezone),
    clock,
    unref: validate.optionalBoolean(o.unref, 'unref', false),
  };
}

export function runOnceSettings(options: unknown, d: RunDefaults): RunSettings & { readonly tick: number | null } {
  const o = validate.options(options, 'runOnce options', RUN_ONCE_KEYS);
  return { ...runSettings(o, lockAtMostFor(o, d), d), tick: validate.optionalInstant(o.tick, 'tick') ?? null };
}

/** The coordinator learns its lease per call; lockAtLeastFor is checked against it then. */
export function coordinatorSettings(options: unknown, d: RunDefaults): (lease: number) => RunSettings {
  if ((options as { lockAtMostFor?: unknown } | undefined)?.lockAtMostFor !== undefined) {
    throw invalidArgument("`lockAtMostFor` is node-cron's `distributedLease` option here; set it on the task");
  }
  const o = validate.options(options, 'nodeCronCoordinator options', COORDINATOR_KEYS);
  runSettings(o, DEFAULTS.maxDuration, d);
  return (lease) => runSettings(o, validate.ttl(lease, 'distributedLease', d.driftFactor), d);
}

/** ms the scheduler waits at most between two looks at the clock (what a Node timer can hold). */
export const MAX_TIMER = DEFAULTS.maxDuration;
