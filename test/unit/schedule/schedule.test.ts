import { setTimeout as sleep } from 'node:timers/promises';
import cron, { type RunCoordinator } from 'node-cron';
import { afterEach, describe, expect, it } from 'vitest';
import {
  assertLocked,
  DEFAULTS,
  ErrorCode,
  type JobRun,
  Leasehold,
  LockError,
  LockLostError,
  MemoryStore,
  StoreUnavailableError,
} from '../../../src/index.js';
import type { ClaimReply, ClaimRequest } from '../../../src/store/port.js';
import { storeSettings } from '../../../src/store/settings.js';
import { randomPrefix, untilAborted, waitFor } from '../../harness/index.js';
import { leftBehind, NOTHING, watchTimers } from '../../harness/leaks.js';

/**
 * The scheduler's behaviour on the in-process MemoryStore: validation, events, stop/close,
 * keep-alive, lost leases, assertLocked, whenUnavailable, the clock and cron, node-cron.
 * The same store semantics on Redis are in schedule-redis.test.ts; across processes in
 * schedule-processes.test.ts.
 */

const instances: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

function leasehold(store: MemoryStore = new MemoryStore(), options: { commandTimeout?: number } = {}): Leasehold {
  const locks = new Leasehold(store, { prefix: randomPrefix(), ...options });
  instances.push(locks);
  return locks;
}

/** Two or three "instances" of one app: separate Leasehold objects on one shared store and prefix. */
function cluster(n: number, store = new MemoryStore()): Leasehold[] {
  const prefix = randomPrefix();
  return Array.from({ length: n }, () => {
    const locks = new Leasehold(store, { prefix });
    instances.push(locks);
    return locks;
  });
}

/** A MemoryStore whose claims can be made to fail, for whenUnavailable and store errors. */
class FlakyStore extends MemoryStore {
  mode: 'up' | 'down' | 'hang' | 'error' | 'slow' = 'up';
  override claimTick(name: string, request: ClaimRequest): Promise<ClaimReply> {
    if (this.mode === 'slow') return sleep(50).then(() => super.claimTick(name, request));
    if (this.mode === 'down') return Promise.reject(new StoreUnavailableError('memory: connection refused'));
    if (this.mode === 'hang') return new Promise(() => {});
    if (this.mode === 'error') return Promise.reject(new LockError(ErrorCode.STORE_ERROR, 'WRONGTYPE'));
    return super.claimTick(name, request);
  }
}

