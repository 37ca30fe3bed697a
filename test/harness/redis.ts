import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './ports.js';

const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 3_000;
const CLI_TIMEOUT_MS = 10_000;
const OUTPUT_TAIL_CHARS = 4_000;

export interface Endpoint {
  host: string;
  port: number;
}

export interface StartRedisOptions {
  /** Extra `redis-server` arguments, appended after the harness defaults so they win. */
  args?: readonly string[] | undefined;
  /** Port to listen on. Default: a free port chosen by the harness. */
  port?: number | undefined;
  /** Working directory (`--dir`). Default: a fresh temporary directory, removed at process exit. */
  dir?: string | undefined;
  /** A config file, passed first (Sentinel needs one it can rewrite). */
  configFile?: string | undefined;
}

export interface RestartOptions {
  /** Kill with SIGKILL instead of a graceful shutdown. Default false. */
  hard?: boolean | undefined;
}

export interface RedisServer {
  readonly host: '127.0.0.1';
  readonly port: number;
  /** `redis://127.0.0.1:PORT` */
  readonly url: string;
  /** Pid of the current process; changes after `restart()`. */
  readonly pid: number;
  readonly dir: string;
  /** False once the process has exited (after `stop()`, `kill9()` or a crash). */
  readonly running: boolean;
  /** Freeze the process with SIGSTOP: connections stay open, nothing answers. */
  pause(): void;
  /** Thaw a paused process with SIGCONT. */
  resume(): void;
  /** SIGKILL, resolved once the process has exited. */
  kill9(): Promise<void>;
  /** SIGTERM, then SIGKILL after 3 s. Idempotent; resumes a paused process first. */
  stop(): Promise<void>;
  /** Stop (or kill, with `hard`) and start again on the same port and dir, waiting until ready. */
  restart(opts?: RestartOptions): Promise<void>;
  /** Runs `redis-cli -h 127.0.0.1 -p PORT ...args`; resolves trimmed stdout, rejects on an error reply. */
  command(...args: string[]): Promise<string>;
  /** The last few kilobytes the server wrote to stdout and stderr. */
  logs(): string;
}

// Every live server is killed when the test process exits, however it exits, so that no
// redis-server outlives a run. The registry sits on globalThis because a test runner may
// evaluate this module more than once in one process; the handlers must be installed once.
interface Registry {
  readonly servers: Set<RedisProcess>;
  readonly tempDirs: Set<string>;
}

const REGISTRY: unique symbol = Symbol.for('leasehold.test.harness.redis');
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
        rmSync(dir, { recursive: true, force: true });
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

function appendTail(tail: string, chunk: string): string {
  const joined = tail + chunk;
  return joined.length > OUTPUT_TAIL_CHARS ? joined.slice(-OUTPUT_TAIL_CHARS) : joined;
}

/**
 * Sends one RESP `PING` over a fresh socket and resolves with the reply line without its
 * type byte (`PONG`). Rejects on an error reply (e.g. `LOADING`), a closed socket, or when no
 * reply arrives within `timeout` ms (default 1000).
 */
