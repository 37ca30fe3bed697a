import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandUsage, helpWidth, wrapHelp } from '../../src/cli/command.js';
import { doctor } from '../../src/cli/commands/doctor.js';
import { history } from '../../src/cli/commands/history.js';
import { inspect } from '../../src/cli/commands/inspect.js';
import { list } from '../../src/cli/commands/list.js';
import { migrate } from '../../src/cli/commands/migrate.js';
import { release } from '../../src/cli/commands/release.js';
import { verify } from '../../src/cli/commands/verify.js';
import { watch } from '../../src/cli/commands/watch.js';
import { colourWanted } from '../../src/cli/style.js';
import { DEFAULTS, Leasehold, LockLostError, MemoryStore } from '../../src/index.js';
import { jobKeys, lockKeys } from '../../src/store/index.js';
import type { HandOff } from '../../src/store/port.js';
import { storeSettings } from '../../src/store/settings.js';
import {
  counterToken,
  freePort,
  lockRecord,
  type RedisCluster,
  type RedisServer,
  randomPrefix,
  startCluster,
  startRedis,
  waitFor,
} from '../harness/index.js';

/** The operator commands, run as an operator would: the built CLI against a real redis-server. */

const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment of this process without its colour variables, then `env`. */
function colourEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base = { ...process.env };
  delete base.FORCE_COLOR;
  delete base.NO_COLOR;
  return { ...base, ...env };
}

/** The built CLI run to its end, in this process's environment or `env`. */
function cli(args: readonly string[], env: NodeJS.ProcessEnv = process.env, timeout = 10_000): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => {
      stdout += text;
    });
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`leasehold ${args.join(' ')} did not exit within ${timeout} ms`));
    }, timeout);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * `leasehold watch <args>` running while `body` runs, given the lines it prints on stdout (its
 * events) and its first line on stderr (which says the watch is live); then Ctrl-C, which exits 0.
 */
