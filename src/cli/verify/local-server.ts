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
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-verify-'));
  // As leasehold asks: nothing evicted, every acknowledged write on disk; no RDB snapshots.
  const settings = '--bind 127.0.0.1 --protected-mode no --daemonize no --appendonly yes --appendfsync always';
  const args = ['--port', String(port), '--dir', dir, '--save', '', ...settings.split(' ')];
  args.push('--maxmemory-policy', 'noeviction');
  let child: ChildProcess | undefined;
  let log = '';

  const launch = async () => {
    log = '';
    const started = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child = started;
    const failed = new Promise<never>((_, reject) => {
      started.once('error', (error: NodeJS.ErrnoException) =>
        reject(
          error.code === 'ENOENT'
            ? new Error('--local needs redis-server on the PATH (apt install redis-server, brew install redis)')
            : error,
        ),
      );
      started.once('exit', (code, signal) =>
        reject(new Error(`redis-server exited at start (${signal ?? `code ${code}`}): ${log.trim().slice(-500)}`)),
      );
    });
    failed.catch(() => undefined);
    const keep = (text: string) => {
      log = (log + text).slice(-4_000);
    };
    started.stdout?.setEncoding('utf8').on('data', keep);
    started.stderr?.setEncoding('utf8').on('data', keep);
    const deadline = performance.now() + READY_WITHIN;
    for (;;) {
      try {
        const client = await Promise.race([
          connectServer({ host: '127.0.0.1', port }, { what: 'verify --local', connectTimeout: 500 }),
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
  };

  const exited = (proc: ChildProcess) =>
    proc.exitCode !== null || proc.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((resolve) => proc.once('exit', () => resolve()));

  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async restart() {
      const old = child;
      if (old) {
        old.kill('SIGCONT');
        old.kill('SIGKILL');
        await exited(old);
      }
      await launch();
    },
    freeze: () => child?.kill('SIGSTOP'),
    thaw: () => child?.kill('SIGCONT'),
    async stop() {
      const last = child;
      if (last) {
        last.kill('SIGCONT');
        last.kill('SIGTERM');
        const timer = setTimeout(() => last.kill('SIGKILL'), 3_000);
        await exited(last);
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