describe('schedule / runOnce: validation', () => {
  it('rejects bad arguments with messages that name the option and the value', async () => {
    const timers = watchTimers();
    const locks = leasehold();
    const task = () => undefined;
    const cases: Array<[() => unknown, RegExp]> = [
      [() => locks.schedule('', 1000, task), /job name must not be empty/],
      [() => locks.schedule('j', 'every minute', task), /invalid cron expression "every minute"/],
      [() => locks.schedule('j', '2030-01-01T00:00:00', task), /not a date/],
      [() => locks.schedule('j', 0, task), /`interval` must be an integer number of milliseconds ≥ 1/],
      [() => locks.schedule('j', 1000, 'task' as never), /schedule task must be a function/],
      [() => locks.schedule('j', '* * * * *', task, { timezone: 'Europe/Seoul' }), /IANA time zone.*Europe\/Seoul/],
      [
        () => locks.schedule('j', 1000, task, { lockAtMostFor: 1000, lockAtLeastFor: 5000 }),
        /`lockAtLeastFor` \(5000 ms\) must not exceed `lockAtMostFor` \(1000 ms\)/,
      ],
      [() => locks.schedule('j', 1000, task, { whenUnavailable: 'fail' as never }), /one of 'skip', 'run', got "fail"/],
      [() => locks.schedule('j', 1000, task, { historyLimit: 0 }), /`historyLimit` must be an integer from 1/],
      [() => locks.schedule('j', 1000, task, { clock: 5 as never }), /`clock` must be a function/],
      [() => locks.schedule('j', 1000, task, { clock: () => Number.NaN }), /`clock` must return ms since the epoch/],
      [() => locks.schedule('j', 1000, task, { instance: '' }), /`instance` must be a non-empty string/],
      [() => locks.schedule('j', 1000, task, { instance: 'a|b' }), /`instance` may not contain '\|'/],
    ];
    for (const [call, message] of cases) {
      let thrown: unknown;
      try {
        call();
      } catch (error) {
        thrown = error;
      }
      expect(thrown, String(message)).toBeInstanceOf(LockError);
      expect((thrown as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
      expect((thrown as Error).message).toMatch(message);
    }
    await expect(locks.runOnce('j', task, { tick: 'yesterday' as never })).rejects.toThrow(
      /`tick` must be a valid Date/,
    );
    await expect(locks.jobHistory('j', 0)).rejects.toThrow(/`limit` must be an integer/);
    expect(await leftBehind(locks, { timers })).toEqual(NOTHING);
  });

  it('a Redlock instance (an array of backends) refuses jobs with a clear LockError', async () => {
    let locks: Leasehold;
    try {
      locks = new Leasehold([new MemoryStore(), new MemoryStore(), new MemoryStore()]);
    } catch {
      return; // Redlock not constructible in this build: nothing to refuse.
    }
    instances.push(locks);
    expect(() => locks.schedule('j', 1000, () => undefined)).toThrow(/Redlock over several independent masters/);
    await expect(locks.runOnce('j', () => undefined)).rejects.toBeInstanceOf(LockError);
  });

  it('defaults live in DEFAULTS', () => {
    expect(DEFAULTS.lockAtMostFor).toBe(30_000);
    expect(DEFAULTS.lockAtLeastFor).toBe(0);
    expect(DEFAULTS.jobWhenUnavailable).toBe('skip');
    expect(DEFAULTS.keepAlive).toBe(true);
  });
});

describe('schedule: ticks, clock, cron', () => {
  it('the injected clock and croner decide the ticks: cron with a time zone, and epoch-aligned intervals', () => {
    const locks = leasehold();
    const clock = () => Date.UTC(2024, 0, 1, 0, 0, 0, 500);
    const task = () => undefined;
    const everyFive = locks.schedule('a', '*/5 * * * *', task, { clock, timezone: 'Asia/Seoul' });
    const nineInSeoul = locks.schedule('b', '0 9 * * *', task, { clock, timezone: 'Asia/Seoul' });
    const seconds = locks.schedule('c', '*/10 * * * * *', task, { clock });
    const interval = locks.schedule('d', 60_000, task, { clock });
    expect(everyFive.nextRun()?.toISOString()).toBe('2024-01-01T00:05:00.000Z');
    // 09:00 in Seoul is 00:00 UTC, just passed by the clock: the next is tomorrow's.
    expect(nineInSeoul.nextRun()?.toISOString()).toBe('2024-01-02T00:00:00.000Z');
    expect(seconds.nextRun()?.toISOString()).toBe('2024-01-01T00:00:10.000Z');
    expect(interval.nextRun()?.toISOString()).toBe('2024-01-01T00:01:00.000Z');
    everyFive.halt();
    expect(everyFive.nextRun()).toBeNull();
  });

  it('three instances on one store: each tick runs once, tick and instance in the history', async () => {
    const all = cluster(3);
    const runs: JobRun[] = [];
    const jobs = all.map((locks, i) =>
      locks.schedule('fetch-rates', 100, (_signal, run) => void runs.push(run), { instance: `pod-${i}` }),
    );
    await waitFor(() => runs.length >= 5, { timeout: 3_000 });
    await Promise.all(jobs.map((j) => j.stop()));
    const ticks = runs.map((r) => r.tick?.getTime());
    expect(new Set(ticks).size).toBe(ticks.length);
    for (const t of ticks) expect((t as number) % 100).toBe(0);
    const history = await jobs[0]?.history();
    expect(history?.map((r) => r.tick?.getTime()).sort()).toEqual([...ticks].sort());
    expect(history?.every((r) => r.outcome === 'ok' && r.instance.startsWith('pod-'))).toBe(true);
  });

  it('a lagging instance cannot run a tick another already ran, even after that run released its lock', async () => {
    const [ahead, behind] = cluster(2);
    const ran: Array<{ who: string; tick: number }> = [];
    const skipped: Array<{ tick: number; reason: string }> = [];
    behind?.on('jobSkipped', (e) => skipped.push({ tick: e.tick?.getTime() ?? 0, reason: e.reason }));
    const task = (who: string) => (_signal: AbortSignal, run: JobRun) => {
      ran.push({ who, tick: run.tick?.getTime() ?? 0 });
    };
    // Start early in a 400 ms period, so both instances' first tick is the same one.
    await sleep(420 - (Date.now() % 400));
    // lockAtLeastFor 0: the lock is free long before the lagging instance fires.
    const a = ahead?.schedule('j', 400, task('ahead'), { clock: () => Date.now() + 200 });
    const b = behind?.schedule('j', 400, task('behind'));
    await waitFor(() => skipped.length >= 2, { timeout: 3_000 });
    await Promise.all([a?.stop(), b?.stop()]);
    expect(ran.filter((r) => r.who === 'behind')).toEqual([]);
    expect(skipped.slice(0, 2).map((s) => s.reason)).toEqual(['already-ran', 'already-ran']);
    for (const s of skipped) expect(ran.some((r) => r.tick === s.tick)).toBe(true);
  });

  it('a real six-field cron runs at its second', async () => {
    const locks = leasehold();
    // Shift the clock so the next whole second is ~50 ms away.
    const offset = 950 - (Date.now() % 1000);
    const ticks: Array<Date | null> = [];
    const job = locks.schedule('sec', '* * * * * *', (_s, run) => void ticks.push(run.tick), {
      clock: () => Date.now() + offset,
    });
    await waitFor(() => ticks.length > 0, { timeout: 2_000 });
    await job.stop();
    expect(ticks[0]?.getUTCMilliseconds()).toBe(0);
  });
});

describe('schedule: runs, events, stop and close', () => {
  it("a task's error is a jobFailed event, recorded in the history; the job carries on", async () => {
    const locks = leasehold();
    const failed: unknown[] = [];
    const done: number[] = [];
    locks.on('jobFailed', (e) => failed.push(e.error));
    locks.on('jobRun', (e) => done.push(e.duration));
    let calls = 0;
    const job = locks.schedule('flaky', 100, async () => {
      calls++;
      if (calls === 1) throw new Error('boom');
      return 'fine';
    });
    await waitFor(() => done.length >= 2, { timeout: 3_000 });
    await job.stop();
    expect(failed).toHaveLength(1);
    expect((failed[0] as Error).message).toBe('boom');
    const history = await job.history();
    expect(history.map((r) => r.outcome)).toContain('failed');
    expect(history.find((r) => r.outcome === 'failed')?.error).toBe('Error: boom');
  });

  it('stop() waits for the running task, then nothing is scheduled and no timer is left', async () => {
    const timers = watchTimers();
    const store = new MemoryStore();
    const locks = leasehold(store);
    let started = 0;
    let finished = 0;
    const job = locks.schedule('slow', 100, async () => {
      started++;
      await sleep(250);
      finished++;
    });
    await waitFor(() => started === 1, { timeout: 2_000 });
    expect(job.running).toBe(true);
    await job.stop();
    expect(finished).toBe(1);
    expect(job.running).toBe(false);
    expect(job.nextRun()).toBeNull();
    expect(await leftBehind(locks, { timers, listeners: () => store.subscriptions })).toEqual(NOTHING);
    await sleep(300);
    expect(started).toBe(1);
  });

  it('close() halts every job and aborts a running task with reason closed', async () => {
    const timers = watchTimers();
    const locks = leasehold();
    let signal: AbortSignal | undefined;
    let runs = 0;
    const job = locks.schedule('j', 100, async (s) => {
      runs++;
      signal = s;
      await untilAborted(s);
    });
    await waitFor(() => signal !== undefined, { timeout: 2_000 });
    await locks.close();
    expect(signal?.aborted).toBe(true);
    expect((signal as AbortSignal).reason).toMatchObject({ reason: 'closed' });
    expect(job.stopped).toBe(true);
    expect(await leftBehind(locks, { timers })).toEqual(NOTHING);
    await sleep(250);
    expect(runs).toBe(1);
    expect(() => locks.schedule('k', 100, () => undefined)).toThrow(/closed/);
  });

  it('keep-alive: a task longer than lockAtMostFor keeps its lock; other instances skip as locked', async () => {
    const store = new MemoryStore();
    const [a, b] = cluster(2, store);
    let extended = 0;
    a?.on('extended', () => extended++);
    const lost: unknown[] = [];
    a?.on('jobLost', (e) => lost.push(e));
    const skips: string[] = [];
    b?.on('jobSkipped', (e) => skips.push(e.reason));
    let runs = 0;
    const long = a?.schedule(
      'long',
      200,
      async () => {
        runs++;
        await sleep(900);
      },
      { lockAtMostFor: 300 },
    );
    await waitFor(() => runs === 1, { timeout: 2_000 });
    const other = b?.schedule('long', 200, () => void runs++, { lockAtMostFor: 300 });
    await sleep(700);
    expect(runs).toBe(1);
    await other?.stop();
    await long?.stop();
    expect(extended).toBeGreaterThanOrEqual(2);
    expect(lost).toEqual([]);
    expect(skips.length).toBeGreaterThan(0);
    expect(new Set(skips)).toEqual(new Set(['locked']));
  });

  it('a lost lease aborts the signal with a LockLostError, emits jobLost and records lost', async () => {
    const store = new MemoryStore().bind(storeSettings({ prefix: 'lost' }));
    const locks = new Leasehold(store, { prefix: 'lost' });
    instances.push(locks);
    const events: Array<{ reason: string; fencingToken: number }> = [];
    locks.on('jobLost', (e) => events.push({ reason: e.error.reason, fencingToken: e.fencingToken }));
    let reason: unknown;
    let fence = 0;
    const result = await locks.runOnce(
      'job',
      async (signal, run) => {
        fence = run.fencingToken ?? 0;
        // Behind the run's back, as an operator or a failover would.
        await store.release('job', run.lock?.owner ?? '');
        await untilAborted(signal);
        reason = signal.reason;
        expect(() => assertLocked()).toThrow(LockLostError);
        return 'stopped early';
      },
      { lockAtMostFor: 150 },
    );
    expect(result).toEqual({ ran: true, value: 'stopped early' });
    expect(reason).toBeInstanceOf(LockLostError);
    expect((reason as LockLostError).reason).toBe('expired');
    expect(events).toEqual([{ reason: 'expired', fencingToken: fence }]);
    const [record] = await locks.jobHistory('job');
    expect(record?.outcome).toBe('lost');
  });
});

describe('assertLocked', () => {
  it('passes inside a held run (also across awaits and timers), and throws outside or for another job', async () => {
    const locks = leasehold();
    expect(() => assertLocked()).toThrow(expect.objectContaining({ code: ErrorCode.NOT_LOCKED }));
    const result = await locks.runOnce('payments', async (_signal, run) => {
      const held = assertLocked('payments');
      expect(held.fencingToken).toBe(run.fencingToken);
      await sleep(5);
      const later = await new Promise<number>((resolve) => setTimeout(() => resolve(assertLocked().fencingToken), 5));
      expect(() => assertLocked('other')).toThrow(/in a task of job "payments"/);
      expect(later).toBe(run.fencingToken);
      return 'checked';
    });
    expect(result).toEqual({ ran: true, value: 'checked' });
    expect(() => assertLocked('payments')).toThrow(/outside a job's task/);
  });

  it('throws in a run made unlocked by whenUnavailable: run', async () => {
    const store = new FlakyStore();
    store.mode = 'down';
    const locks = leasehold(store);
    const result = await locks.runOnce(
      'j',
      (_signal, run) => {
        expect(run.lock).toBeNull();
        expect(() => assertLocked()).toThrow(expect.objectContaining({ code: ErrorCode.NOT_LOCKED }));
        return 'ran unlocked';
      },
      { whenUnavailable: 'run' },
    );
    expect(result).toEqual({ ran: true, value: 'ran unlocked' });
  });
});

describe('whenUnavailable and backend errors', () => {
  it("'skip' (the default) skips with reason unavailable; 'run' runs without a lock", async () => {
    const store = new FlakyStore();
    store.mode = 'down';
    const locks = leasehold(store);
    const skipped: Array<{ name: string; reason: string; error: unknown }> = [];
    locks.on('jobSkipped', (e) => skipped.push({ name: e.name, reason: e.reason, error: e.error }));
    const runs: Array<{ name: string; fencingToken: number | null }> = [];
    locks.on('jobRun', (e) => runs.push({ name: e.name, fencingToken: e.fencingToken }));
    let closedRan = 0;
    const closed = locks.schedule('fail-closed', 100, () => void closedRan++);
    const open = locks.schedule('idempotent', 100, () => undefined, { whenUnavailable: 'run' });
    await waitFor(() => runs.length >= 2 && skipped.length >= 2, { timeout: 3_000 });
    await Promise.all([closed.stop(), open.stop()]);
    expect(closedRan).toBe(0);
    expect(skipped.every((s) => s.name === 'fail-closed' && s.reason === 'unavailable')).toBe(true);
    expect(skipped[0]?.error).toBeInstanceOf(StoreUnavailableError);
    expect(runs.every((r) => r.name === 'idempotent' && r.fencingToken === null)).toBe(true);

    expect(await locks.runOnce('once', () => 1)).toEqual({ ran: false, reason: 'unavailable' });
    expect(await locks.runOnce('once', () => 1, { whenUnavailable: 'run' })).toEqual({ ran: true, value: 1 });
  });

  it('a claim unanswered within commandTimeout counts as unavailable', async () => {
    const store = new FlakyStore();
    store.mode = 'hang';
    const locks = leasehold(store, { commandTimeout: 50 });
    expect(await locks.runOnce('j', () => 1)).toEqual({ ran: false, reason: 'unavailable' });
  });

  it("a backend error that is not about reachability: schedule skips with reason 'error', runOnce rejects", async () => {
    const store = new FlakyStore();
    store.mode = 'error';
    const locks = leasehold(store);
    const reasons: string[] = [];
    locks.on('jobSkipped', (e) => reasons.push(e.reason));
    const job = locks.schedule('j', 100, () => undefined, { whenUnavailable: 'run' });
    await waitFor(() => reasons.length >= 1, { timeout: 2_000 });
    await job.stop();
    expect(reasons[0]).toBe('error');
    await expect(locks.runOnce('j', () => 1, { whenUnavailable: 'run' })).rejects.toThrow(/WRONGTYPE/);
  });
});

describe('runOnce', () => {
  it('runs under the job lock: reports locked while anyone holds it, rethrows the task error', async () => {
    const [a, b] = cluster(2);
    const plain = await b?.acquire('nightly-settlement');
    expect(await a?.runOnce('nightly-settlement', () => 1)).toEqual({ ran: false, reason: 'locked' });
    await plain?.release();
    expect(await a?.runOnce('nightly-settlement', () => 2)).toEqual({ ran: true, value: 2 });
    await expect(
      a?.runOnce('nightly-settlement', () => {
        throw new Error('settlement failed');
      }),
    ).rejects.toThrow('settlement failed');
    const history = (await a?.jobHistory('nightly-settlement')) ?? [];
    expect(history.map((r) => r.outcome)).toEqual(['failed', 'ok']);
    // The plain lock and the job share one fencing counter: the runs' tokens follow the plain lock's.
    const [second, first] = history.map((r) => r.fencingToken ?? 0);
    expect(first).toBeGreaterThan(plain?.fencingToken ?? Number.POSITIVE_INFINITY);
    expect(second).toBeGreaterThan(first ?? Number.POSITIVE_INFINITY);
  });

  it('with tick: a tick runs once, an earlier tick never runs after a later one', async () => {
    const [a, b] = cluster(2);
    const day = (d: number) => new Date(Date.UTC(2024, 0, d));
    expect(await a?.runOnce('settle', () => 'a', { tick: day(2) })).toEqual({ ran: true, value: 'a' });
    expect(await b?.runOnce('settle', () => 'b', { tick: day(2) })).toEqual({ ran: false, reason: 'already-ran' });
    expect(await b?.runOnce('settle', () => 'b', { tick: day(1) })).toEqual({ ran: false, reason: 'already-ran' });
    expect(await b?.runOnce('settle', () => 'b', { tick: day(3).getTime() })).toEqual({ ran: true, value: 'b' });
  });
});

describe('node-cron v4 run coordinator', () => {
  it('two node-cron schedulers with one coordinator each: every fire of the named task runs once', async () => {
    const all = cluster(2);
    const coordinators = all.map((locks) => locks.nodeCronCoordinator());
    // Structurally node-cron's own RunCoordinator type.
    const typed: RunCoordinator[] = coordinators;
    expect(typed).toHaveLength(2);
    const fired: Array<{ who: number; at: number; fence: number | null }> = [];
    const done: string[] = [];
    const tasks = coordinators.map((coordinator, who) =>
      cron.schedule(
        '* * * * * *',
        coordinator.task(async (_signal, run) => {
          fired.push({ who, at: run.tick?.getTime() ?? 0, fence: assertLocked('nc-report').fencingToken });
        }),
        { name: 'nc-report', distributed: true, runCoordinator: coordinator, distributedLease: 800 },
      ),
    );
    const plain = coordinators.map((coordinator) =>
      cron.schedule('* * * * * *', () => void done.push('plain'), {
        name: 'nc-plain',
        distributed: true,
        runCoordinator: coordinator,
        distributedLease: 800,
      }),
    );
    await waitFor(() => fired.length >= 2 && done.length >= 2, { timeout: 4_000 });
    await Promise.all([...tasks, ...plain].map((t) => t.destroy()));
    await sleep(50);
    const seconds = fired.map((f) => f.at);
    expect(new Set(seconds).size).toBe(seconds.length);
    for (const s of seconds) expect(s % 1000).toBe(0);
    const history = await (all[0] as Leasehold).jobHistory('nc-report');
    expect(history.every((r) => r.outcome === 'ok')).toBe(true);
    const plainHistory = await (all[0] as Leasehold).jobHistory('nc-plain');
    expect(plainHistory.length).toBeGreaterThan(0);
    expect(plainHistory.every((r) => r.outcome === 'done')).toBe(true);
  });

  it('a fire whose claim is on its way when the instance closes is skipped quietly; one asked after close() throws CLOSED', async () => {
    const store = new FlakyStore();
    const [locks, other] = cluster(2, store) as [Leasehold, Leasehold];
    const coordinator = locks.nodeCronCoordinator();
    store.mode = 'slow';
    const racing = coordinator.shouldRun('nc-close:2024-01-01T00:00:00.000Z', 1000);
    await sleep(10);
    await locks.close();
    expect(await racing).toBe(false);
    // The claim the store granted as the instance closed was given back: the tick is free, not run.
    store.mode = 'up';
    expect((await other.jobHistory('nc-close'))[0]).toMatchObject({ outcome: 'abandoned' });
    await expect(coordinator.shouldRun('nc-close:2024-01-01T00:00:01.000Z', 1000)).rejects.toMatchObject({
      code: ErrorCode.CLOSED,
    });
  });

  it('refuses keys that are not node-cron run keys, and an unclaimed wrapped task', async () => {
    const coordinator = leasehold().nodeCronCoordinator({ lockAtLeastFor: 100 });
    await expect(coordinator.shouldRun('no-time-here', 1000)).rejects.toThrow(/not a node-cron run key/);
    await expect(coordinator.shouldRun('job:2024-01-01T00:00:00.000Z', 50)).rejects.toThrow(/must not exceed/);
    const wrapped = coordinator.task(() => 1);
    await expect(wrapped({ date: new Date(0), task: { name: 'job' } })).rejects.toThrow(/without this coordinator/);
    expect(await coordinator.shouldRun('job:2024-01-01T00:00:00.000Z', 1000)).toBe(true);
    expect(coordinator.current({ date: new Date('2024-01-01T00:00:00.000Z'), task: { name: 'job' } })?.tick).toEqual(
      new Date('2024-01-01T00:00:00.000Z'),
    );
    expect(await coordinator.shouldRun('job:2024-01-01T00:00:00.000Z', 1000)).toBe(false);
    await coordinator.onComplete('job:2024-01-01T00:00:00.000Z');
  });
});