async function watching(args: readonly string[], body: (seen: string[], ready: string) => Promise<void>) {
  const child = spawn(process.execPath, [CLI, 'watch', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  try {
    const ready = await new Promise<string>((resolve) =>
      createInterface({ input: child.stderr }).once('line', resolve),
    );
    const seen: string[] = [];
    createInterface({ input: child.stdout }).on('line', (l) => seen.push(l));
    await body(seen, ready);
  } finally {
    child.kill('SIGTERM');
  }
  expect(await exited).toBe(0);
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

describe('leasehold CLI against a real Redis', () => {
  let server: RedisServer;
  let client: Redis;
  const opened: Leasehold[] = [];

  /** A Leasehold of its own (its own instance, as another pod would be) under `prefix`. */
  function instance(prefix: string, label?: string): Leasehold {
    const locks = new Leasehold(client, label === undefined ? { prefix } : { prefix, instance: label });
    opened.push(locks);
    return locks;
  }

  /** The CLI with this test's server and prefix. */
  function run(prefix: string, ...args: string[]): Promise<Result> {
    return cli([...args, '--redis', server.url, '--prefix', prefix]);
  }

  beforeAll(async () => {
    server = await startRedis();
    client = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(opened.map((locks) => locks.close()));
    client.disconnect();
    await server.stop();
  });

  it.concurrent('--help, <command> --help, and wrong use exits 2 with a clear message', async () => {
    const [help, inspectHelp, unknown, badOption, missing, badLimit] = await Promise.all([
      cli(['--help']),
      cli(['inspect', '--help']),
      cli(['frobnicate']),
      cli(['list', '--frob']),
      cli(['inspect']),
      cli(['history', 'job', '--limit', 'lots']),
    ]);
    expect(help.stderr).toBe('');
    expect(help.code).toBe(0);
    for (const command of ['inspect <name>', 'list', 'release <name> --force', 'history <job>', 'watch <name>']) {
      expect(help.stdout).toContain(command);
    }
    expect(inspectHelp.code).toBe(0);
    expect(inspectHelp.stdout).toMatch(/^usage: leasehold inspect <name>/);
    expect(inspectHelp.stdout).toContain('--prefix');
    expect(unknown).toMatchObject({ code: 2, stderr: expect.stringContaining('unknown command: frobnicate') });
    expect(badOption).toMatchObject({ code: 2, stderr: expect.stringContaining("Unknown option '--frob'") });
    expect(badOption.stderr).toContain('leasehold list --help');
    expect(missing).toMatchObject({ code: 2, stderr: expect.stringContaining('inspect takes <name>') });
    expect(badLimit).toMatchObject({ code: 2, stderr: expect.stringContaining('--limit must be an integer') });
  });

  it.concurrent('inspect shows the holder, ms left, the fencing token and the waiters queued', async () => {
    const prefix = randomPrefix();
    const holder = instance(prefix, 'pod-a');
    const other = instance(prefix);
    const before = Date.now();
    const lock = await holder.acquire('orders:1', { ttl: 30_000 });
    const waiting = [other.acquire('orders:1', { wait: 15_000 }), other.acquire('orders:1', { wait: 15_000 })];
    const keys = lockKeys(prefix, 'orders:1');
    await waitFor(async () => (await client.zcard(keys.waiters)) === 2, { message: 'two waiters queued' });

    const text = await run(prefix, 'inspect', 'orders:1');
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(`holder    ${lock.owner.slice(0, 8)}… (owner token)`);
    expect(text.stdout).not.toContain(lock.owner);
    expect(text.stdout).toMatch(/^instance +pod-a$/m);
    expect(text.stdout).toMatch(/^taken +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \(server time\)$/m);
    expect(text.stdout).toMatch(/ttl +\d+ ms left/);
    expect(text.stdout).toMatch(new RegExp(`fence +${lock.fencingToken} \\(latest`));
    expect(text.stdout).toMatch(/waiters +2 queued: /);

    const json = await run(prefix, 'inspect', 'orders:1', '--json');
    expect(json.code).toBe(0);
    const state = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(state).toMatchObject({
      name: 'orders:1',
      key: keys.lock,
      held: true,
      owner: lock.owner,
      fence: lock.fencingToken,
      waiters: { count: 2 },
      instance: 'pod-a',
    });
    // The server's clock and this process's are the same machine's: the grant lies in between.
    const takenAt = Date.parse(String(state.takenAt));
    expect(takenAt).toBeGreaterThanOrEqual(before - 1_000);
    expect(takenAt).toBeLessThanOrEqual(Date.now() + 1_000);
    expect(state.ttl).toBeGreaterThan(0);
    expect(state.ttl).toBeLessThanOrEqual(30_000);

    const free = await run(prefix, 'inspect', 'never-taken', '--json');
    expect(JSON.parse(free.stdout)).toMatchObject({
      held: false,
      owner: null,
      ttl: null,
      fence: 0,
      instance: null,
      takenAt: null,
    });
    expect(free.stdout).not.toMatch(/^instance/m);

    await lock.release();
    for (const next of waiting) await (await next).release();
  });

  it.concurrent('inspect shows a semaphore’s permits and each holder, and a read-write lock’s mode', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix, 'pod-a'), instance(prefix, 'pod-b')];
    const permits = [await a.acquire('pool', { limit: 3 }), await b.acquire('pool', { limit: 3 })];
    const text = await run(prefix, 'inspect', 'pool');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^mode +semaphore: 2 of 3 permits held$/m);
    for (const [lock, pod] of [
      [permits[0], 'pod-a'],
      [permits[1], 'pod-b'],
    ] as const) {
      expect(text.stdout).toContain(
        `holder    ${lock?.owner.slice(0, 8)}… (owner token), ${pod}, token ${lock?.fencingToken}`,
      );
    }
    const json = JSON.parse((await run(prefix, 'inspect', 'pool', '--json')).stdout) as Record<string, unknown>;
    expect(json).toMatchObject({ held: true, mode: 'semaphore', limit: 3, owner: null });
    expect((json.holders as { owner: string }[]).map((h) => h.owner).sort()).toEqual(
      permits.map((l) => l?.owner).sort(),
    );
    for (const lock of permits) await lock?.release();

    const reader = await a.acquire('doc', { mode: 'shared' });
    const writing = b.acquire('doc', { wait: 15_000 });
    await waitFor(async () => (await client.zcard(lockKeys(prefix, 'doc').waiters)) === 1);
    const rw = await run(prefix, 'inspect', 'doc');
    expect(rw.stdout).toMatch(/^mode +shared: 1 holder \(read-write lock\)$/m);
    expect(rw.stdout).toMatch(/^waiters +1 queued: /m);
    await reader.release();
    const writer = await writing;
    expect((await run(prefix, 'inspect', 'doc')).stdout).toMatch(/^mode +exclusive \(one holder\)$/m);
    await writer.release();
  });

  it.concurrent('list finds exactly the held locks, not fencing counters, queues or job keys', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix, 'pod-list');
    const held = await Promise.all(['a:1', 'a:2', 'b:1'].map((name) => locks.acquire(name, { ttl: 30_000 })));
    // Leave behind every other kind of key under the prefix: a released lock's key (its fencing
    // record), a job's lock key, tick marker and history, and a waiters' queue.
    await (await locks.acquire('a:gone')).release();
    await locks.runOnce('a:job', async () => 'done', { tick: 1_000 });
    const queued = instance(prefix).acquire('a:1', { wait: 15_000 });
    const job = jobKeys(prefix, 'a:job');
    await waitFor(async () => (await client.zcard(lockKeys(prefix, 'a:1').waiters)) === 1);
    expect(await client.exists(job.lock, job.tick, job.runs, lockKeys(prefix, 'a:gone').lock)).toBe(4);

    const matched = await run(prefix, 'list', '--match', 'a:*', '--json');
    expect(matched.code).toBe(0);
    const rows = JSON.parse(matched.stdout) as { name: string; fence: number; ttl: number; owner: string }[];
    expect(rows.map((r) => r.name)).toEqual(['a:1', 'a:2']);
    expect(rows[0]).toMatchObject({ owner: held[0]?.owner, fence: held[0]?.fencingToken, instance: 'pod-list' });
    expect(Date.parse(String((rows[0] as { takenAt?: unknown }).takenAt))).toBeGreaterThan(0);

    const all = await run(prefix, 'list');
    expect(all.code).toBe(0);
    expect(all.stdout.split('\n')[0]).toMatch(/^NAME +TTL +FENCE +HOLDER +INSTANCE +TAKEN$/);
    expect(all.stdout).toMatch(
      new RegExp(
        `^b:1 +\\d+ ms +${held[2]?.fencingToken} +${held[2]?.owner.slice(0, 8)}… +pod-list +\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3}$`,
        'm',
      ),
    );
    expect(all.stdout).toContain("3 locks held under prefix '");
    expect(all.stdout).not.toMatch(/a:gone|a:job|fence|waiters|tick|runs/);

    const none = await run(prefix, 'list', '--match', 'zzz*');
    expect(none.stdout).toContain('no locks held');

    for (const lock of held) await lock.release();
    await (await queued).release();
  });

  it.concurrent('list shows locks held by shared holds: the permits of a semaphore and the readers of a read-write lock', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix, 'pod-shared');
    const permits = await Promise.all([1, 2].map(() => locks.acquire('s:pool', { limit: 3 })));
    const readers = await Promise.all([1, 2].map(() => locks.acquire('s:doc', { mode: 'shared' })));
    const json = await run(prefix, 'list', '--json');
    expect(json.code).toBe(0);
    const rows = JSON.parse(json.stdout) as { name: string; mode?: string; holders?: number; limit?: number }[];
    expect(rows).toEqual([
      expect.objectContaining({ name: 's:doc', mode: 'shared', holders: 2 }),
      expect.objectContaining({ name: 's:pool', mode: 'semaphore', limit: 3, holders: 2 }),
    ]);
    const text = await run(prefix, 'list');
    expect(text.stdout).toMatch(/^s:pool +\d+ ms +\d+ +2\/3 permits/m);
    expect(text.stdout).toMatch(/^s:doc +\d+ ms +\d+ +2 shared/m);
    for (const lock of [...permits, ...readers]) await lock.release();
  });

  it.concurrent('release refuses without --force, and with it frees the lock for the next waiter', async () => {
    const prefix = randomPrefix();
    const first = instance(prefix, 'pod-stuck');
    const second = instance(prefix, 'pod-next');
    const keys = lockKeys(prefix, 'settle');
    const stuck = await first.acquire('settle', { ttl: 30_000 });
    const next = second.acquire('settle', { wait: 15_000 });
    await waitFor(async () => (await client.zcard(keys.waiters)) === 1, { message: 'the waiter queued' });

    const refused = await run(prefix, 'release', 'settle');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('--force');
    expect(refused.stderr).toMatch(/mutual exclusion/);
    expect(refused.stderr).toMatch(/fencing tokens/);
    // The holder's owner token, flagged: a waiter queued behind it.
    expect(lockRecord(await client.get(keys.lock)).state).toBe(`${stuck.owner}*`);

    const fenceBefore = counterToken(await client.get(keys.lock));
    expect(fenceBefore).toBe(stuck.fencingToken);
    const forced = await run(prefix, 'release', 'settle', '--force');
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain(
      `was held by ${stuck.owner.slice(0, 8)}… (pod-stuck), fencing token ${stuck.fencingToken}`,
    );
    expect(forced.stdout).toContain('handed to waiter');

    // The waiter's acquire resolves, with a later token: the forced release left the counter alone.
    const taken = await next;
    expect(taken.fencingToken).toBeGreaterThan(fenceBefore);
    expect(counterToken(await client.get(keys.lock))).toBe(taken.fencingToken);
    // The old holder finds out at its next extension, with a message that names the lock and
    // who holds it now.
    const lost = await stuck.extend().catch((error: unknown) => error);
    expect(lost).toBeInstanceOf(LockLostError);
    const holder = (lost as LockLostError).holder;
    expect(holder).toMatchObject({ token: taken.fencingToken, instance: 'pod-next' });
    expect((lost as LockLostError).message).toBe(
      `lost lock "settle" (fencing token ${stuck.fencingToken}): not-owner: another owner holds it now: ` +
        `pod-next, since ${new Date(holder?.takenAt ?? 0).toISOString()} (fencing token ${taken.fencingToken})`,
    );
    expect(Math.abs((holder?.takenAt ?? 0) - Date.now())).toBeLessThan(60_000);

    await taken.release();
    const notHeld = await run(prefix, 'release', 'settle', '--force');
    expect(notHeld.code).toBe(1);
    expect(notHeld.stderr).toContain('is not held');
    expect(counterToken(await client.get(keys.lock))).toBe(taken.fencingToken);
  });

  it.concurrent('release --force names shared holders by their kind: a semaphore’s permits, a read-write lock’s readers', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix, 'pod-shared');
    const permits = await Promise.all([1, 2].map(() => locks.acquire('pool', { limit: 3 })));
    const readers = await Promise.all([1, 2].map(() => locks.acquire('doc', { mode: 'shared' })));
    const pool = await run(prefix, 'release', 'pool', '--force');
    expect(pool.code).toBe(0);
    expect(pool.stdout).toContain('released "pool" (was held by the holders of a semaphore of 3 permits');
    const doc = await run(prefix, 'release', 'doc', '--force');
    expect(doc.code).toBe(0);
    expect(doc.stdout).toContain('released "doc" (was held by shared holders (a read-write lock)');
    // The holds find out at their next extension; their releases have nothing left to free.
    await Promise.allSettled([...permits, ...readers].map((lock) => lock.release()));
  });

  it.concurrent('history prints the runs of a job', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix);
    await locks.runOnce('nightly', async () => 'ok', { instance: 'pod-a', tick: Date.UTC(2026, 0, 1) });
    await expect(
      locks.runOnce(
        'nightly',
        async () => {
          throw new Error('ledger closed');
        },
        { instance: 'pod-b' },
      ),
    ).rejects.toThrow('ledger closed');

    const text = await run(prefix, 'history', 'nightly');
    expect(text.code).toBe(0);
    const lines = text.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^TICK +INSTANCE +FENCE +STARTED +DURATION +OUTCOME$/);
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(
      /^- +pod-b +\d{16} +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} +\d+ ms +failed: Error: ledger closed$/,
    );
    expect(lines[2]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.000 +pod-a +\d{16} +.+ ms +ok$/);

    const newest = await run(prefix, 'history', 'nightly', '--limit', '1', '--json');
    const runs = JSON.parse(newest.stdout) as { instance: string; outcome: string }[];
    expect(runs).toEqual([expect.objectContaining({ instance: 'pod-b', outcome: 'failed' })]);

    const empty = await run(prefix, 'history', 'never-ran');
    expect(empty).toMatchObject({ code: 0, stdout: expect.stringContaining('no runs recorded') });
  });

  it.concurrent('watch prints each acquisition, release and expiry, with a timestamp', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix, 'pod-watch');
    await watching(['feed', '--redis', server.url, '--prefix', prefix, '--interval', '20'], async (seen) => {
      const held = await locks.acquire('feed', { ttl: 10_000 });
      await waitFor(() => seen.length === 1, { message: 'the acquisition was seen' });
      await held.release();
      await waitFor(() => seen.length === 2, { message: 'the release was seen' });
      await locks.acquire('feed', { ttl: 300, autoExtend: false });
      await waitFor(() => seen.length === 4, { message: 'the second acquisition and its expiry were seen' });
      const time = '\\d\\d:\\d\\d:\\d\\d\\.\\d{3}';
      expect(seen[0]).toMatch(
        new RegExp(
          `^${time} {2}feed {2}acquired by ${held.owner.slice(0, 8)}… \\(pod-watch\\), fencing token ${held.fencingToken}, taken at ${time}, \\d+ ms left$`,
        ),
      );
      expect(seen[1]).toMatch(new RegExp(`^${time} {2}feed {2}released by ${held.owner.slice(0, 8)}…$`));
      expect(seen[2]).toMatch(/acquired by/);
      expect(seen[3]).toMatch(/feed {2}expired: the lease of .+ ran out without a release$/);
    });
  });

  it.concurrent('an unreachable or frozen Redis exits 1 with a clear message, without hanging', async () => {
    const nobody = `redis://127.0.0.1:${await freePort()}`;
    const frozen = await startRedis();
    frozen.pause();
    try {
      const [refused, silent] = await Promise.all([
        cli(['inspect', 'x', '--redis', nobody]),
        cli(['list', '--redis', frozen.url]),
      ]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`cannot connect to Redis at ${nobody}`);
      expect(refused.stderr).toContain('ECONNREFUSED');
      expect(silent.code).toBe(1);
      expect(silent.stderr).toContain(`cannot connect to Redis at ${frozen.url}`);
    } finally {
      await frozen.stop();
    }
  });
});

