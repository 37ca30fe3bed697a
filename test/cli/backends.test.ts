import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../src/index.js';
import { type EtcdServer, type PostgresServer, randomPrefix, startEtcd, startPostgres } from '../harness/index.js';

/**
 * The operator commands on PostgreSQL and etcd (--postgres URL, --etcd URL), and `migrate`: the
 * built CLI run as a real process against real servers, its output parsed.
 */
const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 20_000 }, (error, stdout, stderr) => {
      const code = error
        ? typeof (error as { code?: unknown }).code === 'number'
          ? (error as { code: number }).code
          : 1
        : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

let postgres: PostgresServer;
let etcd: EtcdServer;
const closing: (() => Promise<unknown>)[] = [];
beforeAll(async () => {
  [postgres, etcd] = await Promise.all([startPostgres(), startEtcd()]);
});
afterAll(async () => {
  for (const close of closing.reverse()) await close().catch(() => undefined);
  await Promise.all([postgres?.stop(), etcd?.stop()]);
});

function backends(): [string, string[], () => unknown][] {
  return [
    [
      'postgres',
      ['--postgres', postgres.url],
      () => new pg.Pool({ connectionString: postgres.url }).on('error', () => {}),
    ],
    ['etcd', ['--etcd', etcd.url], () => new Etcd3({ hosts: etcd.url })],
  ];
}

describe.each(['postgres', 'etcd'])('the operator commands on %s', (kind) => {
  it('inspect, list and release --force see and free a lock taken by a Leasehold', async () => {
    const [, flags, connect] = backends().find(([k]) => k === kind) as [string, string[], () => unknown];
    const prefix = randomPrefix().replace(/[^a-z0-9_]/gi, '_');
    const client = connect() as { end?: () => Promise<void>; close?: () => void };
    closing.push(async () => (client.end ? client.end() : client.close?.()));
    const locks = new Leasehold(client as never, { prefix, instance: 'pod-cli' });
    closing.push(() => locks.close());
    const lock = await locks.acquire('orders:1', { ttl: 30_000 });

    const inspected = await cli('inspect', 'orders:1', ...flags, '--prefix', prefix, '--json');
    expect(inspected.stderr).toBe('');
    expect(JSON.parse(inspected.stdout)).toMatchObject({ name: 'orders:1', held: true, owner: lock.owner });
    const listed = await cli('list', ...flags, '--prefix', prefix, '--json');
    expect((JSON.parse(listed.stdout) as { name: string }[]).map((r) => r.name)).toEqual(['orders:1']);
    const released = await cli('release', 'orders:1', '--force', ...flags, '--prefix', prefix, '--json');
    expect(JSON.parse(released.stdout)).toMatchObject({ result: 'released', owner: lock.owner });
    await expect(lock.extend()).rejects.toMatchObject({ reason: 'expired' });
    const after = await cli('inspect', 'orders:1', ...flags, '--prefix', prefix, '--json');
    expect(JSON.parse(after.stdout)).toMatchObject({ held: false });
  });
});

describe('migrate', () => {
  it('prints the SQL of a prefix, and applies it (idempotent)', async () => {
    const prefix = randomPrefix().replace(/[^a-z0-9_]/gi, '_');
    const printed = await cli('migrate', '--print', '--prefix', prefix);
    expect(printed.code).toBe(0);
    expect(printed.stdout).toMatch(/CREATE/i);
    for (let i = 0; i < 2; i++) {
      const applied = await cli('migrate', '--postgres', postgres.url, '--prefix', prefix);
      expect(applied.stderr).toBe('');
      expect(applied.stdout).toContain(`migrated prefix '${prefix}'`);
    }
    const pool = new pg.Pool({ connectionString: postgres.url }).on('error', () => {});
    const tables = await pool.query('SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE $1', [`${prefix}%`]);
    await pool.end();
    expect(tables.rows[0].n).toBeGreaterThanOrEqual(2);
  });

  it('refuses two backends at once', async () => {
    const both = await cli('list', '--postgres', postgres.url, '--etcd', etcd.url);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/one of --redis, --postgres, --etcd/);
  });
});
