import { type ChildProcess, type SpawnOptions, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** How long `stop()` waits, after a server's children were sent SIGKILL, for the last of them to go. */
const KILLED_EXIT_TIMEOUT_MS = 3_000;
const POLL_MS = 50;
const OUTPUT_TAIL_CHARS = 8_000;

/** How a server or a tool is spawned, besides its stdio (always: stdin ignored, stdout and stderr piped). */
export type ProcessSpawnOptions = Pick<SpawnOptions, 'cwd' | 'env' | 'uid' | 'gid' | 'detached'>;

// Every live server is killed, and every temporary directory removed, when the test process
// exits, however it exits, so that no server outlives a run. The registry sits on globalThis
// because a test runner may evaluate this module more than once in one process; the handlers
// must be installed once.
interface Registry {
  readonly servers: Set<ServerProcess>;
  readonly tempDirs: Set<string>;
}

const REGISTRY: unique symbol = Symbol.for('leasehold.test.harness.process');
type GlobalWithRegistry = typeof globalThis & { [REGISTRY]?: Registry };

function registry(): Registry {
  const holder = globalThis as GlobalWithRegistry;
  const existing = holder[REGISTRY];
  if (existing !== undefined) return existing;
  const created: Registry = { servers: new Set(), tempDirs: new Set() };
  holder[REGISTRY] = created;
  installCleanup(created);
  return created;
}

function installCleanup(reg: Registry): void {
  const cleanUp = (): void => {
    for (const server of reg.servers) server.killNow();
    reg.servers.clear();
    for (const dir of reg.tempDirs) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch {
        // Best effort at exit; a leftover temp directory is harmless.
      }
    }
    reg.tempDirs.clear();
  };
  process.once('exit', cleanUp);
  // A runner may end a worker with a signal, which skips 'exit'. Clean up, then let the
  // signal do what it would have done had we not been listening.
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      cleanUp();
      process.off(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

/** Memory-backed on Linux: a server's fsync there returns at once, whatever else the disk is doing. */
const SHM = '/dev/shm';
/** Free space /dev/shm must have to be used: a container's may be 64 MiB, less than one etcd WAL file. */
const SHM_FREE_BYTES = 2 ** 30;

function shmUsable(): boolean {
  try {
    const { bavail, bsize } = statfsSync(SHM);
    return bavail * bsize >= SHM_FREE_BYTES;
  } catch {
    return false;
  }
}

/**
 * A fresh directory under the system's temporary one (or, with `inMemory`, under /dev/shm where
 * it has room), removed when the test process exits.
 */
export function makeTempDir(prefix: string, opts: { inMemory?: boolean } = {}): string {
  const dir = mkdtempSync(join(opts.inMemory && shmUsable() ? SHM : tmpdir(), prefix));
  registry().tempDirs.add(dir);
  return dir;
}

/** `process.env` without the variables whose names start with `prefix` (a server would read them as settings). */
export function envWithout(prefix: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith(prefix)) env[key] = value;
  }
  return env;
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function appendTail(tail: string, chunk: string, limit: number): string {
  const joined = tail + chunk;
  return joined.length > limit ? joined.slice(-limit) : joined;
}

interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
}

/** Every process in /proc: pid, state letter and parent pid. */
function processTable(): ProcStat[] {
  const table: ProcStat[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return table;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    table.push({ pid: Number(entry), state: fields[0] ?? '?', ppid: Number(fields[1]) });
  }
  return table;
}

function childrenOf(ppid: number): number[] {
  return processTable()
    .filter((proc) => proc.ppid === ppid)
    .map((proc) => proc.pid);
}

/** Whether any of `pids` still runs. Zombies do not count: orphans may never be reaped, but hold nothing. */
function anyAlive(pids: ReadonlySet<number>): boolean {
  return processTable().some((proc) => pids.has(proc.pid) && proc.state !== 'Z' && proc.state !== 'X');
}

function sendSignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

export interface ToolRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Stdout and stderr as they came, the last `outputTailChars` characters of them. */
  output: string;
}

/**
 * Runs a command-line tool to its end, killing it after `timeout` ms. Resolves whatever its exit
 * code; rejects when it cannot be spawned or did not finish in time.
 */
