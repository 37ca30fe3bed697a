import type { AcquireLoop, Outcome } from '../core/acquire-loop.js';
import { now } from '../core/clock.js';
import { DEFAULTS } from '../core/defaults.js';
import { channels, type JobMessage } from '../core/diagnostics.js';
import { closedError, ErrorCode, invalidArgument, LockError, StoreUnavailableError } from '../core/errors.js';
import { Lock } from '../core/lock.js';
import { NEVER_ABORTED } from '../core/never-aborted.js';
import { newOwnerToken } from '../core/owner.js';
import type { Claimed, JobLock } from '../primitives/job-lock.js';
import type { ClaimReply, FinishRequest } from '../store/port.js';
import { runInScope } from './assert-locked.js';
import { type RunRecord, runRecords } from './history.js';
import type { SchedulerHost } from './host.js';
import type { RunSettings } from './options.js';
import type { HeldJobRun, JobRun, JobTask, SkipReason } from './types.js';

type Finished = FinishRequest['outcome'];

/** Tell diagnostics how a tick went; nothing while nobody listens. */
function told(message: JobMessage): void {
  if (channels.job.hasSubscribers) channels.job.publish(message);
}

function errorText(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > DEFAULTS.historyErrorLength ? `${text.slice(0, DEFAULTS.historyErrorLength - 1)}…` : text;
}

/** A claimed run: its Lock handle, and what its finish will record. */
export class HeldRun {
  readonly run: HeldJobRun;
  readonly #runner: Runner;
  readonly #startedAt: number;
  readonly #lockAtLeastFor: number;
  #outcome: Finished = 'done';
  #error: string | null = null;

  /** @internal */
  constructor(runner: Runner, run: HeldJobRun, startedAt: number, lockAtLeastFor: number) {
    this.#runner = runner;
    this.run = run;
    this.#startedAt = startedAt;
    this.#lockAtLeastFor = lockAtLeastFor;
  }

  get lock(): Lock {
    return this.run.lock;
  }

  /** Set what the finish records: the task's result, if the caller knows it. */
  settle(outcome: 'ok' | 'failed', error?: unknown): void {
    this.#outcome = outcome;
    this.#error = outcome === 'failed' ? errorText(error) : null;
  }

  /** @internal The Lock's release: record the outcome and end the lease, honouring lockAtLeastFor. */
  async end(lock: Lock): Promise<boolean> {
    const lost = lock.lostError;
    const outcome: Finished = lost && lost.reason !== 'closed' ? 'lost' : this.#outcome;
    return this.#runner.finish(lock, {
      owner: lock.owner,
      fence: lock.fencingToken,
      startedAt: this.#startedAt,
      outcome,
      error: outcome === 'lost' && this.#error === null && lost ? errorText(lost) : this.#error,
      lockAtLeastFor: this.#lockAtLeastFor,
    });
  }

  /** Finish the run. Never throws: a failure is a `releaseFailed` event and the lease ends by its ttl. */
  async finish(): Promise<void> {
    await this.#runner.release(this.lock);
  }
}

export type Claim =
  | { readonly kind: 'held'; readonly held: HeldRun }
  /** whenUnavailable 'run': the backend could not be asked; the task runs without a lock. */
  | { readonly kind: 'unlocked'; readonly run: JobRun }
  | { readonly kind: 'skipped'; readonly reason: SkipReason; readonly error?: unknown };

export type Performed<T> =
  | { readonly ok: true; readonly value: T; readonly duration: number }
  | { readonly ok: false; readonly error: unknown; readonly duration: number };

/** Claim, perform, finish: one run of a job, the same for schedule, runOnce and node-cron. */
export class Runner {
  readonly #host: SchedulerHost;
  readonly #jobs: JobLock;
  readonly #loop: AcquireLoop;

  constructor(host: SchedulerHost) {
    this.#host = host;
    if (!host.jobs) throw invalidArgument(host.noJobs);
    this.#jobs = host.jobs;
    this.#loop = host.loop;
  }

  /** Whether the instance has been closed: no claim is made any more. */
  get closed(): boolean {
    return this.#host.isClosed();
  }

