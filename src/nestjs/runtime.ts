import { setTimeout as sleep } from 'node:timers/promises';
import { Logger } from '@nestjs/common';
import type { DiscoveryService } from '@nestjs/core';
import { ErrorCode, type Job, type JobRun, type Leasehold, type Lock, LockError } from '../index.js';
import { inScope, type LockScope } from './context.js';
import {
  type OnceSpec,
  SCHEDULED_JOB,
  type ScheduledJobMetadata,
  type Skipped,
  type SkippedReason,
  type WithLockSpec,
} from './metadata.js';
import type { ResolvedModuleOptions } from './options.js';

type Method = (...args: unknown[]) => unknown;

/** How often the shutdown looks again for work still holding a lock. */
const DRAIN_POLL_MS = 20;

/** Names of the methods along a prototype chain, without getters, setters or constructors. */
function methodNames(prototype: object | null): Set<string> {
  const names = new Set<string>();
  for (let p = prototype; p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      const descriptor = Object.getOwnPropertyDescriptor(p, name);
      if (name !== 'constructor' && typeof descriptor?.value === 'function') names.add(name);
    }
  }
  return names;
}

function resolveSkipped(skipped: Skipped, reason: SkippedReason, instance: object, args: unknown[]): unknown {
  return typeof skipped === 'function' ? (skipped as Method).call(instance, reason, ...args) : skipped;
}

/**
 * One application's Leasehold and what the decorators need from it: the calls in flight, the
 * jobs it scheduled, and its shutdown. Decorated instances receive it by property injection.
 */
