import { Injectable, type Provider } from '@nestjs/common';
import type { TestingModule } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ErrorCode, Leasehold, LockError, MemoryStore } from '../../src/index.js';
import { heldLock, LEASEHOLD, LeaseholdModule, lockSignal, WithLock } from '../../src/nestjs/index.js';
import { type RedisServer, randomPrefix, startRedis, waitFor } from '../harness/index.js';
import { decorate, Ledger, LongReports, Reports, resetSeen, seen, startApp } from './fixtures.js';

/**
 * Three Nest applications in one process, as three pods of one service: each its own
 * LeaseholdModule on its own Redis client (from its own module, through forRootAsync), all on one
 * real redis-server.
 */

let server: RedisServer;
let apps: TestingModule[] = [];
let prefix: string;

beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await server?.stop();
});
beforeEach(() => {
  prefix = randomPrefix();
  resetSeen();
});
afterEach(async () => {
  await Promise.all(apps.map((app) => app.close()));
  apps = [];
});

async function startThree(providers: Provider[]): Promise<TestingModule[]> {
  apps = await Promise.all(
    ['pod-a', 'pod-b', 'pod-c'].map((instance) => startApp({ url: server.url, prefix, instance, providers })),
  );
  return apps;
}

function skipsOf(app: TestingModule, job: string): string[] {
  const reasons: string[] = [];
  app.get(Leasehold).on('jobSkipped', ({ name, reason }) => {
    if (name === job) reasons.push(reason);
  });
  return reasons;
}

describe('once per tick across three applications', () => {
  it("@Cron with @Once: every second, each tick runs on one application; the others' fires are skipped", async () => {
    const three = await startThree([Reports]);
    const skipped = three.map((app) => skipsOf(app, 'reports:every-second'));
    await waitFor(() => seen.runs.filter((r) => r.job === 'cron').length >= 4, { timeout: 10_000, message: '4 runs' });
    await Promise.all(three.map((app) => app.close()));
    apps = [];

    const runs = seen.runs.filter((r) => r.job === 'cron');
    const ticks = runs.map((r) => r.tick);
    // The tick is the scheduled time of the fire, a whole second, the same on every application.
    for (const tick of ticks) expect(tick === null ? Number.NaN : tick % 1_000).toBe(0);
    expect(new Set(ticks).size).toBe(runs.length);
    const tokens = runs.map((r) => r.token);
    expect(tokens).toEqual([...tokens].sort((a, b) => a - b));
    // Every application fired every second: the ticks it did not run were refused to it.
    const refused = skipped.flat();
    expect(refused.length).toBeGreaterThanOrEqual(runs.length);
    for (const reason of refused) expect(['locked', 'already-ran', 'closed']).toContain(reason);

    // The run history in Redis agrees: one record per tick.
    const client = new Redis(server.url);
    const locks = new Leasehold(client, { prefix });
    const history = await locks.jobHistory('reports:every-second');
    await locks.close();
    await client.quit();
    expect(history.map((r) => r.tick?.getTime()).sort()).toEqual([...ticks].sort());
    expect(history.every((r) => r.outcome === 'ok')).toBe(true);
  });

  it('@ScheduledJob on the scheduler: each tick of a 1 s interval runs on one application', async () => {
    await startThree([Reports]);
    await waitFor(() => seen.runs.filter((r) => r.job === 'interval').length >= 3, { timeout: 10_000 });
    const runs = seen.runs.filter((r) => r.job === 'interval');
    expect(new Set(runs.map((r) => r.tick)).size).toBe(runs.length);
    for (const run of runs) expect((run.tick ?? Number.NaN) % 1_000).toBe(0);
  });
});

describe('a @Once run at shutdown', () => {
  it('is told to stop and its job lock released: the next tick runs on another application, not after the 30 s lease', async () => {
    const two = await startThree([LongReports]);
    await waitFor(() => seen.runs.length === 1, { timeout: 5_000, message: 'a first run' });
    const holder = seen.runs[0]?.app;
    const app = two[['pod-a', 'pod-b', 'pod-c'].indexOf(holder ?? '')];
    if (!app) throw new Error(`no application ${holder}`);
    const closing = performance.now();
    await app.close();
    expect((seen.reasons[0] as LockError).code).toBe(ErrorCode.CLOSED);
    await waitFor(() => seen.runs.length === 2, { timeout: 5_000, message: 'a run on another application' });
    expect(performance.now() - closing).toBeLessThan(3_000);
    expect(seen.runs[1]?.app).not.toBe(holder);
    expect(seen.runs[1]?.tick).toBeGreaterThan(seen.runs[0]?.tick ?? Number.POSITIVE_INFINITY);
  });
});

