import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type EtcdServer,
  type PostgresServer,
  type RedisServer,
  startEtcd,
  startPostgres,
  startRedis,
} from '../harness/index.js';

/**
 * examples/same-program.mjs runs unchanged on every backend, as a user runs it (plain Node, the
 * built package): only BACKEND and BACKEND_URL differ, and every backend prints the same result.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PROGRAM = join(ROOT, 'examples', 'same-program.mjs');

function run(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [PROGRAM],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 20_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => resolve({ code: error ? 1 : 0, stdout, stderr }),
    );
  });
}

const EXPECTED = {
  increasing: true,
  second: { ran: false, reason: 'locked' },
  first: { ran: true, value: 'ran' },
  again: { ran: false, reason: 'already-ran' },
};

describe('the same program on every backend', () => {
  let redis: RedisServer;
  let postgres: PostgresServer;
  let etcd: EtcdServer;
  beforeAll(async () => {
    [redis, postgres, etcd] = await Promise.all([startRedis(), startPostgres(), startEtcd()]);
  });
  afterAll(async () => {
    await Promise.all([redis?.stop(), postgres?.stop(), etcd?.stop()]);
  });

  it.each(['memory', 'redis', 'postgres', 'etcd'])('%s', async (backend) => {
    const url = { memory: '', redis: redis.url, postgres: postgres.url, etcd: etcd.url }[backend] as string;
    const { code, stdout, stderr } = await run({ BACKEND: backend, BACKEND_URL: url });
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual(EXPECTED);
  });
});