export class LeaseholdRuntime {
  readonly locks: Leasehold;
  readonly #settings: ResolvedModuleOptions;
  readonly #discovery: DiscoveryService;
  readonly #logger = new Logger('LeaseholdModule');
  readonly #shutdown = new AbortController();
  readonly #inflight = new Set<Promise<unknown>>();
  readonly #jobs: Job[] = [];
  #stopping: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(locks: Leasehold, settings: ResolvedModuleOptions, discovery: DiscoveryService) {
    this.locks = locks;
    this.#settings = settings;
    this.#discovery = discovery;
    locks.on('jobFailed', ({ name, tick, error }) => {
      if (this.#jobs.some((job) => job.name === name)) {
        this.#logger.error(`job ${name} failed at tick ${tick?.toISOString() ?? '-'}`, (error as Error)?.stack);
      }
    });
  }

  /** The scope a decorated method runs in: its signal also aborts when the application shuts down. */
  #scope(lock: Lock | null, signal: AbortSignal, run: JobRun | null): LockScope {
    return { lock, run, signal: AbortSignal.any([signal, this.#shutdown.signal]) };
  }

  /** Keep `call` among the calls the shutdown waits for. */
  #track<T>(call: Promise<T>): Promise<T> {
    this.#inflight.add(call);
    const done = () => this.#inflight.delete(call);
    call.then(done, done);
    return call;
  }

  /** `@WithLock`: the method under `withLock`, or under `tryWithLock` with `onLocked: 'skip'`. */
  withLock(spec: WithLockSpec, instance: object, method: Method, args: unknown[]): Promise<unknown> {
    if (this.#stopping) {
      return Promise.reject(
        new LockError(ErrorCode.CLOSED, `${spec.where}: the application is shutting down; no new lock is taken`),
      );
    }
    const name = typeof spec.name === 'function' ? (spec.name as Method).apply(instance, args) : spec.name;
    let ran = false;
    const work = (signal: AbortSignal, lock: Lock | null) => {
      ran = true;
      return inScope(this.#scope(lock, signal, null), () => method.apply(instance, args));
    };
    // The shutdown signal also ends a wait for the lock.
    const options = { ...spec.options, signal: this.#shutdown.signal };
    return this.#track(
      (async () => {
        if (spec.skip) {
          const result = await this.locks.tryWithLock(name as string, options, work);
          return result.ran ? result.value : resolveSkipped(spec.skipped, result.reason, instance, args);
        }
        const value = await this.locks.withLock(name as string, options, work);
        return ran ? value : resolveSkipped(spec.skipped, 'unavailable', instance, args);
      })(),
    );
  }

  /** `@Once`: the method under `runOnce`, for the tick `tickOf` names (none without `@Cron`). */
  once(
    spec: OnceSpec,
    instance: object,
    method: Method,
    args: unknown[],
    tickOf: ((now: number) => number) | null,
  ): Promise<unknown> {
    if (this.#stopping) return Promise.resolve(resolveSkipped(spec.skipped, 'closed', instance, args));
    const options = tickOf ? { ...spec.options, tick: tickOf(Date.now()) } : spec.options;
    return this.#track(
      (async () => {
        const result = await this.locks.runOnce(
          spec.name ?? spec.where,
          (signal, run) => inScope(this.#scope(run.lock, signal, run), () => method.apply(instance, args)),
          options,
        );
        return result.ran ? result.value : resolveSkipped(spec.skipped, result.reason, instance, args);
      })(),
    );
  }

  /** Nest's hook: schedule every `@ScheduledJob` method of the application's static providers and controllers. */
  onApplicationBootstrap(): void {
    for (const wrapper of [...this.#discovery.getProviders(), ...this.#discovery.getControllers()]) {
      const instance: unknown = wrapper.instance;
      if (typeof instance !== 'object' || instance === null) continue;
      for (const key of methodNames(Object.getPrototypeOf(instance))) {
        const method: unknown = (instance as Record<string, unknown>)[key];
        if (typeof method !== 'function') continue;
        const job = Reflect.getMetadata(SCHEDULED_JOB, method) as ScheduledJobMetadata | undefined;
        if (!job) continue;
        if (!wrapper.isDependencyTreeStatic()) {
          this.#logger.warn(
            `@ScheduledJob ${job.name} on ${wrapper.name}.${key} is not scheduled: the provider is not static`,
          );
          continue;
        }
        const task = (signal: AbortSignal, run: JobRun) => {
          const scope = this.#scope(run.lock, signal, run);
          return inScope(scope, () => method.call(instance, scope.signal, run));
        };
        this.#jobs.push(this.locks.schedule(job.name, job.when, task, job.options));
      }
    }
  }

  /**
   * Nest's hook, before the connections close: take no new lock, tell decorated work to stop
   * (`lockSignal()` aborts), stop the scheduled jobs, and wait up to `shutdownTimeout` until no
   * decorated call is in flight and this Leasehold holds no lock. Each lock is released as its
   * work ends, so another instance gets it at once rather than after its ttl.
   */
  beforeApplicationShutdown(): Promise<void> {
    this.#stopping ??= this.#drain();
    return this.#stopping;
  }

  async #drain(): Promise<void> {
    this.#shutdown.abort(new LockError(ErrorCode.CLOSED, 'the application is shutting down'));
    const deadline = performance.now() + this.#settings.shutdownTimeout;
    const stopped = Promise.allSettled(this.#jobs.map((job) => job.stop()));
    while (this.#inflight.size > 0 || this.locks.heldCount > 0) {
      const left = deadline - performance.now();
      if (left <= 0) {
        this.#logger.warn(
          `shutdown: ${this.locks.heldCount} lock(s) still held after ${this.#settings.shutdownTimeout} ms; they end by their ttl`,
        );
        return;
      }
      await sleep(Math.min(DRAIN_POLL_MS, left));
    }
    await stopped;
  }

  /** Nest's hook: close the Leasehold (the client it was given stays open: it belongs to the caller). */
  onApplicationShutdown(): Promise<void> {
    this.#closing ??= (async () => {
      await this.beforeApplicationShutdown();
      await this.locks.close();
    })();
    return this.#closing;
  }
}
