import { setTimeout as sleep } from 'node:timers/promises';
import type { JobKeys, LockKeys } from '../store/redis/keys.js';
import type { MemoryStore } from '../store/memory/memory-store.js';
import {
  type AcquireReply,
  type AcquireRequest,
  type ClaimReply,
  type ClaimRequest,
  type ExtendReply,
  type FinishReply,
  type FinishRequest,
  type HandOn,
  type JobState,
  type LockState,
  type ReleaseReply,
  STORE,
  type Store,
} from '../store/port.js';

/**
 * A store in front of a shared MemoryStore that answers each call after a random few ms, as a
 * network would: the in-process demo's pods then win ticks in varying order instead of the one
 * whose timer happens to fire first. Each call is still one atomic step in the store behind.
 */
export class LatentStore implements Store {
  readonly [STORE] = true;
  readonly kind = 'memory';
  readonly #inner: MemoryStore;
  readonly #maxDelay: number;

  constructor(inner: MemoryStore, maxDelay: number) {
    this.#inner = inner;
    this.#maxDelay = maxDelay;
  }

  async #later<T>(call: () => Promise<T>): Promise<T> {
    await sleep(Math.floor(Math.random() * this.#maxDelay));
    return call();
  }

  acquire(keys: LockKeys, request: AcquireRequest): Promise<AcquireReply> {
    return this.#later(() => this.#inner.acquire(keys, request));
  }
  leave(keys: LockKeys, owner: string, handOn: HandOn): Promise<void> {
    return this.#later(() => this.#inner.leave(keys, owner, handOn));
  }
  release(keys: LockKeys, owner: string, handOn: HandOn): Promise<ReleaseReply> {
    return this.#later(() => this.#inner.release(keys, owner, handOn));
  }
  extend(keys: LockKeys, owner: string, ttl: number): Promise<ExtendReply> {
    return this.#later(() => this.#inner.extend(keys, owner, ttl));
  }
  raiseFence(keys: LockKeys, fence: number, retention: number): Promise<number> {
    return this.#later(() => this.#inner.raiseFence(keys, fence, retention));
  }
  inspect(keys: LockKeys): Promise<LockState> {
    return this.#later(() => this.#inner.inspect(keys));
  }
  claimTick(keys: JobKeys, request: ClaimRequest): Promise<ClaimReply> {
    return this.#later(() => this.#inner.claimTick(keys, request));
  }
  finishTick(keys: JobKeys, request: FinishRequest): Promise<FinishReply> {
    return this.#later(() => this.#inner.finishTick(keys, request));
  }
  readJob(keys: JobKeys, limit: number): Promise<JobState> {
    return this.#later(() => this.#inner.readJob(keys, limit));
  }
  subscribe(channel: string, onMessage: (message: string) => void): Promise<() => void> {
    return this.#inner.subscribe(channel, onMessage);
  }
  async close(): Promise<void> {}
}
