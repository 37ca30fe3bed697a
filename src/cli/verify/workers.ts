import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { HistoryEvent, WorkerEvent, WorkerPlan } from './history.js';
import type { Link } from './proxy.js';

/** The environment variable a worker reads its plan from (not argv: it may hold a password). */
export const PLAN_VARIABLE = 'LEASEHOLD_VERIFY_PLAN';

/** Where a worker is in its loop, as its last event says. */
export type Phase = 'starting' | 'idle' | 'waiting' | 'holding' | 'working' | 'dead';

const PHASE_AFTER: Partial<Record<WorkerEvent['e'], Phase>> = {
  ready: 'idle',
  acquire: 'waiting',
  granted: 'holding',
  read: 'working',
  write: 'holding',
  release: 'idle',
  stopped: 'idle',
};

/**
 * One worker slot: its process (started again after a kill), its link, and its phase. Workers
 * are this very CLI run as `leasehold verify-worker`: the built package, as a user runs it.
 */
export class WorkerSlot {
  readonly slot: number;
  readonly link: Link;
  phase: Phase = 'starting';
  paused = false;
  #child: ChildProcess | undefined;
  #stderr = '';
  #stopping = false;
  readonly #plan: WorkerPlan;
  readonly #onEvent: (event: HistoryEvent) => void;
  readonly #onCrash: (slot: WorkerSlot, why: string) => void;
  /** Set while a process is up and has not said ready yet. */
  #ready: (() => void) | undefined;

  constructor(
    plan: WorkerPlan,
    link: Link,
    onEvent: (event: HistoryEvent) => void,
    onCrash: (slot: WorkerSlot, why: string) => void,
  ) {
    this.slot = plan.worker;
    this.link = link;
    this.#plan = plan;
    this.#onEvent = onEvent;
    this.#onCrash = onCrash;
  }

  get pid(): number | null {
    return this.#child?.pid ?? null;
  }

  /** Holding the lock, as far as its events say. */
  get holds(): boolean {
    return this.phase === 'holding' || this.phase === 'working';
  }

  /** Starts a process in this slot; resolves when it says ready. */
  start(): Promise<void> {
    const cli = fileURLToPath(import.meta.url);
    const child = spawn(process.execPath, [cli, 'verify-worker'], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, [PLAN_VARIABLE]: JSON.stringify(this.#plan) },
    });
    this.#child = child;
    this.phase = 'starting';
    this.paused = false;
    const pid = child.pid ?? -1;
    this.#onEvent({ e: 'spawned', t: Date.now(), w: this.slot, pid });
    child.stdin?.on('error', () => {});
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      this.#stderr = (this.#stderr + text).slice(-2_000);
    });
    const ready = new Promise<void>((resolve) => {
      this.#ready = resolve;
    });
    if (child.stdout) {
      createInterface({ input: child.stdout }).on('line', (line) => {
        let event: WorkerEvent;
        try {
          event = JSON.parse(line) as WorkerEvent;
        } catch {
          return; // a line cut short by a kill
        }
        const phase = PHASE_AFTER[event.e];
        if (phase !== undefined && child === this.#child) this.phase = phase;
        this.#onEvent(event);
        if (event.e === 'ready') {
          this.#ready?.();
          this.#ready = undefined;
        }
      });
    }
    child.once('exit', (code, signal) => {
      this.#onEvent({ e: 'exited', t: Date.now(), w: this.slot, pid, code, signal });
      // A process that died before it was ready is not waited for (its crash is reported below).
      if (child === this.#child) {
        this.#ready?.();
        this.#ready = undefined;
      }
      if (child !== this.#child) return;
      this.phase = 'dead';
      if (!this.#stopping && signal !== 'SIGKILL') {
        this.#onCrash(this, `worker ${this.slot} exited with ${signal ?? `code ${code}`}: ${this.#stderr.trim()}`);
      }
    });
    child.once('error', (error) => {
      this.#onCrash(this, `worker ${this.slot} could not start: ${error.message}`);
      this.#ready?.();
    });
    return ready;
  }

  go(): void {
    this.#child?.stdin?.write('go\n');
  }

  pause(): void {
    if (this.#child?.kill('SIGSTOP')) this.paused = true;
  }

  resume(): void {
    this.#child?.kill('SIGCONT');
    this.paused = false;
  }

  /** kill -9 now; a new process takes the slot after `restartAfter` ms. Resolves when it is ready. */
  async kill(restartAfter: number): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    this.paused = false;
    await gone;
    this.phase = 'dead';
    await new Promise((resolve) => setTimeout(resolve, restartAfter));
    if (this.#stopping) return;
    await this.start();
    this.go();
  }

  /** Tells the worker to finish its cycle and exit; kill -9 after `grace` ms. */
  async stop(grace: number): Promise<void> {
    this.#stopping = true;
    const child = this.#child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGCONT');
    this.paused = false;
    child.stdin?.end();
    const timer = setTimeout(() => child.kill('SIGKILL'), grace);
    await gone;
    clearTimeout(timer);
  }
}
