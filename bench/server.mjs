import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

export const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;

/** Every server this process started, so that an error, a signal or a plain exit kills them all. */
const live = new Set();

function killAllNow() {
  for (const server of live) server.killNow();
  live.clear();
}

process.once('exit', killAllNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killAllNow();
    process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
  });
}

/** A port on 127.0.0.1 that was free a moment ago: bind to port 0, read it, close. */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.unref();
    probe.once('error', reject);
    probe.listen({ host: HOST, port: 0, exclusive: true }, () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

async function answersPing(port) {
  const client = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/**
 * Start a redis-server on a free loopback port with persistence off, and wait until it answers;
 * with `replicaOf`, as a replica of the server on that port.
 * Resolves `{ port, pid, stop() }`.
 */
export async function startRedis({ replicaOf } = {}) {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-bench-'));
    const replica = replicaOf === undefined ? [] : ['--replicaof', HOST, String(replicaOf)];
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', dir, ...replica],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    let exited = false;
    child.stdout.setEncoding('utf8').on('data', (text) => {
      output = (output + text).slice(-4000);
    });
    child.stderr.setEncoding('utf8').on('data', (text) => {
      output = (output + text).slice(-4000);
    });
    const gone = new Promise((resolve) => {
      child.once('exit', resolve);
      child.once('error', resolve);
    }).then(() => {
      exited = true;
      live.delete(server);
      rmSync(dir, { recursive: true, force: true });
    });
    const server = {
      port,
      pid: child.pid,
      killNow() {
        if (!exited) child.kill('SIGKILL');
      },
      async stop() {
        if (!exited) child.kill('SIGTERM');
        await gone;
      },
    };
    live.add(server);
    const deadline = performance.now() + READY_TIMEOUT_MS;
    while (!exited && performance.now() < deadline) {
      if (await answersPing(port)) return server;
      await sleep(50);
    }
    server.killNow();
    await gone;
    // The port may have been taken between probing and binding: try another one.
    if (attempt < 3 && /address already in use/i.test(output)) continue;
    throw new Error(`redis-server on ${HOST}:${port} did not start\n${output}`);
  }
}
