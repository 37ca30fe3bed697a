import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connectServer } from '../redis.js';

/**
 * The redis-server `verify --local` starts for itself, so that it may also fault the server:
 * restart it (kill -9, then start again on the same port and data) and freeze it (SIGSTOP).
 * Configured as leasehold asks: noeviction, and an AOF fsynced on every write, so that what a
 * restart may forget is nothing that was acknowledged.
 */
export interface LocalServer {
  readonly url: string;
  readonly port: number;
  /** kill -9 and start again; resolves once it answers PING. */
  restart(): Promise<void>;
  /** SIGSTOP: connections stay open, nothing is answered. */
  freeze(): void;
  /** SIGCONT. */
  thaw(): void;
  stop(): Promise<void>;
}

const READY_WITHIN = 10_000;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen({ host: '127.0.0.1', port: 0 }, () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

export async function startLocalServer(): Promise<LocalServer> {
  const server = new LocalRedis(await freePort(), mkdtempSync(join(tmpdir(), 'leasehold-verify-')));
  await server.launch();
  return server;
}

function exited(proc: ChildProcess): Promise<void> {
  return proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => proc.once('exit', () => resolve()));
}

/** One redis-server on a port and a data directory of its own, started again on the same ones after a kill. */
class LocalRedis implements LocalServer {
  readonly url: string;
  readonly port: number;
  readonly #dir: string;
  readonly #args: string[];
  #child: ChildProcess | undefined;
  /** The end of the running server's output, for the error if it exits at start. */
  #log = '';

  constructor(port: number, dir: string) {
    this.url = `redis://127.0.0.1:${port}`;
    this.port = port;
    this.#dir = dir;
    // As leasehold asks: nothing evicted, every acknowledged write on disk; no RDB snapshots.
    const settings = '--bind 127.0.0.1 --protected-mode no --daemonize no --appendonly yes --appendfsync always';
    this.#args = ['--port', String(port), '--dir', dir, '--save', '', ...settings.split(' ')];
    this.#args.push('--maxmemory-policy', 'noeviction');
  }

  /** Start redis-server; resolves once it answers PING. */
  async launch(): Promise<void> {
    this.#log = '';
    const started = spawn('redis-server', this.#args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = started;
    const failed = this.#failedStart(started);
    const keep = (text: string) => {
      this.#log = (this.#log + text).slice(-4_000);
    };
    started.stdout?.setEncoding('utf8').on('data', keep);
    started.stderr?.setEncoding('utf8').on('data', keep);
    await this.#answering(started, failed);
  }

  /** Rejects if the process cannot start or exits before it answers. */
  #failedStart(started: ChildProcess): Promise<never> {
    const failed = new Promise<never>((_, reject) => {
      started.once('error', (error: NodeJS.ErrnoException) =>
        reject(
          error.code === 'ENOENT'
            ? new Error('--local needs redis-server on the PATH (apt install redis-server, brew install redis)')
            : error,
        ),
      );
      started.once('exit', (code, signal) =>
        reject(
          new Error(`redis-server exited at start (${signal ?? `code ${code}`}): ${this.#log.trim().slice(-500)}`),
        ),
      );
    });
    failed.catch(() => undefined);
    return failed;
  }

  /** PING until PONG; past the deadline, or once the process is gone, kill it and throw. */
  async #answering(started: ChildProcess, failed: Promise<never>): Promise<void> {
    const deadline = performance.now() + READY_WITHIN;
    for (;;) {
      try {
        const client = await Promise.race([
          connectServer({ host: '127.0.0.1', port: this.port }, { what: 'verify --local', connectTimeout: 500 }),
          failed,
        ]);
        const pong = await client.ping().finally(() => client.disconnect());
        if (pong === 'PONG') return;
      } catch (error) {
        if (performance.now() > deadline || started.exitCode !== null || (error as Error).message.includes('PATH')) {
          started.kill('SIGKILL');
          throw error;
        }
      }
      await sleep(50);
    }
  }

  async restart(): Promise<void> {
    const old = this.#child;
    if (old) {
      old.kill('SIGCONT');
      old.kill('SIGKILL');
      await exited(old);
    }
    await this.launch();
  }

  freeze(): void {
    this.#child?.kill('SIGSTOP');
  }

  thaw(): void {
    this.#child?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    const last = this.#child;
    if (last) {
      last.kill('SIGCONT');
      last.kill('SIGTERM');
      const timer = setTimeout(() => last.kill('SIGKILL'), 3_000);
      await exited(last);
      clearTimeout(timer);
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