describe('@WithLock across three applications', () => {
  it('one method, called on all three at once: one call at a time, each with a higher fencing token', async () => {
    const three = await startThree([Ledger]);
    const calls = three.flatMap((app) => [0, 1].map(() => app.get(Ledger).settle('acct-1', 100)));
    const results = await Promise.all(calls);
    expect(seen.mostInside).toBe(1);
    expect(results.every((r) => r.account === 'acct-1')).toBe(true);
    expect(new Set(results.map((r) => r.token)).size).toBe(6);
  });

  it("onLocked: 'skip': the first delivery of a payment runs, the duplicates resolve the skipped value", async () => {
    const three = await startThree([Ledger]);
    const results = await Promise.all(three.map((app) => app.get(Ledger).charge('pay_42')));
    expect(results.sort()).toEqual(['charged pay_42', 'skipped pay_42 (locked)', 'skipped pay_42 (locked)']);
  });

  it('shutdown tells the work to stop and releases the lock: a waiting application gets it at once, not after the ttl', async () => {
    const [a, b] = await startThree([Ledger]);
    if (!a || !b) throw new Error('two applications');
    const held: { app: string; token: number; at: number }[] = [];
    const first = a.get(Ledger).holdUntilShutdown((token) => held.push({ app: 'a', token, at: performance.now() }));
    await waitFor(() => held.length === 1);
    const second = b.get(Ledger).holdUntilShutdown((token) => held.push({ app: 'b', token, at: performance.now() }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(held).toHaveLength(1);

    const closing = performance.now();
    await a.close();
    expect(await first).toBe('stopped');
    expect(seen.reasons[0]).toBeInstanceOf(LockError);
    expect((seen.reasons[0] as LockError).code).toBe(ErrorCode.CLOSED);
    await waitFor(() => held.length === 2, { timeout: 5_000 });
    // The lease was 30 s: b got the lock because a released it, within a fraction of that.
    expect((held[1]?.at ?? Number.POSITIVE_INFINITY) - closing).toBeLessThan(3_000);
    expect(held[1]?.token).toBeGreaterThan(held[0]?.token ?? Number.POSITIVE_INFINITY);

    await b.close();
    expect(await second).toBe('stopped');
    const client = new Redis(server.url);
    const locks = new Leasehold(client, { prefix });
    const free = await locks.tryAcquire('ledger:report');
    expect(free).not.toBeNull();
    await free?.release();
    await locks.close();
    await client.quit();
  });

  it('a call made while the application shuts down takes no lock: it rejects with CLOSED', async () => {
    const [a] = await startThree([Ledger]);
    if (!a) throw new Error('one application');
    const ledger = a.get(Ledger);
    let token = 0;
    const holding = ledger.holdUntilShutdown((t) => {
      token = t;
    });
    await waitFor(() => token > 0);
    const closing = a.close();
    await expect(ledger.settle('acct-2', 10)).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await closing;
    await holding;
  });
});

describe('the module on its own', () => {
  it('forRoot on a MemoryStore: the Leasehold by class and by token is one instance, closed with the application', async () => {
    const { Test } = await import('@nestjs/testing');
    const moduleRef = await Test.createTestingModule({
      imports: [LeaseholdModule.forRoot({ store: new MemoryStore(), options: { instance: 'solo' } })],
      providers: [Ledger],
    }).compile();
    await moduleRef.init();
    const locks = moduleRef.get(Leasehold);
    expect(moduleRef.get(LEASEHOLD)).toBe(locks);
    expect(await moduleRef.get(Ledger).settle('acct-3', 1)).toMatchObject({ account: 'acct-3' });
    await moduleRef.close();
    await expect(locks.acquire('after')).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });

  it('work that ignores lockSignal() holds the shutdown up for shutdownTimeout only; the shutdown does not release its lock', async () => {
    class Stubborn {
      async work(): Promise<string> {
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        return 'done';
      }
    }
    Injectable()(Stubborn);
    decorate(Stubborn, 'work', WithLock('stubborn', { ttl: 5_000 }));
    const { Test } = await import('@nestjs/testing');
    const store = new MemoryStore();
    const moduleRef = await Test.createTestingModule({
      imports: [LeaseholdModule.forRoot({ store, shutdownTimeout: 200 })],
      providers: [Stubborn],
    }).compile();
    moduleRef.useLogger(false);
    await moduleRef.init();
    const working = moduleRef.get(Stubborn).work();
    await waitFor(() => moduleRef.get(Leasehold).heldCount === 1);
    const closing = performance.now();
    await moduleRef.close();
    expect(performance.now() - closing).toBeLessThan(1_000);
    const other = new Leasehold(store);
    expect(await other.tryAcquire('stubborn')).toBeNull();
    await other.close();
    await working.catch(() => undefined);
  });

  it('refuses options without exactly one backend, naming the fields', async () => {
    const { Test } = await import('@nestjs/testing');
    const build = (options: object) =>
      Test.createTestingModule({ imports: [LeaseholdModule.forRoot(options)] }).compile();
    await expect(build({})).rejects.toThrow(/exactly one of `backend`, `client` or `store`, got none/);
    const store = new MemoryStore();
    await expect(build({ store, backend: store })).rejects.toThrow(/got `backend` and `store`/);
    await expect(build({ store, shutdownTimeout: -1 })).rejects.toThrow(/`shutdownTimeout` must be/);
  });

  it('a decorated instance that no Nest application created says so; heldLock() outside a decorated method throws NOT_LOCKED', async () => {
    await expect(new Ledger().settle('acct-4', 1)).rejects.toThrow(/not created by a Nest application/);
    expect(() => heldLock()).toThrow(expect.objectContaining({ code: ErrorCode.NOT_LOCKED }));
    expect(() => lockSignal()).toThrow(expect.objectContaining({ code: ErrorCode.NOT_LOCKED }));
  });

  it('refuses a decorator used wrongly, at the decoration', () => {
    class Wrong {
      async m(): Promise<void> {}
    }
    expect(() => WithLock('x', { onLocked: 'skip', wait: 10 })).toThrow(/never waits/);
    expect(() => WithLock('x', { onLocked: 'later' as 'skip' })).toThrow(/`onLocked` must be/);
    expect(() => decorate(Wrong, 'missing', WithLock('x'))).toThrow(/decorates a method; Wrong.missing is not one/);
  });
});
