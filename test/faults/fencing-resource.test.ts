import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Cluster, Redis } from 'ioredis';
import { Client } from 'pg';
import { createClient, createCluster, createSentinel } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type FencingRedisClient,
  fencedRead,
  fencedUpdate,
  fencedUpdatePg,
  fencedUpdateSql,
  fencedWrite,
  quoteIdentifier,
} from '../../src/fencing/index.js';
import { DEFAULTS, Leasehold } from '../../src/index.js';
import {
  type PostgresServer,
  type RedisCluster,
  type RedisServer,
  randomPrefix,
  type SentinelGroup,
  startCluster,
  startPostgres,
  startRedis,
  startSentinelGroup,
} from '../harness/index.js';

/**
 * The resource side of fencing: a holder paused past its lease wakes and writes with its old
 * token while another instance holds the lock and has written with a newer one. The fenced write
 * (a Redis script, a SQL UPDATE with `fence <= $token`) refuses it; the same run with a plain write
 * lets it land, so the check is shown to be what stops it. A token equal to the stored fence comes
 * from the same grant, and its holder may write again.
 */

/** A token as leasehold issues them: the server clock in µs. */
const T = 1_796_287_110_708_800;

interface HolderMessage {
  event: 'ready' | 'acquired' | 'lost' | 'wrote' | 'error';
  [field: string]: unknown;
}

/** The holder process (fencing-resource/holder.mjs) and the messages it sent, by event. */
class Holder {
  readonly #inbox: HolderMessage[] = [];
  readonly #waiting: Array<() => void> = [];