describe('leasehold CLI against a real Redis Cluster of 3 masters', () => {
  let cluster: RedisCluster;
  let client: Cluster;
  const opened: Leasehold[] = [];

  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    client = new Cluster(cluster.startupNodes);
  });
  afterAll(async () => {
    await Promise.all(opened.map((locks) => locks.close()));
    client?.disconnect();
    await cluster?.stop();
  });

  function instance(prefix: string, label: string): Leasehold {
    const locks = new Leasehold(client, { prefix, instance: label });
    opened.push(locks);
    return locks;
  }

  /** The CLI given the URL of one node only, as an operator would type it. */
  function run(node: RedisServer, prefix: string, ...args: string[]): Promise<Result> {
    return cli([...args, '--redis', node.url, '--prefix', prefix]);
  }

  /** The port of the master that serves `key`'s slot, as the cluster itself says. */
  async function masterOf(key: string): Promise<number> {
    const slot = Number(await client.cluster('KEYSLOT', key));
    const ranges = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (range === undefined) throw new Error(`no master serves slot ${slot}`);
    return range[2][1];
  }

  function node(i: number): RedisServer {
    const server = cluster.nodes[i];
    if (server === undefined) throw new Error(`no node ${i}`);
    return server;
  }

  /** The first name `<stem>:<i>` whose slot lives on another master than `entry`. */
  async function nameOffNode(prefix: string, stem: string, entry: RedisServer): Promise<string> {
    for (let i = 0; ; i++) {
      if ((await masterOf(lockKeys(prefix, `${stem}:${i}`).lock)) !== entry.port) return `${stem}:${i}`;
    }
  }

  it.concurrent('inspect and release --force follow the slot to the master that holds the lock', async () => {
    const prefix = randomPrefix();
    const entry = node(0);
    // A lock whose slot lives on another master than the node the URL names.
    const name = await nameOffNode(prefix, 'order', entry);
    const keys = lockKeys(prefix, name);
    const lock = await instance(prefix, 'pod-far').acquire(name, { ttl: 30_000 });
    // The node the URL names does not have the key: a client of that node alone is redirected.
    const direct = new Redis(entry.url);
    try {
      await expect(direct.get(keys.lock)).rejects.toThrow(/MOVED/);
    } finally {
      direct.disconnect();
    }

    const text = await run(entry, prefix, 'inspect', name);
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(`holder    ${lock.owner.slice(0, 8)}… (owner token)`);
    expect(text.stdout).toMatch(/^instance +pod-far$/m);
    expect(text.stdout).toMatch(new RegExp(`fence +${lock.fencingToken} \\(latest`));

    const json = await run(entry, prefix, 'inspect', name, '--json');
    expect(JSON.parse(json.stdout)).toMatchObject({ held: true, owner: lock.owner, instance: 'pod-far' });

    const forced = await run(entry, prefix, 'release', name, '--force');
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain(`was held by ${lock.owner.slice(0, 8)}… (pod-far), fencing token`);
    expect(lockRecord(await client.get(keys.lock)).state).toBeNull();
    await expect(lock.extend()).rejects.toBeInstanceOf(LockLostError);
  });

  it.concurrent('watch hears a lock on another master: its acquisition, hand-off and release', async () => {
    const prefix = randomPrefix();
    const entry = node(0);
    const name = await nameOffNode(prefix, 'feed', entry);
    const locks = instance(prefix, 'pod-feed');
    await watching([name, '--redis', entry.url, '--prefix', prefix, '--interval', '20'], async (seen, ready) => {
      expect(ready).toContain(`watching "${name}"`);
      const held = await locks.acquire(name, { ttl: 10_000 });
      await waitFor(() => seen.length === 1, { message: 'the acquisition was seen' });
      const next = instance(prefix, 'pod-next').acquire(name, { wait: 10_000 });
      await waitFor(async () => (await client.zcard(lockKeys(prefix, name).waiters)) === 1);
      await held.release();
      // Heard on the lock's sharded channel, on the master of its slot.
      await waitFor(() => seen.some((l) => l.includes('handed to waiter')), { message: 'the hand-off was heard' });
      const second = await next;
      await waitFor(() => seen.filter((l) => l.includes('acquired by')).length === 2);
      expect(seen[0]).toContain(
        `acquired by ${held.owner.slice(0, 8)}… (pod-feed), fencing token ${held.fencingToken}`,
      );
      expect(seen.join('\n')).toContain(`acquired by ${second.owner.slice(0, 8)}… (pod-next)`);
      await second.release();
    });
  });

  it.concurrent('list scans every master, whichever node the URL names', async () => {
    const prefix = randomPrefix();
    const locks = instance(prefix, 'pod-many');
    // Enough names that every master serves at least one.
    const names: string[] = [];
    const masters = new Set<number>();
    for (let i = 0; masters.size < cluster.nodes.length || names.length < 6; i++) {
      const name = `batch:${i}`;
      names.push(name);
      masters.add(await masterOf(lockKeys(prefix, name).lock));
    }
    const held = await Promise.all(names.map((name) => locks.acquire(name, { ttl: 30_000 })));
    const released = await locks.acquire('gone');
    await released.release();

    for (const entry of [node(0), node(1), node(2)]) {
      const json = await run(entry, prefix, 'list', '--json');
      expect(json.stderr).toBe('');
      expect(json.code).toBe(0);
      const rows = JSON.parse(json.stdout) as { name: string; owner: string; instance: string }[];
      expect(rows.map((r) => r.name)).toEqual([...names].sort());
      expect(new Set(rows.map((r) => r.instance))).toEqual(new Set(['pod-many']));
    }

    const text = await run(node(1), prefix, 'list');
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(`${names.length} locks held under prefix '${prefix}' on 3 cluster masters`);
    const matched = await run(node(2), prefix, 'list', '--match', 'batch:1*', '--json');
    expect((JSON.parse(matched.stdout) as { name: string }[]).map((r) => r.name)).toEqual(
      names.filter((n) => n.startsWith('batch:1')).sort(),
    );

    for (const lock of held) await lock.release();
  });
});

