import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { DEFAULTS } from '../core/defaults.js';
import { Leasehold } from '../leasehold.js';
import { type RunRecord, runRecords } from '../schedule/history.js';
import { bounded } from '../store/bounded.js';
import { MemoryStore } from '../store/memory/memory-store.js';
import { type AdminStore, type JobStore, portsOf, type Store } from '../store/port.js';
import { resolveStore } from '../store/registry.js';
import { storeSettings } from '../store/settings.js';
import { LatentStore } from './latent-store.js';
import { type DemoPlan, type PodEvent, runPod } from './pod.js';
import { connectRedis } from './redis.js';
import { bold, clockTime, cyan, dim, green, red, yellow } from './style.js';

export interface DemoOptions {
  /** redis://… to run the pods as separate processes against a real Redis; else the memory store. */
  readonly redis?: string | undefined;
  readonly ticks: number;
}

const PODS = ['pod-1', 'pod-2', 'pod-3'];
const PREFIX = 'leasehold-demo';
const EVERY = 1_000;
const PLAN_DEFAULTS = {
  cron: '* * * * * *',
  every: EVERY,
  taskMs: 400,
  lockAtMostFor: 1_500,
  lockAtLeastFor: 500,
};
/** How long after its first 'start' report a pod is killed: mid-job. */
const KILL_AFTER = 150;

interface PodHandle {
  readonly name: string;
  kill(): void;
  readonly exited: Promise<void>;
}

function memoryPods(memory: MemoryStore, plan: DemoPlan, onEvent: (e: PodEvent) => void): PodHandle[] {
  return PODS.map((name) => {
    const locks = new Leasehold(new LatentStore(memory, 20), { prefix: PREFIX });
    let dead = false;
    const report = (e: PodEvent) => {
      if (!dead) onEvent(e);
    };
    report({ type: 'ready', pod: name, pid: process.pid });
    const exited = runPod(locks, name, plan, report)
      .catch(() => undefined)
      .finally(() => locks.close());
    return {
      name,
      // A crash, as far as one process can fake it: close() drops the pod's timers and abandons
      // its lease without releasing it, so the lease ends by lockAtMostFor as a dead pod's would.
      kill: () => {
        dead = true;
        void locks.close();
      },
      exited,
    };
  });
}

function processPods(url: string, plan: DemoPlan, onEvent: (e: PodEvent) => void, onFail: (why: string) => void) {
  const cli = fileURLToPath(import.meta.url);
  return PODS.map((name): PodHandle => {
    const child: ChildProcess = spawn(
      process.execPath,
      [cli, 'demo-pod', '--redis', url, '--pod', name, '--prefix', PREFIX, '--plan', JSON.stringify(plan)],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let killed = false;
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      stderr = (stderr + text).slice(-2_000);
    });
    if (child.stdout) {
      createInterface({ input: child.stdout }).on('line', (line) => {
        try {
          onEvent(JSON.parse(line) as PodEvent);
        } catch {
          // Not an event line: ignore it.
        }
      });
    }
    const exited = new Promise<void>((resolve) => {
      child.once('exit', (code, signal) => {
        if (!killed && code !== 0) onFail(`${name} exited with ${signal ?? `code ${code}`}: ${stderr.trim()}`);
        resolve();
      });
      child.once('error', (error) => {
        onFail(`${name} could not start: ${error.message}`);
        resolve();
      });
    });
    return {
      name,
      kill: () => {
        killed = true;
        child.kill('SIGKILL');
      },
      exited,
    };
  });
}

interface TickLog {
  readonly starts: { pod: string; fence: number | null }[];
  readonly done: Map<string, number>;
  readonly skips: { pod: string; reason: string }[];
}

interface Kill {
  readonly pod: string;
  readonly tick: number;
  readonly leaseEnds: number;
}

function out(line = ''): void {
  process.stdout.write(`${line}\n`);
}

/** The demo: three pods, one job, a kill mid-job, a timeline, a verdict. Resolves the exit code. */
export async function demo(options: DemoOptions): Promise<number> {
  const run = new DemoRun(options);
  const redis = run.memory ? undefined : await connectRedis(options.redis as string);
  // The demo's own view of the job (its history, and the clean-up), by name under the demo's prefix;
  // in memory, the store the pods share.
  const memory = redis ? undefined : new MemoryStore();
  const settings = { ...storeSettings({ prefix: PREFIX }), onError: () => {} };
  const { store, owned } = resolveStore(redis?.client ?? memory, settings);
  const { jobs, admin } = portsOf(store);
  if (!jobs || !admin) throw new Error(`the ${store.kind} store keeps no job history`);

  run.printIntro(redis?.library);
  run.pods = memory
    ? memoryPods(memory, run.plan, run.onEvent)
    : processPods(options.redis as string, run.plan, run.onEvent, (why) => run.failures.push(why));
  await run.printTimeline();
  await Promise.all(run.pods.map((p) => p.exited));

  const history = await readHistory(store, jobs, run.plan.job).catch((error: unknown) => {
    run.failures.push(`could not read the run history: ${error instanceof Error ? error.message : String(error)}`);
    return [];
  });
  // Leave nothing behind on a real Redis but the fencing counter, which expires by its retention.
  if (redis) await forgetJob(store, { admin, jobs }, run.plan.job);
  if (owned) await store.close();
  await redis?.close();
  return run.verdict(history);
}

