import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../src/index.js';
import { jobKeys } from '../../src/store/index.js';
import { counterToken, lockRecord, type RedisServer, randomPrefix, startRedis, waitFor } from '../harness/index.js';

/**
 * Separate processes schedule the same job against one real redis-server and report every run
 * and every skip; the test checks that each tick ran exactly once. Faults are real: kill -9 and
 * SIGSTOP/SIGCONT of the process running a task.
 */

const WORKER = fileURLToPath(new URL('../harness/schedule-worker.mjs', import.meta.url));

interface WorkerConfig {
  job: string;
  every: number;
  lockAtMostFor: number;
  lockAtLeastFor?: number;
  taskMs: number;
  offset?: number;
  mode?: 'scheduler' | 'naive';
}

interface Report {
  e: 'ready' | 'start' | 'end' | 'aborted' | 'skip' | 'lost' | 'failed' | 'exit';
  pid: number;
  instance: string;
  tick?: number;
  fence?: number | null;
  reason?: string;
  at?: number;
}

class Worker {
  readonly reports: Report[] = [];
  readonly exited: Promise<void>;
  #stderr = '';

  constructor(readonly process: ChildProcess) {
    process.stderr?.setEncoding('utf8').on('data', (text: string) => {
      this.#stderr += text;
    });
    if (process.stdout) {
      createInterface({ input: process.stdout }).on('line', (line) => this.reports.push(JSON.parse(line) as Report));
    }
    this.exited = new Promise((resolve) => process.once('exit', () => resolve()));
  }

  get pid(): number {
    return this.process.pid ?? 0;
  }

  get stderr(): string {
    return this.#stderr;
  }

  starts(): Report[] {
    return this.reports.filter((r) => r.e === 'start');
  }

  async terminate(): Promise<void> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return;
    this.process.kill('SIGCONT');
    this.process.kill('SIGTERM');
    const timer = setTimeout(() => this.process.kill('SIGKILL'), 3_000);
    await this.exited;
    clearTimeout(timer);
  }
}