describe('operator methods on the MemoryStore', () => {
  const settings = (prefix: string) =>
    storeSettings({
      prefix,
      instance: 'test',
      fenceRetention: 60_000,
      handOn: { reservation: DEFAULTS.reservation, announce: false },
    });
  const take = (owner: string, queue?: 'join' | 'member', ttl = 30_000) => ({ owner, ttl, minFence: 0, queue });
  const claimOf = (tick: number) => ({
    owner: 'o',
    ttl: 30_000,
    tick,
    instance: 'i',
    historyLimit: 5,
    clockTolerance: DEFAULTS.clockTolerance,
  });

  it('forceRelease deletes whoever holds it, hands it to the first waiter, and keeps the fence', async () => {
    const store = new MemoryStore().bind(settings('p'));
    expect(await store.forceRelease('job')).toEqual({ result: 'not-held' });
    const first = await store.acquire('job', take('holder'));
    if (!first.acquired) throw new Error('not acquired');
    expect(await store.acquire('job', take('waiter-1', 'join'))).toMatchObject({ acquired: false });
    expect(await store.acquire('job', take('waiter-2', 'join'))).toMatchObject({ acquired: false });
    expect(await store.queued('job', 1)).toEqual({ count: 2, first: ['waiter-1'], reserved: null });

    const handOffs: HandOff[] = [];
    const unwatch = await store.watch('job', (h) => handOffs.push(h));
    expect(await store.forceRelease('job')).toMatchObject({
      result: 'released',
      owner: 'holder',
      holder: { token: first.fence, instance: 'test' },
      woken: 'waiter-1',
    });
    await waitFor(() => handOffs.length === 1);
    // The waiter woken, then the one next in line.
    expect(handOffs).toEqual([{ woken: 'waiter-1', next: ['waiter-2'] }]);
    const queue = await store.queued('job', 5);
    expect(queue).toMatchObject({ count: 1, first: ['waiter-2'], reserved: { owner: 'waiter-1' } });
    expect(queue.reserved?.pttl).toBeLessThanOrEqual(DEFAULTS.reservation);
    expect(await store.inspect('job')).toEqual({
      owner: null,
      pttl: -2,
      fence: first.fence,
      holder: null,
      releasedBy: null,
    });

    // The reservation keeps others out; the woken waiter gets the next token.
    expect(await store.acquire('job', take('barger'))).toMatchObject({ acquired: false });
    const second = await store.acquire('job', take('waiter-1', 'join'));
    if (!second.acquired) throw new Error('not acquired');
    expect(second.fence).toBeGreaterThan(first.fence);
    expect(await store.forceRelease('job')).toMatchObject({ owner: 'waiter-1', woken: 'waiter-2' });
    const third = await store.acquire('job', take('waiter-2', 'join'));
    if (!third.acquired) throw new Error('not acquired');
    expect(third.fence).toBeGreaterThan(second.fence);
    expect(await store.forceRelease('job')).toMatchObject({ owner: 'waiter-2', woken: null });
    expect(await store.queued('job', 5)).toEqual({ count: 0, first: [], reserved: null });
    unwatch();
    await store.close();
  });

  it('scanLocks lists held locks of one prefix matching a glob, and nothing else', async () => {
    const shared = new MemoryStore();
    const store = shared.bind(settings('p'));
    const other = shared.bind(settings('q'));
    for (const name of ['a:1', 'a:2', 'ab', 'b:1', 'x*y', '[lit]']) {
      await store.acquire(name, take('o'));
    }
    await other.acquire('a:9', take('o'));
    await store.acquire('a:short', take('o', undefined, 1));
    await store.acquire('a:gone', take('o'));
    await store.release('a:gone', 'o');
    const claim = await store.claimTick('a:job', claimOf(1));
    expect(claim.claimed).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 5));

    const names = async (match: string) => (await collect(store.scanLocks(match, 10))).sort();
    expect(await names('*')).toEqual(['[lit]', 'a:1', 'a:2', 'a:job', 'ab', 'b:1', 'x*y']);
    expect(await names('a:*')).toEqual(['a:1', 'a:2', 'a:job']);
    expect(await names('a?')).toEqual(['ab']);
    expect(await names('[ab]:1')).toEqual(['a:1', 'b:1']);
    expect(await names('[^a]:1')).toEqual(['b:1']);
    expect(await names('a:[1-1]')).toEqual(['a:1']);
    expect(await names('x\\*y')).toEqual(['x*y']);
    expect(await names('\\[lit\\]')).toEqual(['[lit]']);
    expect(await names('a:')).toEqual([]);
    expect(await collect(other.scanLocks('*', 10))).toEqual(['a:9']);
    await shared.close();
  });
});

