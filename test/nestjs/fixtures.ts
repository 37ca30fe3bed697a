import { setTimeout as sleep } from 'node:timers/promises';
import { Injectable, Module, type Provider } from '@nestjs/common';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Test, type TestingModule } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { assertLocked, type JobRun } from '../../src/index.js';
import { heldLock, LeaseholdModule, lockSignal, Once, ScheduledJob, WithLock } from '../../src/nestjs/index.js';
import { untilAborted } from '../harness/index.js';

/**
 * A Nest application as a user writes it, with the decorators applied as TypeScript's
 * `experimentalDecorators` applies them (`Reflect.decorate`, bottom decorator first): this
 * repository compiles without that flag, so the classes spell out what `@Injectable()` and
 * `@Cron(…) @Once(…)` above a method do. examples/nestjs/ has the same application with the
 * decorator syntax, compiled by tsc.
 */
type AnyDecorator = (target: object, key: string | symbol, descriptor: PropertyDescriptor) => unknown;

export function decorate(target: { prototype: object }, key: string, ...decorators: AnyDecorator[]): void {
  const proto = target.prototype;
  const descriptor = Object.getOwnPropertyDescriptor(proto, key);
  Object.defineProperty(proto, key, Reflect.decorate(decorators as MethodDecorator[], proto, key, descriptor));
}

/** What runs inside the three applications of one test process, seen from all of them at once. */
export const seen = {
  runs: [] as { job: 'cron' | 'interval'; app: string; tick: number | null; token: number }[],
  inside: 0,
  mostInside: 0,
  reasons: [] as unknown[],
};

export function resetSeen(): void {
  seen.runs.length = 0;
  seen.inside = 0;
  seen.mostInside = 0;
  seen.reasons.length = 0;
}

/** A @Cron job made to run once per tick by @Once, and a job on leasehold's own scheduler. */
export class Reports {
  async everySecond(): Promise<string> {
    const run = assertLocked();
    seen.runs.push({
      job: 'cron',
      app: run.instance,
      tick: run.tick?.getTime() ?? null,
      token: heldLock().fencingToken,
    });
    return 'ran';
  }

  async interval(signal: AbortSignal, run: JobRun): Promise<void> {
    if (signal !== lockSignal()) throw new Error('the task is called with the scope signal');
    seen.runs.push({
      job: 'interval',
      app: run.instance,
      tick: run.tick?.getTime() ?? null,
      token: run.fencingToken ?? 0,
    });
  }
}
Injectable()(Reports);
decorate(
  Reports,
  'everySecond',
  Cron('* * * * * *', { name: 'every-second' }),
  Once('reports:every-second', { lockAtMostFor: 5_000, skipped: 'skipped' }),
);
decorate(Reports, 'interval', ScheduledJob('reports:interval', 1_000, { lockAtMostFor: 5_000 }));

/** A @Cron job whose every run lasts until its application shuts down. */
export class LongReports {
  async everySecond(): Promise<void> {
    const run = assertLocked();
    seen.runs.push({ job: 'cron', app: run.instance, tick: run.tick?.getTime() ?? null, token: run.fencingToken });
    const signal = lockSignal();
    await untilAborted(signal);
    seen.reasons.push(signal.reason);
  }
}
Injectable()(LongReports);
decorate(
  LongReports,
  'everySecond',
  Cron('* * * * * *', { name: 'long' }),
  Once('reports:long', { lockAtMostFor: 30_000 }),
);

/** Methods under @WithLock: waiting, skipping, and long work that stops when told to. */
export class Ledger {
  async settle(account: string, ms: number): Promise<{ account: string; token: number }> {
    seen.inside += 1;
    seen.mostInside = Math.max(seen.mostInside, seen.inside);
    try {
      await sleep(ms, undefined, { signal: lockSignal() });
      return { account, token: heldLock().fencingToken };
    } finally {
      seen.inside -= 1;
    }
  }

  async charge(paymentId: string): Promise<string> {
    await sleep(300, undefined, { signal: lockSignal() });
    return `charged ${paymentId}`;
  }

  /** Holds its lock until the application shuts down, then reports why it stopped. */
  async holdUntilShutdown(onHeld: (token: number) => void): Promise<string> {
    onHeld(heldLock().fencingToken);
    const signal = lockSignal();
    await untilAborted(signal);
    seen.reasons.push(signal.reason);
    return 'stopped';
  }
}
Injectable()(Ledger);
decorate(
  Ledger,
  'settle',
  WithLock((account: string) => `ledger:${account}`, { wait: 10_000, ttl: 2_000 }),
);
decorate(
  Ledger,
  'charge',
  WithLock((paymentId: string) => `payment:${paymentId}`, {
    onLocked: 'skip',
    skipped: (reason: string, paymentId: string) => `skipped ${paymentId} (${reason})`,
  }),
);
decorate(Ledger, 'holdUntilShutdown', WithLock('ledger:report', { ttl: 30_000 }));

/** The client from DI, closed by its own module after leasehold has released its locks. */
const REDIS = Symbol('redis');

class RedisConnection {
  readonly client: Redis;
  #closed: Promise<unknown> | undefined;
  constructor(client: Redis) {
    this.client = client;
  }
  async onApplicationShutdown(): Promise<void> {
    // Once: a test may close an application twice.
    this.#closed ??= this.client.quit();
    await this.#closed;
  }
}

class RedisModule {}

function redisModule(url: string) {
  return {
    module: RedisModule,
    providers: [
      { provide: RedisConnection, useFactory: () => new RedisConnection(new Redis(url)) },
      { provide: REDIS, useFactory: (c: RedisConnection) => c.client, inject: [RedisConnection] },
    ],
    exports: [REDIS],
  };
}
Module({})(RedisModule);

export interface AppOptions {
  url: string;
  prefix: string;
  instance: string;
  providers: Provider[];
  shutdownTimeout?: number;
}

/** One application: @nestjs/schedule, and LeaseholdModule on a Redis client from its own module. */
export async function startApp(o: AppOptions): Promise<TestingModule> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      ScheduleModule.forRoot(),
      LeaseholdModule.forRootAsync({
        imports: [redisModule(o.url)],
        inject: [REDIS],
        useFactory: (client: Redis) => ({
          client,
          options: { prefix: o.prefix, instance: o.instance },
          ...(o.shutdownTimeout === undefined ? {} : { shutdownTimeout: o.shutdownTimeout }),
        }),
      }),
    ],
    providers: o.providers,
  }).compile();
  moduleRef.useLogger(['error', 'warn']);
  return moduleRef.init();
}
