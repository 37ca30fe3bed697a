import { setTimeout as sleep } from 'node:timers/promises';
import {
  type AcquireReply,
  type AcquireRequest,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type HandOff,
  type HeldAsReply,
  type JobState,
  type JobStore,
  type LeaseStore,
  type LockState,
  portsOf,
  type ReleaseReply,
  STORE,
  type Store,
  type StoreSettings,
} from '../store/port.js';

/**
 * A store in front of a shared in-process store (a MemoryStore under the demo's prefix) that
 * answers each call after a random few ms, as a network would: the in-process demo's pods then
 * win ticks in varying order instead of the one whose timer happens to fire first. Each call is
 * still one atomic step in the store behind.
 */
export class LatentStore implements Store, JobStore {
  readonly [STORE] = true;
  readonly kind = 'memory';
  readonly #behind: Store;
  readonly #lease: LeaseStore;
  readonly #jobs: JobStore;
  readonly #maxDelay: number;

  /** `behind`: the store that answers, which must keep job history (JobStore). */
  constructor(behind: Store, maxDelay: number) {
    const { lease, jobs } = portsOf(behind);
    if (!jobs) throw new Error(`the ${behind.kind} store keeps no job history`);
    this.#behind = behind;
    this.#lease = lease;
    this.#jobs = jobs;
    this.#maxDelay = maxDelay;
  }

  /** The same latency in front of the store behind seen with a Leasehold's settings. */
  bind(settings: StoreSettings): LatentStore {
    return new LatentStore(this.#behind.bind?.(settings) ?? this.#behind, this.#maxDelay);
  }

  async #later<T>(call: () => Promise<T>): Promise<T> {
    await sleep(Math.floor(Math.random() * this.#maxDelay));
    return call();
  }

  acquire(name: string, request: AcquireRequest): Promise<AcquireReply | HeldAsReply> {
    return this.#later(() => this.#lease.acquire(name, request));
  }
  leave(name: string, owner: string): Promise<void> {
    return this.#later(() => this.#lease.leave(name, owner));
  }
  release(name: string, owner: string): Promise<ReleaseReply> {
    return this.#later(() => this.#lease.release(name, owner));
  }
  extend(name: string, owner: string, ttl: number): Promise<ExtendReply> {
    return this.#later(() => this.#lease.extend(name, owner, ttl));
  }
  inspect(name: string): Promise<LockState> {
    return this.#later(() => this.#lease.inspect(name));
  }
  claimTick(name: string, request: ClaimRequest): Promise<ClaimReply> {
    return this.#later(() => this.#jobs.claimTick(name, request));
  }
  finishTick(name: string, request: FinishRequest): Promise<FinishReply> {
    return this.#later(() => this.#jobs.finishTick(name, request));
  }
  readJob(name: string, limit: number): Promise<JobState> {
    return this.#later(() => this.#jobs.readJob(name, limit));
  }
  forgetJob(name: string): Promise<void> {
    return this.#later(() => this.#jobs.forgetJob(name));
  }
  /** Hand-offs are heard as the store behind delivers them: only calls are delayed. */
  watch(name: string, onHandOff: (handOff: HandOff) => void): Promise<() => void> {
    return this.#lease.watch(name, onHandOff);
  }
  /** The store behind is shared by every pod: it is not this one's to close. */
  async close(): Promise<void> {}
}
