import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold, type Lock } from '../../src/index.js';
import { type AdminStore, portsOf } from '../../src/store/port.js';
import { resolveStore } from '../../src/store/registry.js';
import { storeSettings } from '../../src/store/settings.js';
import { randomPrefix, startEtcd, startPostgres, waitFor } from '../harness/index.js';

/**
 * `leasehold inspect` and `leasehold list` on shared holds, on PostgreSQL and etcd: a semaphore of
 * 3 with 2 permits held, and a read-write lock with 2 readers and a writer queued behind them, taken
 * by Leaseholds of three instances; the built CLI run as a real process, its text and JSON read.
 * (The same on Redis: test/cli/cli.test.ts.)
 */
const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const execCli = promisify(execFile);

/** The built CLI run to its end: its exit status and output. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execCli(process.execPath, [CLI, ...args], { timeout: 20_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : 1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    };
  }
}

/** A server of one backend: the CLI's flag naming it, a client of it (ended by `stop`), and its end. */
interface Backend {
  readonly flags: readonly string[];
  connect(): unknown;
  stop(): Promise<void>;
}

/** Each backend's server, started for its own tests only. */
const SERVERS: Readonly<Record<string, () => Promise<Backend>>> = {
  async postgres() {
    const server = await startPostgres();
    const pools: pg.Pool[] = [];
    return {
      flags: ['--postgres', server.url],
      connect: () => {
        const pool = new pg.Pool({ connectionString: server.url }).on('error', () => {});
        pools.push(pool);
        return pool;
      },
      stop: async () => {
        await Promise.all(pools.map((pool) => pool.end()));
        await server.stop();
      },
    };
  },
  async etcd() {
    const server = await startEtcd();
    const clients: Etcd3[] = [];
    return {
      flags: ['--etcd', server.url],
      connect: () => {
        const client = new Etcd3({ hosts: server.url });
        clients.push(client);
        return client;
      },
      stop: async () => {
        for (const client of clients) client.close();
        await server.stop();
      },
    };
  },
};

/** One line of `inspect`'s text output: its label, then the value. */
function row(label: string, value: string): RegExp {
  return new RegExp(`^${label} +${value}$`, 'm');
}

/** `text` matched as it is, in a RegExp. */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A holder line of `inspect`: the owner token shortened, the instance, the fencing token. */
function holderLine(lock: Lock, instance: string): RegExp {
  const owner = `${literal(lock.owner.slice(0, 8))}…`;
  return row('holder', `${owner} \\(owner token\\), ${instance}, token ${lock.fencingToken}, taken .+, \\d+ ms left`);
}