  /** Claim tick `tick` of job `name` (null: no tick identity). Emits `jobSkipped` when it will not run. */
  async claim(name: string, tick: number | null, s: RunSettings): Promise<Claim> {
    if (this.#host.isClosed()) throw closedError();
    const owner = newOwnerToken();
    let outcome: Outcome<Claimed, Exclude<ClaimReply, { claimed: true }>>;
    try {
      // The job lock on the acquire loop, trying once: a claim never waits for a tick.
      outcome = await this.#loop.run({
        name,
        owner,
        wait: 0,
        signal: undefined,
        attempt: async () => {
          const reply = await this.#jobs.claim(name, {
            owner,
            ttl: s.lockAtMostFor,
            tick,
            instance: s.instance,
            historyLimit: s.historyLimit,
            clockTolerance: s.clockTolerance,
          });
          return reply.claimed ? { granted: reply } : { refused: reply, retryIn: -1 };
        },
        giveBack: (claimed) =>
          this.#jobs.abandon(name, owner, claimed, 'the instance was closed before the task started'),
      });
    } catch (error) {
      if (error instanceof LockError && error.code === ErrorCode.CLOSED) throw error;
      return this.#unreachable(name, tick, s, error);
    }
    const tickDate = tick === null ? null : new Date(tick);
    if ('refused' in outcome) return this.#skip(name, tickDate, s.instance, outcome.refused.reason);
    const reply = outcome.granted;
    let held: HeldRun | undefined;
    const lock = new Lock(
      {
        name,
        owner,
        fencingToken: reply.fence,
        ttl: s.lockAtMostFor,
        validUntil: reply.validUntil,
        autoExtend: s.keepAlive,
      },
      // The instance's keeper and lock events; only the release differs: it records the outcome.
      { ...this.#host.context, release: (l) => (held ? held.end(l) : Promise.resolve(false)) },
    );
    const run: HeldJobRun = Object.freeze({
      name,
      tick: tickDate,
      lock,
      fencingToken: lock.fencingToken,
      instance: s.instance,
    });
    held = new HeldRun(this, run, reply.startedAt, s.lockAtLeastFor);
    this.#host.adopt(lock);
    return { kind: 'held', held };
  }

  #unreachable(name: string, tick: number | null, s: RunSettings, error: unknown): Claim {
    const tickDate = tick === null ? null : new Date(tick);
    if (!(error instanceof StoreUnavailableError)) return this.#skip(name, tickDate, s.instance, 'error', error);
    if (s.whenUnavailable === 'run') {
      const run: JobRun = Object.freeze({ name, tick: tickDate, lock: null, fencingToken: null, instance: s.instance });
      return { kind: 'unlocked', run };
    }
    return this.#skip(name, tickDate, s.instance, 'unavailable', error);
  }

  #skip(name: string, tick: Date | null, instance: string, reason: SkipReason, error?: unknown): Claim {
    told({ name, tick, instance, outcome: 'skipped', reason });
    if (error === undefined) {
      this.#host.emit('jobSkipped', { name, tick, instance, reason });
      return { kind: 'skipped', reason };
    }
    this.#host.emit('jobSkipped', { name, tick, instance, reason, error });
    return { kind: 'skipped', reason, error };
  }

  /** Run the task of a claimed (or unlocked) run and report it; a held run is settled, not finished. */
  async perform<T>(target: HeldRun | JobRun, task: JobTask<T>): Promise<Performed<T>> {
    const held = target instanceof HeldRun ? target : undefined;
    const run = held ? held.run : (target as JobRun);
    const signal = held ? held.lock.signal : NEVER_ABORTED;
    const onLost = () => {
      if (!held) return;
      const error = held.lock.lostError;
      if (error) {
        told({
          name: run.name,
          tick: run.tick,
          instance: run.instance,
          outcome: 'lost',
          fencingToken: run.fencingToken,
        });
        this.#host.emit('jobLost', {
          name: run.name,
          tick: run.tick,
          instance: run.instance,
          fencingToken: held.run.fencingToken,
          error,
        });
      }
    };
    if (signal.aborted) onLost();
    else signal.addEventListener('abort', onLost, { once: true });
    const started = now();
    let result: Performed<T>;
    try {
      const value = await runInScope(held?.run, async () => task(signal, run));
      result = { ok: true, value, duration: Math.round(now() - started) };
    } catch (error) {
      result = { ok: false, error, duration: Math.round(now() - started) };
    } finally {
      signal.removeEventListener('abort', onLost);
    }
    if (held) {
      if (result.ok) held.settle('ok');
      else held.settle('failed', result.error);
    }
    return result;
  }

  /** Emit `jobRun` or `jobFailed` for a performed run. */
  report(run: JobRun, result: Performed<unknown>): void {
    const base = { name: run.name, tick: run.tick, instance: run.instance, fencingToken: run.fencingToken };
    told({ ...base, outcome: result.ok ? 'ran' : 'failed', duration: result.duration });
    if (result.ok) this.#host.emit('jobRun', { ...base, duration: result.duration });
    else this.#host.emit('jobFailed', { ...base, duration: result.duration, error: result.error });
  }

  /** Claim, perform, finish, report. Never rejects except with closedError (a closed instance). */
  async runTick<T>(
    name: string,
    tick: number | null,
    s: RunSettings,
    task: JobTask<T>,
  ): Promise<{ readonly claim: Claim; readonly result?: Performed<T> }> {
    const claim = await this.claim(name, tick, s);
    if (claim.kind === 'skipped') return { claim };
    const target = claim.kind === 'held' ? claim.held : claim.run;
    const result = await this.perform(target, task);
    if (claim.kind === 'held') await claim.held.finish();
    this.report(claim.kind === 'held' ? claim.held.run : claim.run, result);
    return { claim, result };
  }

  /** @internal Lock.release of a job lock: the run recorded and the lease ended, bounded by commandTimeout. */
  async finish(lock: Lock, request: FinishRequest): Promise<boolean> {
    const reply = await this.#jobs.finish(lock.name, request);
    const ended = reply.lease === 'kept' || reply.lease === 'released';
    this.#host.onReleased(lock, ended);
    return ended;
  }

  /** Release a job lock, unless the instance was closed (its leases then end by their ttl). */
  async release(lock: Lock): Promise<void> {
    if (this.#host.isClosed()) return;
    try {
      await lock.release();
    } catch (error) {
      this.#host.onReleaseFailed(lock, error);
    }
  }

  async history(name: string, limit: number): Promise<RunRecord[]> {
    if (this.#host.isClosed()) throw closedError();
    const state = await this.#jobs.read(name, limit);
    return runRecords(name, state);
  }
}