describe('scheduled jobs across processes', () => {
  let server: RedisServer;
  let client: Redis;
  const workers: Worker[] = [];
  const closers: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    server = await startRedis();
    client = new Redis(server.port, server.host);
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.terminate()));
    for (const close of closers.splice(0)) await close();
  });
  afterAll(async () => {
    client.disconnect();
    await server.stop();
  });

  async function start(prefix: string, configs: WorkerConfig[]): Promise<Worker[]> {
    const started = configs.map((config, i) => {
      const child = spawn(
        process.execPath,
        [WORKER, JSON.stringify({ url: server.url, prefix, instance: `w${i}`, ...config })],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const worker = new Worker(child);
      workers.push(worker);
      return worker;
    });
    await waitFor(() => started.every((w) => w.reports.some((r) => r.e === 'ready')), {
      timeout: 10_000,
      message: `workers ready (${started.map((w) => w.stderr).join(' ')})`,
    });
    return started;
  }

  function observer(prefix: string): Leasehold {
    const locks = new Leasehold(client, { prefix });
    closers.push(() => locks.close());
    return locks;
  }

  /**
   * Every tick every worker fired (each reports a start or a skip for it), from the first such
   * tick to the last, with how many workers started a run of it.
   */
  function fullTicks(all: Worker[], every: number): { ticks: number[]; runs: Map<number, Report[]> } {
    const seen = new Map<number, Set<number>>();
    const runs = new Map<number, Report[]>();
    for (const w of all) {
      for (const r of w.reports) {
        if (r.tick === undefined || (r.e !== 'start' && r.e !== 'skip')) continue;
        const by = seen.get(r.tick) ?? new Set<number>();
        by.add(w.pid);
        seen.set(r.tick, by);
        if (r.e === 'start') runs.set(r.tick, [...(runs.get(r.tick) ?? []), r]);
      }
    }
    const full = [...seen].filter(([, by]) => by.size === all.length).map(([t]) => t);
    if (full.length === 0) return { ticks: [], runs };
    const first = Math.min(...full);
    const last = Math.max(...full);
    const ticks: number[] = [];
    for (let t = first; t <= last; t += every) ticks.push(t);
    return { ticks, runs };
  }

  function runsPerTick(all: Worker[], every: number) {
    const { ticks, runs } = fullTicks(all, every);
    return ticks.map((tick) => ({ tick, runs: runs.get(tick)?.length ?? 0 }));
  }

  async function runFor(ms: number, all: Worker[]): Promise<void> {
    await sleep(ms);
    await Promise.all(all.map((w) => w.terminate()));
  }

  it('three processes, one job, 20+ ticks: every tick runs exactly once', async () => {
    const prefix = randomPrefix();
    const config = { job: 'fetch-rates', every: 500, lockAtMostFor: 2_000, lockAtLeastFor: 200, taskMs: 50 };
    const all = await start(prefix, [config, config, config]);
    await runFor(11_500, all);

    const perTick = runsPerTick(all, config.every);
    expect(perTick.length).toBeGreaterThanOrEqual(20);
    expect(perTick.filter((t) => t.runs !== 1)).toEqual([]);
    // The history in Redis, written by the scripts, agrees: one run per tick, each ok.
    const history = await observer(prefix).jobHistory('fetch-rates', 100);
    for (const { tick } of perTick) {
      const records = history.filter((r) => r.tick?.getTime() === tick);
      expect(records.map((r) => r.outcome)).toEqual(['ok']);
    }
    const fences = history.map((r) => r.fencingToken);
    expect(fences).toEqual([...fences].sort((a, b) => b - a));
  }, 30_000);

  it('the same with clocks offset by up to lockAtLeastFor: still once per tick', async () => {
    const prefix = randomPrefix();
    const config = { job: 'settle', every: 500, lockAtMostFor: 2_000, lockAtLeastFor: 300, taskMs: 50 };
    const all = await start(prefix, [
      { ...config, offset: 0 },
      { ...config, offset: 150 },
      { ...config, offset: -150 },
    ]);
    await runFor(11_500, all);

    const perTick = runsPerTick(all, config.every);
    expect(perTick.length).toBeGreaterThanOrEqual(20);
    expect(perTick.filter((t) => t.runs !== 1)).toEqual([]);
    // The lagging clocks fired after the tick had run, and were refused by the tick marker.
    const reasons = new Set(all.flatMap((w) => w.reports.filter((r) => r.e === 'skip').map((r) => r.reason)));
    expect(reasons.has('already-ran')).toBe(true);
  }, 30_000);

  it('every process paused across a tick: its claim lands 700 ms late, lockAtLeastFor reaches past the next tick, and every tick still runs once', async () => {
    const prefix = randomPrefix();
    const config = { job: 'late', every: 1_000, lockAtMostFor: 3_000, lockAtLeastFor: 500, taskMs: 20 };
    const all = await start(prefix, [config, config, config]);
    const late = (Math.floor(Date.now() / config.every) + 2) * config.every;
    await sleep(late - 100 - Date.now());
    for (const w of all) w.process.kill('SIGSTOP');
    await sleep(late + 700 - Date.now());
    for (const w of all) w.process.kill('SIGCONT');
    await runFor(late + 3_500 - Date.now(), all);

    const perTick = runsPerTick(all, config.every);
    expect(perTick.map((t) => t.tick)).toEqual(expect.arrayContaining([late, late + 1_000, late + 2_000]));
    expect(perTick.filter((t) => t.runs !== 1)).toEqual([]);
    // The late run's claim (server time) kept the lock past the next tick, which took it over.
    const history = await observer(prefix).jobHistory('late');
    const lateRun = history.find((r) => r.tick?.getTime() === late);
    expect((lateRun?.startedAt.getTime() ?? 0) + config.lockAtLeastFor).toBeGreaterThan(late + config.every);
    const fences = history.map((r) => r.fencingToken);
    expect(fences).toEqual([...fences].sort((a, b) => b - a));
  }, 30_000);

  it('negative control: a plain lock per tick, without tick identity, runs ticks twice under offset clocks', async () => {
    const prefix = randomPrefix();
    const config = { job: 'settle', every: 500, lockAtMostFor: 2_000, taskMs: 50, mode: 'naive' as const };
    const all = await start(prefix, [
      { ...config, offset: 0 },
      { ...config, offset: 150 },
      { ...config, offset: -150 },
    ]);
    await runFor(4_000, all);
    const perTick = runsPerTick(all, config.every);
    expect(perTick.length).toBeGreaterThanOrEqual(5);
    // The checker above sees it: ticks that ran more than once.
    expect(perTick.filter((t) => t.runs > 1).length).toBeGreaterThan(0);
  }, 20_000);

  it('kill -9 of the instance running a task: nobody reruns that tick, the next runs, the lease frees itself', async () => {
    const prefix = randomPrefix();
    const config = { job: 'report', every: 1_000, lockAtMostFor: 700, taskMs: 500 };
    const all = await start(prefix, [config, config, config]);
    const keys = jobKeys(prefix, 'report');

    // The first tick every worker fires: one after the last of them was ready (a worker that was
    // still starting up at a tick never fires it).
    const readyAt = Math.max(...all.map((w) => w.reports.find((r) => r.e === 'ready')?.at ?? Number.POSITIVE_INFINITY));
    let victim: Worker | undefined;
    let killedRun: Report | undefined;
    await waitFor(
      () => {
        for (const w of all) {
          const run = w.starts().find((r) => (r.tick ?? 0) > readyAt);
          if (run) {
            victim = w;
            killedRun = run;
            return true;
          }
        }
        return false;
      },
      { timeout: 5_000, message: 'a first run' },
    );
    const v = victim as Worker;
    const killed = killedRun as Report & { tick: number };
    await sleep(150);
    v.process.kill('SIGKILL');
    await v.exited;

    // The dead run's lease ends by itself within lockAtMostFor.
    const pttl = Number(lockRecord(await client.get(keys.lock)).pttl);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(config.lockAtMostFor);

    const survivors = all.filter((w) => w !== v);
    const next = killed.tick + config.every;
    await waitFor(() => survivors.some((w) => w.reports.some((r) => r.e === 'end' && r.tick === next)), {
      timeout: 5_000,
      message: 'the next tick to run',
    });
    const starts = all.flatMap((w) => w.starts());
    expect(starts.filter((r) => r.tick === killed.tick).map((r) => r.pid)).toEqual([v.pid]);
    expect(starts.filter((r) => r.tick === next)).toHaveLength(1);
    // A survivor that fired the killed tick too was refused (one still starting up may not have fired it).
    for (const w of survivors) {
      const fired = w.reports.find((r) => r.tick === killed.tick);
      if (fired) expect(fired.e).toBe('skip');
    }
    expect(survivors.some((w) => w.reports.some((r) => r.tick === killed.tick && r.e === 'skip'))).toBe(true);
    const history = await observer(prefix).jobHistory('report');
    expect(history.find((r) => r.tick?.getTime() === killed.tick)?.outcome).toBe('abandoned');
    expect(history.find((r) => r.tick?.getTime() === next)?.outcome).toBe('ok');
  }, 30_000);

  it('a task longer than lockAtMostFor keeps its lock while alive; SIGSTOPped past its lease, its signal aborts on wake and only a later tick runs elsewhere', async () => {
    const prefix = randomPrefix();
    const config = { job: 'long', every: 500, lockAtMostFor: 600, taskMs: 4_000 };
    const all = await start(prefix, [config, config, config]);
    const keys = jobKeys(prefix, 'long');

    await waitFor(() => all.some((w) => w.starts().length > 0), { timeout: 5_000, message: 'a first run' });
    const h = all.find((w) => w.starts().length > 0) as Worker;
    const run = h.starts()[0] as Report & { tick: number; fence: number };

    // Past lockAtMostFor and still ours: the lease was extended, nobody else got a fencing token.
    await waitFor(() => Date.now() - (run as Report & { at: number }).at > config.lockAtMostFor * 2, {
      timeout: 5_000,
    });
    expect(Number(lockRecord(await client.get(keys.lock)).pttl)).toBeGreaterThan(0);
    expect(counterToken(await client.get(keys.lock))).toBe(run.fence);
    expect(all.flatMap((w) => w.starts())).toHaveLength(1);
    const skipped = all.flatMap((w) => w.reports.filter((r) => r.e === 'skip' && r.tick !== run.tick));
    expect(skipped.length).toBeGreaterThan(0);
    expect(new Set(skipped.map((r) => r.reason))).toEqual(new Set(['locked']));

    h.process.kill('SIGSTOP');
    const others = all.filter((w) => w !== h);
    await waitFor(() => others.some((w) => w.starts().length > 0), { timeout: 5_000, message: 'a takeover' });
    const takeover = others.flatMap((w) => w.starts())[0] as Report & { tick: number; fence: number };
    expect(takeover.tick).toBeGreaterThan(run.tick);
    expect(takeover.fence).toBeGreaterThan(run.fence);

    h.process.kill('SIGCONT');
    await waitFor(() => h.reports.some((r) => r.e === 'aborted'), { timeout: 5_000, message: 'the stale abort' });
    const aborted = h.reports.find((r) => r.e === 'aborted') as Report;
    expect(aborted.tick).toBe(run.tick);
    expect(['validity-elapsed', 'expired', 'not-owner']).toContain(aborted.reason);
    expect(h.reports.some((r) => r.e === 'lost' && r.tick === run.tick)).toBe(true);
    // The stale holder never ran anything after its lease was gone, and no tick ran twice.
    expect(h.starts()).toHaveLength(1);
    const ticks = all.flatMap((w) => w.starts()).map((r) => r.tick);
    expect(new Set(ticks).size).toBe(ticks.length);
    // Its finish recorded the loss, without touching the new holder's lock.
    await waitFor(
      async () =>
        (await observer(prefix).jobHistory('long')).find((r) => r.tick?.getTime() === run.tick)?.outcome === 'lost',
      { timeout: 3_000, message: 'the lost run recorded' },
    );
    expect(counterToken(await client.get(keys.lock))).toBe(takeover.fence);
    expect(Number(lockRecord(await client.get(keys.lock)).pttl)).toBeGreaterThan(0);
  }, 30_000);
});
