import { now, validUntil } from '../core/clock.js';
import { StoreUnavailableError } from '../core/errors.js';
import { bounded } from '../store/bounded.js';
import type {
  ClaimReply,
  ClaimRequest,
  FinishReply,
  FinishRequest,
  JobState,
  JobStore,
  StoreInfo,
} from '../store/port.js';

export interface JobLockOptions {
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
  /** The store's configuration check before a claim (the eviction policy); undefined once passed. */
  gate(): Promise<void> | undefined;
}

/** A claim that went through: the store's reply, and its validity on the monotonic clock. */
export type Claimed = Extract<ClaimReply, { claimed: true }> & { readonly validUntil: number };

/**
 * The job lock: the scheduler's primitive. Taken once per tick (the claim also records the tick and
 * a `running` run, in one step on the store), extended like any lease, and released by recording
 * how the run ended (which hands the lock on as a mutex's release does). One store only: a tick
 * marker has no single home across independent masters. Every call is bounded by commandTimeout; a
 * claim confirmed after we gave up, or too late to leave validity, is recorded as abandoned.
 */
export class JobLock {
  readonly #store: JobStore & StoreInfo;
  readonly #options: JobLockOptions;

  constructor(store: JobStore & StoreInfo, options: JobLockOptions) {
    this.#store = store;
    this.#options = options;
  }

  get kind(): string {
    return this.#store.kind;
  }

  #bounded<T>(promise: Promise<T>, action: string): Promise<T> {
    return bounded(this.#store, promise, action, this.#options.commandTimeout);
  }

  /** Claim a tick of job `name`: the claim, or the store's refusal. Throws StoreUnavailableError when it cannot tell. */
  async claim(name: string, request: ClaimRequest): Promise<Claimed | Exclude<ClaimReply, { claimed: true }>> {
    const gate = this.#options.gate();
    if (gate) await gate;
    const sentAt = now();
    const pending = this.#store.claimTick(name, request);
    let reply: ClaimReply;
    try {
      reply = await this.#bounded(pending, 'claim-tick');
    } catch (error) {
      // Confirmed after we gave up: nobody will run it, so record that and free the lock.
      const why = 'the claim was confirmed after commandTimeout; the task did not run';
      pending
        .then((late) => (late.claimed ? this.abandon(name, request.owner, late, why) : undefined))
        .catch(() => undefined);
      throw error;
    }
    if (!reply.claimed) return reply;
    const { driftFactor, driftConstant } = this.#options;
    const until = validUntil(sentAt, request.ttl, driftFactor, driftConstant);
    if (until - now() < 1) {
      // The claim answered too late to leave the run any validity: no task may run on it.
      const why = `the claim answered after its ${request.ttl} ms lease had no validity left; the task did not run`;
      await this.abandon(name, request.owner, reply, why).catch(() => undefined);
      throw new StoreUnavailableError(`${this.#store.kind}: claim-tick: ${why}`);
    }
    return { ...reply, validUntil: until };
  }

  /** Record a claimed run that will not run, and end its lease at once. */
  abandon(name: string, owner: string, claim: { fence: number; startedAt: number }, why: string): Promise<FinishReply> {
    return this.#store.finishTick(name, {
      owner,
      fence: claim.fence,
      startedAt: claim.startedAt,
      outcome: 'abandoned',
      error: why,
      lockAtLeastFor: 0,
    });
  }

  /** The run's end: record it and end (or cut, per lockAtLeastFor) the lease. */
  finish(name: string, request: FinishRequest): Promise<FinishReply> {
    return this.#bounded(this.#store.finishTick(name, request), 'finish-tick');
  }

  read(name: string, limit: number): Promise<JobState> {
    return this.#bounded(this.#store.readJob(name, limit), 'read-job');
  }
}