describe.each(Object.keys(SERVERS))('inspect and list on shared holds, %s', (kind) => {
  let backend: Backend;
  /** What a test opened, closed after the file's tests (before the clients they use). */
  const closing: (() => Promise<unknown>)[] = [];
  beforeAll(async () => {
    backend = await (SERVERS[kind] as () => Promise<Backend>)();
  });
  afterAll(async () => {
    for (const close of closing.reverse()) await close().catch(() => undefined);
    await backend?.stop();
  });

  it('a semaphore of 3 with 2 permits held, and a read-write lock with 2 readers and a writer queued: the mode, each holder and the waiter', async () => {
    const prefix = randomPrefix().replace(/[^a-z0-9_]/gi, '_');
    const flags = [...backend.flags, '--prefix', prefix];
    const [a, b, w] = ['pod-a', 'pod-b', 'pod-w'].map((instance) => {
      const locks = new Leasehold(backend.connect() as never, { prefix, instance });
      closing.push(() => locks.close());
      return locks;
    }) as [Leasehold, Leasehold, Leasehold];
    const { store } = resolveStore(backend.connect(), { ...storeSettings({ prefix }), onError: () => {} });
    closing.push(() => store.close());
    const admin = portsOf(store).admin as AdminStore;

    const permits = [await a.acquire('s:pool', { limit: 3 }), await b.acquire('s:pool', { limit: 3 })] as const;
    const readers = [
      await a.acquire('s:doc', { mode: 'shared' }),
      await b.acquire('s:doc', { mode: 'shared' }),
    ] as const;
    const writing = w.acquire('s:doc', { mode: 'exclusive', wait: 30_000 });
    // Awaited below; rejected by close() only if the test failed before.
    writing.catch(() => undefined);
    await waitFor(async () => (await admin.queued('s:doc', 1)).count === 1, { message: 'the writer queued' });

    const pool = await cli('inspect', 's:pool', ...flags);
    expect(pool).toMatchObject({ code: 0, stderr: '' });
    expect(pool.stdout).toMatch(row('mode', 'semaphore: 2 of 3 permits held'));
    expect(pool.stdout).toMatch(holderLine(permits[0], 'pod-a'));
    expect(pool.stdout).toMatch(holderLine(permits[1], 'pod-b'));
    expect(pool.stdout).toMatch(row('fence', `${permits[1].fencingToken} \\(latest fencing token issued\\)`));
    expect(pool.stdout).toMatch(row('waiters', 'none queued'));
    expect(pool.stdout).toMatch(row('reserved', 'no'));
    const poolJson = JSON.parse((await cli('inspect', 's:pool', ...flags, '--json')).stdout) as Record<string, unknown>;
    expect(poolJson).toMatchObject({ name: 's:pool', held: true, mode: 'semaphore', limit: 3, owner: null });
    expect(poolJson.holders).toEqual(
      expect.arrayContaining(
        permits.map((lock, i) =>
          expect.objectContaining({
            owner: lock.owner,
            fence: lock.fencingToken,
            instance: i === 0 ? 'pod-a' : 'pod-b',
          }),
        ),
      ),
    );
    expect(poolJson.holders).toHaveLength(2);

    const doc = await cli('inspect', 's:doc', ...flags);
    expect(doc).toMatchObject({ code: 0, stderr: '' });
    expect(doc.stdout).toMatch(row('mode', 'shared: 2 holders \\(read-write lock\\)'));
    expect(doc.stdout).toMatch(holderLine(readers[0], 'pod-a'));
    expect(doc.stdout).toMatch(holderLine(readers[1], 'pod-b'));
    expect(doc.stdout).toMatch(row('waiters', '1 queued: .+'));
    expect(doc.stdout).toMatch(row('reserved', 'no'));
    const docJson = JSON.parse((await cli('inspect', 's:doc', ...flags, '--json')).stdout) as Record<string, unknown>;
    expect(docJson).toMatchObject({ name: 's:doc', held: true, mode: 'shared', owner: null, waiters: { count: 1 } });
    expect((docJson.holders as { owner: string }[]).map((h) => h.owner).sort()).toEqual(
      readers.map((l) => l.owner).sort(),
    );

    const listed = await cli('list', ...flags);
    expect(listed).toMatchObject({ code: 0, stderr: '' });
    expect(listed.stdout).toMatch(/^s:doc +\d+ ms +\d+ +2 shared +pod-[ab] /m);
    expect(listed.stdout).toMatch(/^s:pool +\d+ ms +\d+ +2\/3 permits +pod-[ab] /m);
    expect(listed.stdout).toContain(`2 locks held under prefix '${prefix}'`);
    const listJson = JSON.parse((await cli('list', ...flags, '--json')).stdout);
    expect(listJson).toEqual([
      expect.objectContaining({ name: 's:doc', mode: 'shared', limit: null, holders: 2, owner: null }),
      expect.objectContaining({ name: 's:pool', mode: 'semaphore', limit: 3, holders: 2, owner: null }),
    ]);

    for (const lock of readers) expect(await lock.release()).toBe(true);
    const writer = await writing;
    expect((docJson.waiters as { first: string[] }).first).toEqual([writer.owner]);
    const alone = await cli('inspect', 's:doc', ...flags);
    expect(alone).toMatchObject({ code: 0, stderr: '' });
    expect(alone.stdout).toMatch(row('mode', 'exclusive \\(one holder\\)'));
    expect(alone.stdout).toMatch(row('holder', `${literal(writer.owner.slice(0, 8))}… \\(owner token\\)`));
    expect(alone.stdout).toMatch(row('instance', 'pod-w'));
    for (const lock of [writer, ...permits]) expect(await lock.release()).toBe(true);
  });
});