export function ping(target: Endpoint, opts: { timeout?: number | undefined } = {}): Promise<string> {
  const timeout = opts.timeout ?? 1000;
  const where = `${target.host}:${target.port}`;
  return new Promise((resolve, reject) => {
    let received = '';
    let settled = false;
    const socket = connect({ host: target.host, port: target.port });
    const finish = (error: Error | undefined, reply?: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (error !== undefined) reject(error);
      else resolve(reply ?? '');
    };
    const timer = setTimeout(() => finish(new Error(`PING to ${where} got no reply within ${timeout} ms`)), timeout);
    socket.setNoDelay(true);
    socket.once('connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
      const end = received.indexOf('\r\n');
      if (end < 0) return;
      const line = received.slice(0, end);
      if (line.startsWith('+')) finish(undefined, line.slice(1));
      else finish(new Error(`PING to ${where} was answered with ${JSON.stringify(line)}`));
    });
    socket.on('error', (error) => finish(new Error(`PING to ${where} failed: ${error.message}`, { cause: error })));
    socket.on('close', () => finish(new Error(`PING to ${where}: connection closed before a reply`)));
  });
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `redis-cli` with `args`, killing it after `timeout` ms. Never rejects on a non-zero exit. */
export function runRedisCli(args: readonly string[], timeout = CLI_TIMEOUT_MS): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-cli', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (text: string) => {
      stdout += text;
    });
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeout);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run redis-cli: ${error.message}`, { cause: error }));
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      if (timedOut) {
        reject(new Error(`redis-cli ${args.join(' ')} did not finish within ${timeout} ms`));
      } else {
        resolve({ code, stdout, stderr });
      }
    });
  });
}

class RedisProcess implements RedisServer {
  readonly host = HOST;
  readonly url: string;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private alive = false;
  private paused = false;
  private stopping: Promise<void> | undefined;
  private lastPid = 0;
  private output = '';

  constructor(
    readonly port: number,
    readonly dir: string,
    private readonly extraArgs: readonly string[],
    private readonly configFile: string | undefined = undefined,
  ) {
    this.url = `redis://${HOST}:${port}`;
  }

  get pid(): number {
    return this.lastPid;
  }

  get running(): boolean {
    return this.alive;
  }

  logs(): string {
    return this.output;
  }

  /** Spawns the process and resolves once it answers PING. */
  async launch(): Promise<void> {
    const args = [
      ...(this.configFile === undefined ? [] : [this.configFile]),
      '--port',
      String(this.port),
      '--bind',
      HOST,
      '--save',
      '',
      '--appendonly',
      'no',
      '--protected-mode',
      'no',
      '--daemonize',
      'no',
      '--dir',
      this.dir,
      ...this.extraArgs,
    ];
    const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    this.alive = true;
    this.paused = false;
    let spawnError: Error | undefined;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.paused = false;
        registry().servers.delete(this);
        this.output = appendTail(this.output, `\n[exited: code ${code}, signal ${signal}]\n`);
        resolve();
      });
      child.once('error', (error) => {
        // Spawning failed (e.g. redis-server is not on PATH): 'exit' may never come.
        spawnError = error;
        this.alive = false;
        registry().servers.delete(this);
        resolve();
      });
    });
    const collect = (text: string): void => {
      this.output = appendTail(this.output, text);
    };
    child.stdout?.setEncoding('utf8').on('data', collect);
    child.stderr?.setEncoding('utf8').on('data', collect);
    this.lastPid = child.pid ?? 0;
    registry().servers.add(this);

    const deadline = performance.now() + READY_TIMEOUT_MS;
    let lastProblem = 'no attempt made';
    while (performance.now() < deadline) {
      if (!this.alive) {
        const why =
          spawnError === undefined
            ? 'redis-server exited during startup'
            : `could not spawn redis-server: ${spawnError.message}`;
        throw new Error(`${why} (port ${this.port})\n--- output tail ---\n${this.output}`);
      }
      try {
        if ((await ping({ host: HOST, port: this.port }, { timeout: 500 })) === 'PONG') return;
      } catch (error) {
        lastProblem = error instanceof Error ? error.message : String(error);
      }
      await sleep(50);
    }
    this.killNow();
    await this.exited;
    throw new Error(
      `redis-server on port ${this.port} did not answer PING within ${READY_TIMEOUT_MS} ms ` +
        `(last: ${lastProblem})\n--- output tail ---\n${this.output}`,
    );
  }

  /** Synchronous SIGKILL, for exit handlers. */
  killNow(): void {
    if (!this.alive || this.child === undefined) return;
    try {
      this.child.kill('SIGKILL');
    } catch {
      // Already gone.
    }
  }

  pause(): void {
    this.signal('SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    this.signal('SIGCONT');
    this.paused = false;
  }

  async kill9(): Promise<void> {
    if (!this.alive) return;
    this.killNow();
    await this.exited;
  }

  stop(): Promise<void> {
    if (!this.alive) return Promise.resolve();
    this.stopping ??= this.gracefulStop().finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  async restart(opts: RestartOptions = {}): Promise<void> {
    if (opts.hard === true) await this.kill9();
    else await this.stop();
    this.output = appendTail(this.output, '\n[restarting]\n');
    await this.launch();
  }

  async command(...args: string[]): Promise<string> {
    const result = await runRedisCli(['-h', HOST, '-p', String(this.port), '-e', ...args]);
    if (result.code !== 0) {
      const detail = (result.stdout + result.stderr).trim();
      throw new Error(`redis-cli ${args.join(' ')} on port ${this.port} failed (exit ${result.code}): ${detail}`);
    }
    return result.stdout.trim();
  }

  private async gracefulStop(): Promise<void> {
    if (this.paused) this.resume();
    this.child?.kill('SIGTERM');
    const grace = new AbortController();
    const graceful = await Promise.race([
      this.exited.then(() => true),
      sleep(STOP_GRACE_MS, false, { signal: grace.signal }).catch(() => true),
    ]);
    grace.abort();
    if (!graceful) {
      this.killNow();
      await this.exited;
    }
  }

  private signal(signal: NodeJS.Signals): void {
    if (!this.alive || this.child === undefined) {
      throw new Error(`redis-server on port ${this.port} is not running; cannot send ${signal}`);
    }
    this.child.kill(signal);
  }
}

function isAddressInUse(server: RedisProcess): boolean {
  return /address already in use/i.test(server.logs());
}

/**
 * Starts a `redis-server` on 127.0.0.1 with persistence off and waits until it answers PING.
 * With no `port` given, a free one is chosen (and another tried if it was taken meanwhile).
 */
export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisServer> {
  const args = opts.args ?? [];
  let dir = opts.dir;
  if (dir === undefined) {
    dir = mkdtempSync(join(tmpdir(), 'leasehold-redis-'));
    registry().tempDirs.add(dir);
  }
  const attempts = opts.port === undefined ? 3 : 1;
  for (let attempt = 1; ; attempt++) {
    const server = new RedisProcess(opts.port ?? (await freePort()), dir, args, opts.configFile);
    try {
      await server.launch();
      return server;
    } catch (error) {
      if (attempt >= attempts || !isAddressInUse(server)) throw error;
    }
  }
}
