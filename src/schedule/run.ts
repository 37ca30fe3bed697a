import { now, validUntil } from '../core/clock.js';
import { DEFAULTS } from '../core/defaults.js';
import { closedError, invalidArgument, RedisUnavailableError } from '../core/errors.js';
import { newOwnerToken } from '../core/owner.js';
import { Lock } from '../locks/lock.js';
import { bounded } from '../store/bounded.js';
import { type JobKeys, jobKeys } from '../store/redis/keys.js';
import type { ClaimReply, FinishRequest, HandOn, Store } from '../store/port.js';
import { runInScope } from './assert-locked.js';
import { type RunRecord, runRecords } from './history.js';
import type { SchedulerHost } from './host.js';
import type { RunSettings } from './options.js';
import type { HeldJobRun, JobRun, JobTask, SkipReason } from './types.js';

type Finished = FinishRequest['outcome'];

/** The store with the scheduler's methods present. */
type JobStore = Store & Required<Pick<Store, 'claimTick' | 'finishTick' | 'readJob'>>;

export function jobStore(store: Store | undefined): JobStore {
  if (!store) {
    throw invalidArgument(
      'scheduled jobs need a Leasehold on one store (a Redis client, a Redis Cluster or a MemoryStore); ' +
        'this instance is Redlock over several independent masters, where a tick marker has no single home',
    );
  }
  if (!store.claimTick || !store.finishTick || !store.readJob) {
    throw invalidArgument(
      `this ${store.kind} store cannot run scheduled jobs (it has no claimTick/finishTick/readJob)`,
    );
  }
  return store as JobStore;
}

const NEVER_ABORTED = new AbortController().signal;

function errorText(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > DEFAULTS.historyErrorLength ? `${text.slice(0, DEFAULTS.historyErrorLength - 1)}…` : text;
}

/** A claimed run: its Lock handle, and what its finish will record. */
export class HeldRun {
  readonly run: HeldJobRun;
  readonly #runner: Runner;
  readonly #keys: JobKeys;
  readonly #startedAt: number;
  readonly #lockAtLeastFor: number;
  #outcome: Finished = 'done';
  #error: string | null = null;

  /** @internal */
  constructor(runner: Runner, keys: JobKeys, run: HeldJobRun, startedAt: number, lockAtLeastFor: number) {
    this.#runner = runner;
    this.#keys = keys;
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
    return this.#runner.finish(lock, this.#keys, {
      owner: lock.owner,
      fence: lock.fencingToken,
      startedAt: this.#startedAt,
      outcome,
      error: outcome === 'lost' && this.#error === null && lost ? errorText(lost) : this.#error,
      lockAtLeastFor: this.#lockAtLeastFor,
      handOn: this.#runner.handOn,
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
  readonly #store: JobStore;

  constructor(host: SchedulerHost) {
    this.#host = host;
    this.#store = jobStore(host.store);
  }

  get handOn(): HandOn {
    return this.#host.handOn;
  }

  #bounded<T>(promise: Promise<T>, action: string): Promise<T> {
    return bounded(this.#store, promise, action, this.#host.commandTimeout);
  }

  /** Record a claimed run that will not run, and end its lease at once. */
  #abandon(keys: JobKeys, owner: string, claim: { fence: number; startedAt: number }, why: string): Promise<unknown> {
    return this.#store.finishTick(keys, {
      owner,
      fence: claim.fence,
      startedAt: claim.startedAt,
      outcome: 'abandoned',
      error: why,
      lockAtLeastFor: 0,
      handOn: this.#host.handOn,
    });
  }

  /** Claim tick `tick` of job `name` (null: no tick identity). Emits `jobSkipped` when it will not run. */
  async claim(name: string, tick: number | null, s: RunSettings): Promise<Claim> {
    if (this.#host.isClosed()) throw closedError();
    const keys = jobKeys(this.#host.prefix, name);
    const owner = newOwnerToken();
    let reply: ClaimReply;
    let sentAt: number;
    try {
      const gate = this.#host.gate();
      if (gate) await gate;
      sentAt = now();
      const pending = this.#store.claimTick(keys, {
        owner,
        ttl: s.lockAtMostFor,
        tick,
        instance: s.instance,
        historyLimit: s.historyLimit,
        fenceRetention: this.#host.fenceRetention,
        clockTolerance: s.clockTolerance,
      });
      try {
        reply = await this.#bounded(pending, 'claim-tick');
      } catch (error) {
        // Confirmed after we gave up: nobody will run it, so record that and free the lock.
        pending
          .then((late) =>
            late.claimed
              ? this.#abandon(keys, owner, late, 'the claim was confirmed after commandTimeout; the task did not run')
              : undefined,
          )
          .catch(() => undefined);
        throw error;
      }
    } catch (error) {
      return this.#unreachable(name, tick, s, error);
    }
    const tickDate = tick === null ? null : new Date(tick);
    if (!reply.claimed) return this.#skip(name, tickDate, s.instance, reply.reason);
    if (this.#host.isClosed()) {
      await this.#abandon(keys, owner, reply, 'the instance was closed before the task started').catch(() => undefined);
      throw closedError();
    }
    const until = validUntil(sentAt, s.lockAtMostFor, this.#host.driftFactor, this.#host.driftConstant);
    if (until - now() < 1) {
      // The claim answered too late to leave the run any validity: no task may run on it.
      const why = `the claim answered after its ${s.lockAtMostFor} ms lease had no validity left; the task did not run`;
      await this.#abandon(keys, owner, reply, why).catch(() => undefined);
      return this.#unreachable(name, tick, s, new RedisUnavailableError(`${this.#store.kind}: claim-tick: ${why}`));
    }
    let held: HeldRun | undefined;
    const lock = new Lock(
      {
        name,
        owner,
        fencingToken: reply.fence,
        ttl: s.lockAtMostFor,
        validUntil: until,
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
    held = new HeldRun(this, keys, run, reply.startedAt, s.lockAtLeastFor);
    this.#host.adopt(lock);
    return { kind: 'held', held };
  }

  #unreachable(name: string, tick: number | null, s: RunSettings, error: unknown): Claim {
    const tickDate = tick === null ? null : new Date(tick);
    if (!(error instanceof RedisUnavailableError)) return this.#skip(name, tickDate, s.instance, 'error', error);
    if (s.whenUnavailable === 'run') {
      const run: JobRun = Object.freeze({ name, tick: tickDate, lock: null, fencingToken: null, instance: s.instance });
      return { kind: 'unlocked', run };
    }
    return this.#skip(name, tickDate, s.instance, 'unavailable', error);
  }

  #skip(name: string, tick: Date | null, instance: string, reason: SkipReason, error?: unknown): Claim {
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

  /** @internal Lock.release of a job lock: the finish-tick script, bounded by commandTimeout. */
  async finish(lock: Lock, keys: JobKeys, request: FinishRequest): Promise<boolean> {
    const reply = await this.#bounded(this.#store.finishTick(keys, request), 'finish-tick');
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
    const state = await this.#bounded(this.#store.readJob(jobKeys(this.#host.prefix, name), limit), 'read-job');
    return runRecords(name, state);
  }
}