describe('CLI conventions: --version, usage on wrong use, colour', () => {
  /** The built CLI with `env` in place of the colour variables of this environment. */
  function cliWith(args: readonly string[], env: Record<string, string> = {}): Promise<Result> {
    return cli(args, colourEnv(env));
  }

  /** The first line the demo prints (its bold title), then the demo is stopped. */
  async function demoTitle(env: Record<string, string>): Promise<string> {
    const child = spawn(process.execPath, [CLI, 'demo', '--ticks', '6'], {
      stdio: ['ignore', 'pipe', 'ignore'],
      env: colourEnv(env),
    });
    const exited = new Promise((resolve) => child.once('close', resolve));
    try {
      const lines = createInterface({ input: child.stdout });
      return await new Promise<string>((resolve, reject) => {
        lines.once('line', resolve);
        child.once('error', reject);
        setTimeout(() => reject(new Error('the demo printed nothing within 10 s')), 10_000).unref();
      });
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
  }

  const version = (
    JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  ).version;

  it.concurrent('--version and -V print the version in package.json on stdout and exit 0', async () => {
    const [long, short] = await Promise.all([cliWith(['--version']), cliWith(['-V'])]);
    for (const result of [long, short]) {
      expect(result).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
    }
  });

  it.concurrent('a bare leasehold prints the usage on stderr and exits 2; asked for, on stdout with 0', async () => {
    const [bare, long, short, word] = await Promise.all([
      cliWith([]),
      cliWith(['--help']),
      cliWith(['-h']),
      cliWith(['help']),
    ]);
    expect(bare.code).toBe(2);
    expect(bare.stdout).toBe('');
    expect(bare.stderr).toMatch(/^usage: leasehold <command> \[options\]/);
    for (const asked of [long, short, word]) {
      expect(asked).toEqual({ code: 0, stdout: bare.stderr, stderr: '' });
    }
    expect(long.stdout).toContain('-V, --version');
    expect(long.stdout).toContain('-h, --help');
  });

  it('colourWanted: FORCE_COLOR forces colour on (0 and false off), NO_COLOR turns it off, FORCE_COLOR wins', () => {
    const cases: [Record<string, string>, boolean, boolean][] = [
      [{}, true, true],
      [{}, false, false],
      [{ TERM: 'dumb' }, true, false],
      [{ NO_COLOR: '1' }, true, false],
      [{ NO_COLOR: '' }, true, true],
      [{ FORCE_COLOR: '1' }, false, true],
      [{ FORCE_COLOR: 'yes' }, false, true],
      [{ FORCE_COLOR: '3', TERM: 'dumb' }, false, true],
      [{ FORCE_COLOR: '' }, false, false],
      [{ FORCE_COLOR: '' }, true, true],
      [{ FORCE_COLOR: '0' }, true, false],
      [{ FORCE_COLOR: 'false' }, true, false],
      [{ FORCE_COLOR: '1', NO_COLOR: '1' }, false, true],
      [{ FORCE_COLOR: '0', NO_COLOR: '' }, true, false],
    ];
    for (const [env, isTTY, wanted] of cases) {
      expect({ env, isTTY, wanted: colourWanted(env, isTTY) }).toEqual({ env, isTTY, wanted });
    }
  });

  it.concurrent('the CLI colours a pipe under FORCE_COLOR, and not under NO_COLOR or FORCE_COLOR=0', async () => {
    const bold = '\u001b[1mleasehold demo: ';
    const plain = 'leasehold demo: ';
    const [none, forced, noColor, both, forcedOff] = await Promise.all([
      demoTitle({}),
      demoTitle({ FORCE_COLOR: '1' }),
      demoTitle({ NO_COLOR: '1' }),
      demoTitle({ FORCE_COLOR: '1', NO_COLOR: '1' }),
      demoTitle({ FORCE_COLOR: '0' }),
    ]);
    const starts = (line: string) => (line.startsWith(bold) ? 'bold' : line.startsWith(plain) ? 'plain' : line);
    expect([none, forced, noColor, both, forcedOff].map(starts)).toEqual(['plain', 'bold', 'plain', 'bold', 'plain']);
    for (const line of [none, noColor, forcedOff]) expect(line).not.toContain('\u001b[');
  });
});

describe('help is wrapped to the terminal, or to 80 columns', () => {
  const commands = [inspect, list, release, history, watch, doctor, verify, migrate];
  const words = (text: string) => text.split(/\s+/).filter(Boolean);
  const over = (text: string, width: number) => text.split('\n').filter((line) => line.length > width);

  it.concurrent('--help, every command’s --help and `help <command>`, not on a terminal: no line over 80 columns', async () => {
    const top = await cli(['--help']);
    expect(top.code).toBe(0);
    // Every command the usage lists, those added later included: `  <name> …` under a heading.
    const named = [...top.stdout.matchAll(/^ {2}([a-z][\w-]*)(?: |$)/gm)].map((m) => m[1] as string);
    expect(named).toEqual(expect.arrayContaining([...commands.map((c) => c.name), 'demo', 'help']));
    const listed = named.filter((name) => name !== 'help');
    const runs = await Promise.all([
      cli([]),
      ...listed.map((name) => cli([name, '--help'])),
      ...listed.map((name) => cli(['help', name])),
    ]);
    const [bare, ...helps] = runs;
    expect(bare?.code).toBe(2);
    expect(over(bare?.stderr ?? '', 80)).toEqual([]);
    expect(over(top.stdout, 80)).toEqual([]);
    for (const [i, result] of helps.entries()) {
      const name = listed[i % listed.length];
      expect(result.code, name).toBe(0);
      expect(result.stdout, name).toMatch(new RegExp(`^(usage: leasehold )?\\s*${name}\\b`));
      expect({ name, over: over(result.stdout, 80) }).toEqual({ name, over: [] });
    }
  });

  it('wrapHelp: every line within the width, the same words in the same order, and text that fits left as written', () => {
    const texts = commands.map((c) => commandUsage(c));
    for (const text of texts) {
      for (const width of [24, 40, 60, 72, 80, 100, 132]) {
        const wrapped = wrapHelp(text, width);
        expect({ width, over: over(wrapped, width) }).toEqual({ width, over: [] });
        // Words are cut only when one is wider than the room a narrow terminal leaves.
        if (width >= 60) expect(words(wrapped)).toEqual(words(text));
      }
      const widest = Math.max(...text.split('\n').map((line) => line.length));
      expect(wrapHelp(text, widest)).toBe(text);
    }
    // A term's description continues at its column; a synopsis's options under the first one.
    expect(wrapHelp('  --json        machine output: one JSON object per line, the whole state', 40)).toBe(
      [
        '  --json        machine output: one JSON',
        '                object per line, the',
        '                whole state',
      ].join('\n'),
    );
    expect(wrapHelp('usage: leasehold watch <name> [--interval MS] [--json] [--redis URL]', 50)).toBe(
      ['usage: leasehold watch <name> [--interval MS]', '                       [--json] [--redis URL]'].join('\n'),
    );
  });

  it('helpWidth: the columns of a terminal, else 80', () => {
    const stream = (isTTY: boolean, columns: number | undefined) =>
      ({ isTTY, columns }) as unknown as NodeJS.WriteStream;
    expect(helpWidth(stream(true, 132))).toBe(132);
    expect(helpWidth(stream(true, 60))).toBe(60);
    expect(helpWidth(stream(false, 132))).toBe(80);
    expect(helpWidth(stream(true, 0))).toBe(80);
  });

  // `script` runs the CLI on a pseudo-terminal of 60 columns: the help follows the terminal's width.
  it.skipIf(spawnSync('script', ['--version']).error !== undefined)(
    'on a terminal of 60 columns, --help and verify --help fit 60 columns',
    () => {
      for (const args of ['--help', 'verify --help']) {
        const run = spawnSync(
          'script',
          [
            '-qec',
            `stty cols 60 rows 50; exec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} ${args}`,
            '/dev/null',
          ],
          { encoding: 'utf8', timeout: 15_000 },
        );
        expect(run.status, run.stderr).toBe(0);
        const text = run.stdout.replace(/\r/g, '');
        expect(text).toContain('usage: leasehold');
        expect({ args, over: over(text, 60) }).toEqual({ args, over: [] });
        expect(Math.max(...text.split('\n').map((line) => line.length))).toBeGreaterThan(50);
      }
    },
  );
});