  private constructor(readonly process: ChildProcess) {
    process.on('message', (m: HolderMessage) => {
      this.#inbox.push(m);
      for (const wake of this.#waiting.splice(0)) wake();
    });
  }

  static async start(args: string[]): Promise<Holder> {
    const script = fileURLToPath(new URL('./fencing-resource/holder.mjs', import.meta.url));
    const holder = new Holder(fork(script, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    await holder.until('ready', 15_000);
    return holder;
  }

  send(message: Record<string, unknown>): void {
    this.process.send(message);
  }

  /** The first message with this event (taken out of the inbox); an `error` message rejects. */
  async until(event: HolderMessage['event'], timeout = 10_000): Promise<HolderMessage> {
    const deadline = Date.now() + timeout;
    for (;;) {
      const failed = this.#inbox.find((m) => m.event === 'error');
      if (failed) throw new Error(`holder failed: ${String(failed.message)}`);
      const index = this.#inbox.findIndex((m) => m.event === event);
      if (index >= 0) return this.#inbox.splice(index, 1)[0]!;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no '${event}' from the holder within ${timeout} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiting.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  async stop(): Promise<void> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return;
    const exited = once(this.process, 'exit');
    this.process.kill('SIGCONT');
    this.process.kill('SIGKILL');
    await exited;
  }
}

interface PausedRun {
  staleToken: number;
  freshToken: number;
  /** What the woken holder's write returned. */
  stale: { written: boolean; newest?: number };
  /** ms the holder was stopped. */
  pausedMs: number;
}

/** The paused holder's lease. */
const PAUSED_TTL = 400;
/**
 * The earliest its lease can end after the SIGSTOP: its watchdog's last extension may have reached
 * the server up to ttl / extendDivisor before the stop, and the lease runs ttl from there.
 */
const EARLIEST_EXPIRY = PAUSED_TTL - PAUSED_TTL / DEFAULTS.extendDivisor;

/**
 * The holder acquires (ttl 400 ms, watchdog on) and is SIGSTOPped. `fresh` (another Leasehold
 * instance, in this process) waits for the lock, gets it once the lease has run out, and writes
 * with its token. The holder is told to write and SIGCONTed: its write goes out with its old token.
 */
async function pausedHolderRun(
  holderArgs: string[],
  lockClient: Redis,
  prefix: string,
  write: Record<string, unknown>,
  fresh: (token: number) => Promise<void>,
): Promise<PausedRun> {
  const holder = await Holder.start(holderArgs);
  const locks = new Leasehold(lockClient, { prefix });
  try {
    holder.send({ cmd: 'acquire', name: 'ledger', ttl: PAUSED_TTL });
    const staleToken = Number((await holder.until('acquired')).fencingToken);
    holder.process.kill('SIGSTOP');
    const stoppedAt = performance.now();
    const lock = await locks.acquire('ledger', { ttl: 10_000, wait: 5_000 });
    // Not before the stopped holder's lease ran out on the server.
    expect(performance.now() - stoppedAt).toBeGreaterThan(EARLIEST_EXPIRY);
    await fresh(lock.fencingToken);
    holder.send({ cmd: 'write', ...write });
    const pausedMs = performance.now() - stoppedAt;
    holder.process.kill('SIGCONT');
    const wrote = await holder.until('wrote');
    // The holder learns it lost the lock when it wakes, but its write was already under way.
    await holder.until('lost', 5_000);
    await lock.release();
    return { staleToken, freshToken: lock.fencingToken, stale: wrote.result as PausedRun['stale'], pausedMs };
  } finally {
    holder.send({ cmd: 'exit' });
    await Promise.race([once(holder.process, 'exit'), new Promise((r) => setTimeout(r, 3_000))]);
    await holder.stop();
    await locks.close();
  }
}

/** A client that fails the test if any command reaches it. */
const NO_SERVER: FencingRedisClient = {
  eval: () => Promise.reject(new Error('no command should be sent')),
};

describe('token checks (no server)', () => {
  it.each([
    [1.5, '1.5'],
    [Number.NaN, 'NaN'],
    [Number.POSITIVE_INFINITY, 'Infinity'],
    [2 ** 53, '9007199254740992'],
    ['1796287110708800', '"1796287110708800"'],
    [1796287110708800n, '1796287110708800n'],
    [undefined, 'undefined'],
  ])('refuses %s with a TypeError naming it', async (token, shown) => {
    const bad = token as unknown as number;
    await expect(fencedWrite(NO_SERVER, 'k', bad, 'v')).rejects.toThrow(TypeError);
    await expect(fencedWrite(NO_SERVER, 'k', bad, 'v')).rejects.toThrow(shown);
    await expect(fencedUpdate(NO_SERVER, 'k', bad, () => 'v')).rejects.toThrow(shown);
    expect(() => fencedUpdateSql({ table: 't', set: { a: 1 }, id: 1, token: bad })).toThrow(TypeError);
    expect(() => fencedUpdateSql({ table: 't', set: { a: 1 }, id: 1, token: bad })).toThrow(shown);
  });

  it.each([0, -1, -T])('refuses %s with a RangeError', async (token) => {
    await expect(fencedWrite(NO_SERVER, 'k', token, 'v')).rejects.toThrow(RangeError);
    expect(() => fencedUpdateSql({ table: 't', set: {}, id: 1, token })).toThrow(RangeError);
  });

  it('refuses a value that is not a string and a client that is neither ioredis nor node-redis', async () => {
    await expect(fencedWrite(NO_SERVER, 'k', T, 42 as unknown as string)).rejects.toThrow(TypeError);
    await expect(fencedWrite({} as FencingRedisClient, 'k', T, 'v')).rejects.toThrow(/ioredis|node-redis/);
  });
});

describe('fencedUpdateSql', () => {
  it('builds UPDATE … SET cols, fence = $n WHERE id = $m AND fence <= $n, the token as a decimal string', () => {
    expect(fencedUpdateSql({ table: 'accounts', set: { balance: 120, note: 'x' }, id: 'acct-1', token: T })).toEqual({
      text: 'UPDATE "accounts" SET "balance" = $1, "note" = $2, "fence" = $3 WHERE "id" = $4 AND "fence" <= $3',
      values: [120, 'x', '1796287110708800', 'acct-1'],
    });
  });

  it('takes other id and fence columns, a schema-qualified table and an expected fence', () => {
    expect(
      fencedUpdateSql({
        table: 'billing.Ledger',
        idColumn: 'account_id',
        fenceColumn: 'last_token',
        set: { order: 'o-1' },
        id: 7,
        token: T + 2,
        expectedFence: T + 1,
      }),
    ).toEqual({
      text:
        'UPDATE "billing"."Ledger" SET "order" = $1, "last_token" = $2 ' +
        'WHERE "account_id" = $3 AND "last_token" <= $2 AND "last_token" = $4',
      values: ['o-1', String(T + 2), 7, String(T + 1)],
    });
    expect(fencedUpdateSql({ table: 't', set: {}, id: 1, token: T, expectedFence: 0 }).values).toEqual([
      String(T),
      1,
      '0',
    ]);
  });

  it.each([
    ['table', { table: 'accounts; DROP TABLE accounts' }],
    ['table', { table: 'a"b' }],
    ['table', { table: 'a.b.c' }],
    ['table', { table: '' }],
    ['table', { table: 'x'.repeat(64) }],
    ['idColumn', { idColumn: '1id' }],
    ['idColumn', { idColumn: 'id OR 1=1' }],
    ['fenceColumn', { fenceColumn: 'fence--' }],
    ['fenceColumn', { fenceColumn: 'fénce' }],
    ['set column', { set: { 'note = note || $1 --': 'x' } }],
  ])('refuses an unsafe %s', (what, bad) => {
    const options = { table: 'accounts', set: { note: 'x' }, id: 1, token: T, ...bad };
    expect(() => fencedUpdateSql(options)).toThrow(TypeError);
    expect(() => fencedUpdateSql(options)).toThrow(what);
  });

  it('refuses setting the fence column itself, and a missing id', () => {
    expect(() => fencedUpdateSql({ table: 't', set: { fence: 1 }, id: 1, token: T })).toThrow(/fence column/);
    expect(() => fencedUpdateSql({ table: 't', set: {}, id: undefined, token: T })).toThrow(/id is required/);
  });

  it('quoteIdentifier double-quotes a valid identifier and refuses any other', () => {
    expect(quoteIdentifier('user')).toBe('"user"');
    expect(() => quoteIdentifier('"user"')).toThrow(TypeError);
  });
});

it('the built leasehold/fencing loads no Redis or pg package', () => {
  for (const file of ['fencing.js', 'fencing.cjs']) {
    const code = readFileSync(fileURLToPath(new URL(`../../dist/${file}`, import.meta.url)), 'utf8');
    expect(code).toContain('fencedWrite');
    expect(code).not.toMatch(/(from\s*|require\(\s*|import\(\s*)["'](ioredis|redis|@redis\/[^"']*|pg)["']/);
  }
});

describe('Redis', () => {
  let server: RedisServer;
  let lockClient: Redis;
  const clients: { label: string; client: FencingRedisClient; close: () => Promise<void> }[] = [];

  beforeAll(async () => {
    server = await startRedis();
    lockClient = new Redis(server.port, server.host);
    const ioredis = new Redis(server.port, server.host);
    const nodeRedis = createClient({ url: server.url });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
    clients.push(
      { label: 'ioredis', client: ioredis, close: async () => ioredis.disconnect() },
      { label: 'node-redis', client: nodeRedis, close: async () => nodeRedis.destroy() },
    );
  });
  afterAll(async () => {
    for (const c of clients) await c.close();
    lockClient?.disconnect();
    await server?.stop();
  });

  for (const label of ['ioredis', 'node-redis'] as const) {
    describe(label, () => {
      const client = (): FencingRedisClient => clients.find((c) => c.label === label)!.client;

      it('stores a value with its token; an equal or larger token is accepted, an older one refused', async () => {
        const key = `${randomPrefix()}:doc`;
        expect(await fencedRead(client(), key)).toBeNull();
        expect(await fencedWrite(client(), key, T, 'first')).toEqual({ written: true });
        expect(await fencedRead(client(), key)).toEqual({ value: 'first', fence: T });
        expect(await fencedWrite(client(), key, T, 'same token')).toEqual({ written: true });
        expect(await fencedRead(client(), key)).toEqual({ value: 'same token', fence: T });
        expect(await fencedWrite(client(), key, T - 1, 'older')).toEqual({ written: false, newest: T });
        expect(await fencedWrite(client(), key, T + 1, 'newer')).toEqual({ written: true });
        expect(await fencedWrite(client(), key, T, 'older now')).toEqual({ written: false, newest: T + 1 });
        expect(await fencedRead(client(), key)).toEqual({ value: 'newer', fence: T + 1 });
      });

      it("a holder writes twice with its grant's token; after a newer grant wrote, the older token is refused", async () => {
        const prefix = randomPrefix();
        const key = `${prefix}:doc`;
        const locks = new Leasehold(lockClient, { prefix });
        try {
          const first = await locks.acquire('doc', { ttl: 10_000 });
          const older = first.fencingToken;
          expect(await fencedWrite(client(), key, older, 'draft')).toEqual({ written: true });
          expect(await fencedUpdate(client(), key, older, (v) => `${v} + final`)).toEqual({
            written: true,
            value: 'draft + final',
            attempts: 1,
          });
          expect(await fencedRead(client(), key)).toEqual({ value: 'draft + final', fence: older });
          await first.release();
          const second = await locks.acquire('doc', { ttl: 10_000 });
          const newer = second.fencingToken;
          expect(newer).toBeGreaterThan(older);
          expect(await fencedWrite(client(), key, newer, 'second holder')).toEqual({ written: true });
          expect(await fencedWrite(client(), key, newer, 'second holder again')).toEqual({ written: true });
          // The first grant's token, once the same as the fence, is now refused with the newer one.
          expect(await fencedWrite(client(), key, older, 'late')).toEqual({ written: false, newest: newer });
          let called = false;
          const late = await fencedUpdate(client(), key, older, () => {
            called = true;
            return 'late';
          });
          expect(late).toEqual({ written: false, newest: newer, attempts: 1 });
          expect(called).toBe(false);
          expect(await fencedRead(client(), key)).toEqual({ value: 'second holder again', fence: newer });
          await second.release();
        } finally {
          await locks.close();
        }
      });

      it('compares tokens exactly: more digits win, and the largest safe integer round-trips', async () => {
        const key = `${randomPrefix()}:doc`;
        expect(await fencedWrite(client(), key, 999, 'a')).toEqual({ written: true });
        expect(await fencedWrite(client(), key, 1000, 'b')).toEqual({ written: true });
        expect(await fencedWrite(client(), key, 999, 'c')).toEqual({ written: false, newest: 1000 });
        const max = Number.MAX_SAFE_INTEGER;
        expect(await fencedWrite(client(), key, max - 1, 'd')).toEqual({ written: true });
        expect(await fencedWrite(client(), key, max, 'e')).toEqual({ written: true });
        expect(await fencedWrite(client(), key, max - 1, 'f')).toEqual({ written: false, newest: max });
        expect(await fencedRead(client(), key)).toEqual({ value: 'e', fence: max });
      });

      it('a script error for a fence that is not an integer', async () => {
        const key = `${randomPrefix()}:doc`;
        await lockClient.hset(key, 'value', 'x', 'fence', 'abc');
        await expect(fencedWrite(client(), key, T, 'v')).rejects.toThrow(/not an integer/);
      });

      it('fencedUpdate: read-modify-write, retried when the fence moves under it', async () => {
        const key = `${randomPrefix()}:counter`;
        let calls = 0;
        const created = await fencedUpdate(client(), key, T, (current) => {
          calls++;
          expect(current).toBeNull();
          return '1';
        });
        expect(created).toEqual({ written: true, value: '1', attempts: 1 });
        // While the holder of T + 10 computes, a writer with T + 5 (older than it, newer than the
        // fence it read) writes: the first try must not overwrite that, the second builds on it.
        const seen: (string | null)[] = [];
        const result = await fencedUpdate(client(), key, T + 10, async (current) => {
          seen.push(current);
          if (seen.length === 1) expect(await fencedWrite(client(), key, T + 5, '100')).toEqual({ written: true });
          return String(Number(current) + 1);
        });
        expect(seen).toEqual(['1', '100']);
        expect(result).toEqual({ written: true, value: '101', attempts: 2 });
        expect(await fencedRead(client(), key)).toEqual({ value: '101', fence: T + 10 });
        expect(calls).toBe(1);
      });

      it('fencedUpdate refuses a stale token without computing, and loses to a newer write made meanwhile', async () => {
        const key = `${randomPrefix()}:counter`;
        await fencedWrite(client(), key, T, '1');
        let called = false;
        const stale = await fencedUpdate(client(), key, T - 1, () => {
          called = true;
          return 'x';
        });
        expect(stale).toEqual({ written: false, newest: T, attempts: 1 });
        expect(called).toBe(false);
        // The token of the write it reads back is its own: it builds on it.
        expect(await fencedUpdate(client(), key, T, (v) => `${v}+`)).toEqual({
          written: true,
          value: '1+',
          attempts: 1,
        });
        expect(await fencedRead(client(), key)).toEqual({ value: '1+', fence: T });
        const overtaken = await fencedUpdate(client(), key, T + 1, async () => {
          await fencedWrite(client(), key, T + 2, 'newest');
          return 'lost';
        });
        expect(overtaken).toEqual({ written: false, newest: T + 2, attempts: 1 });
        expect(await fencedRead(client(), key)).toEqual({ value: 'newest', fence: T + 2 });
      });

      it('fencedUpdate gives up after maxAttempts when the fence moves every time', async () => {
        const key = `${randomPrefix()}:counter`;
        let fence = 100;
        const update = async () => {
          fence++;
          await fencedWrite(client(), key, fence, 'other');
          return 'mine';
        };
        await expect(fencedUpdate(client(), key, T, update, { maxAttempts: 3 })).rejects.toThrow(/3 attempts/);
        expect(fence).toBe(103);
        expect(await fencedRead(client(), key)).toEqual({ value: 'other', fence: 103 });
      });

      it('a holder paused past its lease: its stale fencedWrite is rejected', async () => {
        const prefix = randomPrefix();
        const key = `${prefix}:resource`;
        const run = await pausedHolderRun(
          [server.url, prefix, label],
          lockClient,
          prefix,
          { target: 'redis', fenced: true, key, value: 'from the paused holder' },
          async (token) => {
            expect(await fencedWrite(client(), key, token, 'a draft from the new holder')).toEqual({ written: true });
            expect(await fencedWrite(client(), key, token, 'from the new holder')).toEqual({ written: true });
          },
        );
        expect(run.freshToken).toBeGreaterThan(run.staleToken);
        expect(run.pausedMs).toBeGreaterThan(EARLIEST_EXPIRY);
        expect(run.stale).toEqual({ written: false, newest: run.freshToken });
        expect(await fencedRead(client(), key)).toEqual({ value: 'from the new holder', fence: run.freshToken });
      });

      it('negative control: the same run with a plain HSET lets the stale write land', async () => {
        const prefix = randomPrefix();
        const key = `${prefix}:resource`;
        const run = await pausedHolderRun(
          [server.url, prefix, label],
          lockClient,
          prefix,
          { target: 'redis', fenced: false, key, value: 'from the paused holder' },
          async (token) => {
            await lockClient.hset(key, 'value', 'from the new holder', 'fence', String(token));
          },
        );
        expect(run.freshToken).toBeGreaterThan(run.staleToken);
        expect(run.stale).toEqual({ written: true });
        // The older holder's write replaced the newer one's: the fence went backwards.
        expect(await fencedRead(client(), key)).toEqual({ value: 'from the paused holder', fence: run.staleToken });
      });
    });
  }
});

describe('Redis Cluster', () => {
  let cluster: RedisCluster;
  const clients: { label: string; client: FencingRedisClient; close: () => Promise<void> }[] = [];

  beforeAll(async () => {
    cluster = await startCluster();
    const ioredis = new Cluster(cluster.startupNodes);
    const nodeRedis = createCluster({
      rootNodes: cluster.startupNodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
    });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
    clients.push(
      { label: 'ioredis Cluster', client: ioredis, close: async () => ioredis.disconnect() },
      { label: 'node-redis cluster', client: nodeRedis, close: async () => nodeRedis.destroy() },
    );
  });
  afterAll(async () => {
    for (const c of clients) await c.close();
    await cluster?.stop();
  });

  it('routes the scripts by key, for both clients', async () => {
    for (const { client } of clients) {
      for (let i = 0; i < 6; i++) {
        const key = `${randomPrefix()}:doc:${i}`;
        expect(await fencedWrite(client, key, T, 'a')).toEqual({ written: true });
        expect(await fencedWrite(client, key, T, 'b')).toEqual({ written: true });
        expect(await fencedWrite(client, key, T - 1, 'c')).toEqual({ written: false, newest: T });
        expect(await fencedUpdate(client, key, T + 1, (v) => `${v}+`)).toEqual({
          written: true,
          value: 'b+',
          attempts: 1,
        });
        expect(await fencedRead(client, key)).toEqual({ value: 'b+', fence: T + 1 });
      }
    }
  });
});

describe('node-redis Sentinel client', () => {
  let group: SentinelGroup;
  let client: ReturnType<typeof createSentinel> | undefined;

  beforeAll(async () => {
    group = await startSentinelGroup();
    client = createSentinel({
      name: group.name,
      sentinelRootNodes: [{ host: group.sentinel.host, port: group.sentinel.port }],
    });
    client.on('error', () => {});
    await client.connect();
  });
  afterAll(async () => {
    await client?.destroy();
    await group?.stop();
  });

  it('sends the scripts to the master', async () => {
    const key = `${randomPrefix()}:doc`;
    expect(await fencedWrite(client!, key, T, 'a')).toEqual({ written: true });
    expect(await fencedWrite(client!, key, T - 1, 'b')).toEqual({ written: false, newest: T });
    expect(await fencedUpdate(client!, key, T + 1, (v) => `${v}+`)).toEqual({
      written: true,
      value: 'a+',
      attempts: 1,
    });
    expect(await fencedRead(client!, key)).toEqual({ value: 'a+', fence: T + 1 });
    expect(await group.master.command('HGET', key, 'fence')).toBe(String(T + 1));
  });
});

describe('PostgreSQL', () => {
  let server: PostgresServer;
  let redis: RedisServer;
  let lockClient: Redis;
  let db: Client;

  beforeAll(async () => {
    [server, redis] = await Promise.all([startPostgres(), startRedis()]);
    lockClient = new Redis(redis.port, redis.host);
    db = new Client({ connectionString: server.url });
    db.on('error', () => {});
    await db.connect();
    await db.query('CREATE TABLE ledger (id text PRIMARY KEY, note text NOT NULL, fence bigint NOT NULL DEFAULT 0)');
  });
  afterAll(async () => {
    await db?.end().catch(() => {});
    lockClient?.disconnect();
    await Promise.all([server?.stop(), redis?.stop()]);
  });

  async function row(id: string): Promise<{ note: string; fence: string }> {
    const { rows } = await db.query<{ note: string; fence: string }>('SELECT note, fence FROM ledger WHERE id = $1', [
      id,
    ]);
    return rows[0]!;
  }

  async function newRow(): Promise<string> {
    const id = randomPrefix();
    await db.query("INSERT INTO ledger (id, note) VALUES ($1, 'initial')", [id]);
    return id;
  }

  it('an equal or larger token is accepted, an older one refused; the bigint column holds the token exactly', async () => {
    const id = await newRow();
    const write = (token: number, note: string) => fencedUpdatePg(db, { table: 'ledger', set: { note }, id, token });
    expect(await write(T, 'a')).toEqual({ written: true });
    expect(await write(T, 'b')).toEqual({ written: true });
    expect(await row(id)).toEqual({ note: 'b', fence: String(T) });
    expect(await write(T - 1, 'c')).toEqual({ written: false });
    expect(await write(Number.MAX_SAFE_INTEGER, 'd')).toEqual({ written: true });
    expect(await write(Number.MAX_SAFE_INTEGER, 'e')).toEqual({ written: true });
    expect(await write(Number.MAX_SAFE_INTEGER - 1, 'f')).toEqual({ written: false });
    expect(await write(T, 'g')).toEqual({ written: false });
    // pg returns a bigint as a string: exact, and Number() of it is exact for any token.
    expect(await row(id)).toEqual({ note: 'e', fence: String(Number.MAX_SAFE_INTEGER) });
    expect(await fencedUpdatePg(db, { table: 'ledger', set: { note: 'x' }, id: 'no such row', token: T })).toEqual({
      written: false,
    });
  });

  it('read-modify-write (SELECT, then the fenced UPDATE): the stale token loses', async () => {
    const id = await newRow();
    const older = T + 1;
    const newer = T + 2;
    // Both holders read the row; the newer writes first, then the older (paused in between) writes.
    const readByOlder = await row(id);
    const readByNewer = await row(id);
    const update = (token: number, read: { note: string; fence: string }, rowId = id) =>
      fencedUpdatePg(db, {
        table: 'ledger',
        set: { note: `${read.note} + ${token}` },
        id: rowId,
        token,
        expectedFence: Number(read.fence),
      });
    expect(await update(newer, readByNewer)).toEqual({ written: true });
    expect(await update(older, readByOlder)).toEqual({ written: false });
    expect(await row(id)).toEqual({ note: `initial + ${newer}`, fence: String(newer) });
    // With expectedFence, an older token that wrote between a newer holder's read and write is not
    // overwritten by a value computed without it: the newer holder reads again.
    const id2 = await newRow();
    const stale = await row(id2);
    expect(await update(older, await row(id2), id2)).toEqual({ written: true });
    expect(await update(newer, stale, id2)).toEqual({ written: false });
    expect(await update(newer, await row(id2), id2)).toEqual({ written: true });
    expect(await row(id2)).toEqual({ note: `initial + ${older} + ${newer}`, fence: String(newer) });
    // The newer holder reads its own write back and updates again with the same token.
    expect(await update(newer, await row(id2), id2)).toEqual({ written: true });
    expect(await row(id2)).toEqual({ note: `initial + ${older} + ${newer} + ${newer}`, fence: String(newer) });
    expect(await update(older, await row(id2), id2)).toEqual({ written: false });
  });

  it('a holder paused past its lease: its stale fencedUpdatePg is rejected', async () => {
    const id = await newRow();
    const prefix = randomPrefix();
    const run = await pausedHolderRun(
      [redis.url, prefix, 'ioredis', server.url],
      lockClient,
      prefix,
      { target: 'pg', fenced: true, table: 'ledger', id, value: 'from the paused holder' },
      async (token) => {
        const draft = { note: 'a draft from the new holder' };
        expect(await fencedUpdatePg(db, { table: 'ledger', set: draft, id, token })).toEqual({ written: true });
        const set = { note: 'from the new holder' };
        expect(await fencedUpdatePg(db, { table: 'ledger', set, id, token })).toEqual({ written: true });
      },
    );
    expect(run.freshToken).toBeGreaterThan(run.staleToken);
    expect(run.stale).toEqual({ written: false });
    expect(await row(id)).toEqual({ note: 'from the new holder', fence: String(run.freshToken) });
  });

  it('negative control: the same run with a plain UPDATE lets the stale write land', async () => {
    const id = await newRow();
    const prefix = randomPrefix();
    const run = await pausedHolderRun(
      [redis.url, prefix, 'ioredis', server.url],
      lockClient,
      prefix,
      { target: 'pg', fenced: false, table: 'ledger', id, value: 'from the paused holder' },
      async (token) => {
        await db.query('UPDATE ledger SET note = $1, fence = $2 WHERE id = $3', [
          'from the new holder',
          String(token),
          id,
        ]);
      },
    );
    expect(run.freshToken).toBeGreaterThan(run.staleToken);
    expect(run.stale).toEqual({ written: true });
    expect(await row(id)).toEqual({ note: 'from the paused holder', fence: String(run.staleToken) });
  });
});