/** The job's runs, as the store recorded them. */
async function readHistory(store: Store, jobs: JobStore, job: string): Promise<RunRecord[]> {
  const state = await bounded(store, jobs.readJob(job, 100), 'read-job', DEFAULTS.commandTimeout);
  return runRecords(job, state);
}

/** Release the job's lock and forget its state; a failure is ignored (the keys expire). */
async function forgetJob(store: Store, ports: { admin: AdminStore; jobs: JobStore }, job: string): Promise<void> {
  const leave = Promise.all([ports.admin.forceRelease(job), ports.jobs.forgetJob(job)]);
  await bounded(store, leave, 'force-release', DEFAULTS.commandTimeout).catch(() => undefined);
}

/** One run of the demo: its schedule, what the pods report tick by tick, and the kill. */
class DemoRun {
  readonly memory: boolean;
  readonly #options: DemoOptions;
  readonly plan: DemoPlan;
  /** Each tick's scheduled time. */
  readonly ticks: number[];
  /** The tick whose runner is killed. */
  readonly #killTick: number;
  readonly #logs: Map<number, TickLog>;
  readonly failures: string[] = [];
  #kill: Kill | undefined;
  pods: PodHandle[] = [];
  readonly #ready = new Set<string>();
  /** The takeover after the kill is noted once, on the first tick run after it. */
  #tookOver = false;

  constructor(options: DemoOptions) {
    this.#options = options;
    this.memory = options.redis === undefined;
    const lead = this.memory ? 1_200 : 2_500;
    const first = Math.ceil((Date.now() + lead) / EVERY) * EVERY;
    this.plan = {
      ...PLAN_DEFAULTS,
      job: `demo-${randomBytes(3).toString('hex')}`,
      first,
      last: first + (options.ticks - 1) * EVERY,
    };
    this.ticks = Array.from({ length: options.ticks }, (_, i) => first + i * EVERY);
    this.#killTick = this.ticks[Math.min(4, this.ticks.length - 3)] as number;
    this.#logs = new Map(this.ticks.map((t) => [t, { starts: [], done: new Map(), skips: [] }]));
  }

  printIntro(library: string | undefined): void {
    const options = this.#options;
    const plan = this.plan;
    out(bold(`leasehold demo: ${PODS.length} pods run one job, ${options.ticks} ticks`));
    out(
      `  ${this.memory ? 'memory store, pods in this process' : `Redis at ${options.redis} (${library}), each pod its own process`}`,
    );
    out(
      `  job "${plan.job}", cron "${plan.cron}" (every second); each run takes ~${plan.taskMs} ms; ` +
        `lockAtMostFor ${plan.lockAtMostFor} ms, lockAtLeastFor ${plan.lockAtLeastFor} ms`,
    );
    out(`  the pod that runs tick ${this.ticks.indexOf(this.#killTick) + 1} is killed ${KILL_AFTER} ms into it`);
    out();
  }