export function runTool(
  command: string,
  args: readonly string[],
  opts: { timeout: number; spawn?: ProcessSpawnOptions | undefined; outputTailChars?: number | undefined },
): Promise<ToolRun> {
  const limit = opts.outputTailChars ?? OUTPUT_TAIL_CHARS;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...opts.spawn, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let output = '';
    let timedOut = false;
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      stdout += text;
      output = appendTail(output, text, limit);
    });
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
      output = appendTail(output, text, limit);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeout);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run ${command}: ${error.message}`, { cause: error }));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) reject(new Error(`${command} ${args.join(' ')} did not finish within ${opts.timeout} ms`));
      else resolve({ code, signal, stdout, stderr, output });
    });
  });
}

/** What every server the harness runs can be made to do; each server's interface adds its addresses and the rest. */
export interface ServerControls {
  /** Pid of the current process; changes after `restart()`. */
  readonly pid: number;
  /** False once the process has exited (after `stop()`, `kill9()` or a crash). */
  readonly running: boolean;
  /** Freeze the server with SIGSTOP: connections stay open, nothing answers. */
  pause(): void;
  /** Thaw a paused server with SIGCONT. */
  resume(): void;
  /** SIGKILL, resolved once the process has exited. */
  kill9(): Promise<void>;
  /** The server's stop signal, then SIGKILL after a grace period. Idempotent; resumes a paused server first. */
  stop(): Promise<void>;
  /** Stop (or kill, with `hard`) and start again on the same ports and data, waiting until ready. */
  restart(opts?: { hard?: boolean | undefined }): Promise<void>;
  /** The last few kilobytes the server wrote to stdout and stderr. */
  logs(): string;
}

export interface ServerProcessOptions {
  /** Names the server in error messages: `redis-server on port 6379`. */
  readonly label: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly spawn?: ProcessSpawnOptions | undefined;
  /** What `ready()` waits for, for the error when it times out: `answer PING`. */
  readonly readyWhat: string;
  readonly readyTimeoutMs: number;
  /** Sent by `stop()`; SIGKILL follows after `stopGraceMs`. */
  readonly stopSignal: NodeJS.Signals;
  readonly stopGraceMs: number;
  /** How much of the server's output `logs()` keeps. Default 8000 characters. */
  readonly outputTailChars?: number | undefined;
  /**
   * Whether pause, resume and kill reach the process's children too, one by one (PostgreSQL: each
   * backend makes itself a process group leader). Default false: the process alone.
   */
  readonly withChildren?: boolean | undefined;
}

/**
 * One server process that can be started, frozen, thawed, killed and started again on the same
 * ports and data: its output is kept for error messages, and it is killed when the test process
 * exits. A subclass says what the server is and when it is ready.
 */
export abstract class ServerProcess implements ServerControls {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private alive = false;
  private paused = false;
  private stopping: Promise<void> | undefined;
  private lastPid = 0;
  private output = '';
  private spawnError: Error | undefined;
  /** Children sent SIGKILL, awaited before the next start so that none still holds the server's files. */
  private readonly killed = new Set<number>();

  protected constructor(private readonly spec: ServerProcessOptions) {}

  /** Whether the server serves requests yet; a throw counts as not yet, its message is reported on timeout. */
  protected abstract ready(): Promise<boolean>;

  /** Pid of the current process; changes after `restart()`. */
  get pid(): number {
    return this.lastPid;
  }

  /** False once the process has exited (after `stop()`, `kill9()` or a crash). */
  get running(): boolean {
    return this.alive;
  }

  /** True between `pause()` and `resume()`. */
  protected get frozen(): boolean {
    return this.paused;
  }

  /** The last few kilobytes the server wrote to stdout and stderr, with the harness's notes. */
  logs(): string {
    return this.output;
  }

  /** Adds to what `logs()` returns. */
  protected note(text: string): void {
    this.output = appendTail(this.output, text, this.spec.outputTailChars ?? OUTPUT_TAIL_CHARS);
  }

  /** Spawns the process and resolves once it is ready; kills it when it is not in time. */
  async start(): Promise<void> {
    const { command, args } = this.spec;
    const child = spawn(command, args, { ...this.spec.spawn, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    this.alive = true;
    this.paused = false;
    this.spawnError = undefined;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.paused = false;
        registry().servers.delete(this);
        this.note(`\n[exited: code ${code}, signal ${signal}]\n`);
        resolve();
      });
      child.once('error', (error) => {
        // Spawning failed (e.g. the server is not on PATH): 'exit' may never come.
        this.spawnError = error;
        this.alive = false;
        registry().servers.delete(this);
        resolve();
      });
    });
    const collect = (text: string): void => this.note(text);
    child.stdout?.setEncoding('utf8').on('data', collect);
    child.stderr?.setEncoding('utf8').on('data', collect);
    this.lastPid = child.pid ?? 0;
    registry().servers.add(this);
    try {
      await this.waitUntil(() => this.ready(), this.spec.readyWhat, this.spec.readyTimeoutMs, ' during startup');
    } catch (error) {
      await this.kill9();
      throw error;
    }
  }

  /**
   * Polls `check` until it returns true. Rejects, with the output's tail, when the process exits
   * meanwhile or `timeout` ms pass.
   */
  protected async waitUntil(check: () => Promise<boolean>, what: string, timeout: number, when = ''): Promise<void> {
    const { label } = this.spec;
    const deadline = performance.now() + timeout;
    let lastProblem = 'no attempt made';
    while (performance.now() < deadline) {
      if (!this.alive) {
        const why =
          this.spawnError === undefined ? `exited${when}` : `could not be spawned: ${this.spawnError.message}`;
        throw new Error(`${label} ${why}\n--- output tail ---\n${this.output}`);
      }
      try {
        if (await check()) return;
        lastProblem = 'not yet';
      } catch (error) {
        lastProblem = messageOf(error);
      }
      await sleep(POLL_MS);
    }
    throw new Error(
      `${label} did not ${what} within ${timeout} ms (last: ${lastProblem})\n--- output tail ---\n${this.output}`,
    );
  }

  /**
   * Synchronous SIGKILL, for exit handlers too. With children, the process is stopped first so
   * that it forks no child after they were listed.
   */
  killNow(): void {
    if (!this.alive || this.lastPid <= 0) return;
    if (this.spec.withChildren === true) {
      sendSignal(this.lastPid, 'SIGSTOP');
      for (const pid of childrenOf(this.lastPid)) {
        this.killed.add(pid);
        sendSignal(pid, 'SIGKILL');
      }
    }
    sendSignal(this.lastPid, 'SIGKILL');
  }

  /** Freezes the process (with children: the process first, so that it starts none meanwhile). */
  pause(): void {
    this.assertRunning('SIGSTOP');
    sendSignal(this.lastPid, 'SIGSTOP');
    for (const pid of this.children()) sendSignal(pid, 'SIGSTOP');
    this.paused = true;
  }

  /** Thaws a paused process (with children: the process last). */
  resume(): void {
    this.assertRunning('SIGCONT');
    for (const pid of this.children()) sendSignal(pid, 'SIGCONT');
    sendSignal(this.lastPid, 'SIGCONT');
    this.paused = false;
  }

  /** SIGKILL, resolved once the process (and every child) is gone. */
  async kill9(): Promise<void> {
    this.killNow();
    await this.exited;
    await this.killedGone();
  }

  /** The stop signal, then SIGKILL after the grace period. Idempotent; resumes a paused process first. */
  stop(): Promise<void> {
    if (!this.alive) return this.killedGone();
    this.stopping ??= this.gracefulStop().finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  /** Stops (or kills, with `hard`) and starts again with the same arguments, waiting until ready. */
  async restart(opts: { hard?: boolean | undefined } = {}): Promise<void> {
    if (opts.hard === true) await this.kill9();
    else await this.stop();
    this.note(`\n[restarting${opts.hard === true ? ' after kill -9' : ''}]\n`);
    await this.start();
  }

  private async gracefulStop(): Promise<void> {
    if (this.paused) this.resume();
    this.child?.kill(this.spec.stopSignal);
    const grace = new AbortController();
    const graceful = await Promise.race([
      this.exited.then(() => true),
      sleep(this.spec.stopGraceMs, false, { signal: grace.signal }).catch(() => true),
    ]);
    grace.abort();
    if (!graceful) this.killNow();
    await this.exited;
    await this.killedGone();
  }

  private children(): number[] {
    return this.spec.withChildren === true ? childrenOf(this.lastPid) : [];
  }

  /** Waits (a bounded while) until no child sent SIGKILL is left, so that a new process can start. */
  private async killedGone(): Promise<void> {
    const deadline = performance.now() + KILLED_EXIT_TIMEOUT_MS;
    while (this.killed.size > 0 && anyAlive(this.killed) && performance.now() < deadline) await sleep(20);
    this.killed.clear();
  }

  private assertRunning(signal: NodeJS.Signals): void {
    if (!this.alive || this.lastPid <= 0) {
      throw new Error(`${this.spec.label} is not running; cannot send ${signal}`);
    }
  }
}

/**
 * Makes and starts a server (or a group of them) up to `attempts` times: again, on fresh ports,
 * when a start failed because a port was taken between choosing it and binding it.
 */
export async function retryOnPortClash<T>(
  attempts: number,
  make: () => Promise<T>,
  use: {
    start(made: T): Promise<unknown>;
    discard(made: T): Promise<unknown>;
    portTaken(made: T): boolean;
  },
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const made = await make();
    try {
      await use.start(made);
      return made;
    } catch (error) {
      await use.discard(made);
      if (attempt >= attempts || !use.portTaken(made)) throw error;
    }
  }
}