  /** A pod's report: kept under its tick; the first start of the kill tick schedules the kill. */
  readonly onEvent = (e: PodEvent): void => {
    if (e.type === 'ready') {
      this.#ready.add(e.pod);
      if (!this.memory) out(dim(`  ${e.pod} is up (pid ${e.pid})`));
      return;
    }
    if (e.type === 'stopped') return;
    const log = this.#logs.get(e.tick);
    if (!log) return;
    if (e.type === 'start') {
      log.starts.push({ pod: e.pod, fence: e.fence });
      if (e.tick === this.#killTick && !this.#kill) {
        this.#kill = { pod: e.pod, tick: e.tick, leaseEnds: Date.now() + this.plan.lockAtMostFor };
        const victim = this.pods.find((p) => p.name === e.pod);
        setTimeout(() => victim?.kill(), KILL_AFTER);
      }
    } else if (e.type === 'done') log.done.set(e.pod, e.ms);
    else if (e.type === 'skip') log.skips.push({ pod: e.pod, reason: e.reason });
    else if (e.type === 'failed' && this.#kill?.pod !== e.pod)
      this.failures.push(`${e.pod} failed at tick ${e.tick}: ${e.error}`);
  };

  /** The table, a line per tick as soon as it is over. */
  async printTimeline(): Promise<void> {
    // The table starts once every pod is up (or when the first tick is near, whichever comes first).
    while (this.#ready.size < this.pods.length && Date.now() < this.plan.first - 300) await sleep(20);
    if (!this.memory) out();
    out(dim('  tick  scheduled     ran on  fence  the other pods'));
    for (const [i, tick] of this.ticks.entries()) {
      await sleep(Math.max(0, tick + EVERY - 100 - Date.now()));
      out(this.#tickLine(i, tick));
    }
  }

  #tickLine(i: number, tick: number): string {
    const log = this.#logs.get(tick) as TickLog;
    const kill = this.#kill;
    const number = String(i + 1).padStart(6);
    const when = clockTime(tick);
    const others = [...log.skips]
      .sort((a, b) => a.pod.localeCompare(b.pod))
      .map((s) => `${s.pod} ${s.reason}`)
      .join(', ');
    if (log.starts.length === 0) {
      const why =
        kill && tick > kill.tick && tick < kill.leaseEnds
          ? yellow(`nobody: ${kill.pod}'s lease is still held`)
          : red('nobody ran it');
      return `${number}  ${when}  ${'-'.padEnd(6)}  ${''.padEnd(5)}  ${others}  ${why}`;
    }
    const who = log.starts.map((s) => s.pod).join('+');
    const fence = log.starts.map((s) => (s.fence === null ? '-' : `#${s.fence}`)).join('+');
    let note = '';
    if (log.starts.length > 1) note = red(`  RAN ${log.starts.length} TIMES`);
    else if (kill && tick === kill.tick) {
      note = red(
        `  ${kill.pod} KILLED ${KILL_AFTER} ms into the run; its lease runs out by ${clockTime(kill.leaseEnds)}`,
      );
    } else if (kill && tick > kill.tick && !this.#tookOver) {
      this.#tookOver = true;
      note = green(`  takeover: ${who} runs the job once ${kill.pod}'s lease ran out`);
    }
    return `${number}  ${when}  ${cyan(who.padEnd(6))}  ${fence.padEnd(5)}  ${others}${note}`;
  }

  /** The store's run history, then the verdict: no tick may have run twice. Returns the exit code. */
  verdict(history: readonly RunRecord[]): number {
    const kill = this.#kill;
    const outcomes = new Map<string, number>();
    for (const r of history) outcomes.set(r.outcome, (outcomes.get(r.outcome) ?? 0) + 1);
    out();
    out(
      `  run history in the store: ${history.length} runs (${[...outcomes].map(([k, n]) => `${n} ${k}`).join(', ')})` +
        (kill ? `; the abandoned one is ${kill.pod}'s killed run` : ''),
    );
    const { twice, once, leaseGap, missed } = this.#tally(history);
    const n = this.ticks.length;
    if (twice.length > 0 || this.failures.length > 0) {
      for (const f of this.failures) out(red(`  ${f}`));
      out(bold(red(`verdict: FAILED: ${twice.length > 0 ? twice.join(', ') : 'see above'}`)));
      return 1;
    }
    const parts = [`${once} ran exactly once${kill ? ' (one of them cut short by the kill)' : ''}`];
    if (leaseGap > 0) parts.push(`${leaseGap} skipped while the dead pod's lease ran out`);
    if (missed > 0) parts.push(yellow(`${missed} ran nowhere`));
    const summary =
      once === n ? `${n} ticks, each ran exactly once` : `${n} ticks, none ran twice: ${parts.join(', ')}`;
    out(bold(green(`verdict: ${summary}`)));
    return 0;
  }

  /** How many times each tick ran, by the pods' reports or the store's history, whichever says more. */
  #tally(history: readonly RunRecord[]) {
    const kill = this.#kill;
    const perTickHistory = new Map<number, number>();
    for (const r of history) {
      const t = r.tick?.getTime();
      if (t !== undefined) perTickHistory.set(t, (perTickHistory.get(t) ?? 0) + 1);
    }
    const twice: string[] = [];
    let once = 0;
    let leaseGap = 0;
    let missed = 0;
    for (const [i, tick] of this.ticks.entries()) {
      const runs = Math.max((this.#logs.get(tick) as TickLog).starts.length, perTickHistory.get(tick) ?? 0);
      if (runs > 1) twice.push(`tick ${i + 1} ran ${runs} times`);
      else if (runs === 1) once++;
      else if (kill && tick > kill.tick && tick < kill.leaseEnds) leaseGap++;
      else missed++;
    }
    return { twice, once, leaseGap, missed };
  }
}
