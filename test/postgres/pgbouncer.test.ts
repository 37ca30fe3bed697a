import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { listenersOf } from '../../src/store/postgres/listener.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { channelOf, statements } from '../../src/store/postgres/queries.js';
import { schemaNames } from '../../src/store/postgres/schema.js';
import { freePort, randomPrefix, waitFor } from '../harness/index.js';
import { makeTempDir, ServerProcess } from '../harness/process.js';
import { postgresFixture } from './fixture.js';

/**
 * Through PgBouncer in transaction mode, where consecutive statements of one client may run on
 * different server connections and a server connection serves many clients in turn: every call
 * is one statement (one transaction), so locks, waiting and jobs work, the migration included;
 * LISTEN needs a session of its own, given with `listen`. Runs where the pgbouncer binary is
 * installed (Debian's pgbouncer package), and is skipped elsewhere.
 */

const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((path) => existsSync(path));
/** The settings the tests' stores are made with (the rest, waiter lease and hand-on, are the defaults). */
const SETTINGS = { instance: 'test', fenceRetention: 60_000 } as const;
const REQUEST = { ttl: 5_000 } as const;

/** PgBouncer refuses to run as root: as root it runs as the user the PostgreSQL servers run as. */
function identity(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'leasehold-pg'], { encoding: 'utf8' }));
  return { uid: id('-u'), gid: id('-g') };
}

class PgBouncer extends ServerProcess {
  constructor(
    readonly port: number,
    dir: string,
  ) {
    const who = identity();
    super({
      label: `pgbouncer on port ${port}`,
      command: PGBOUNCER as string,
      args: [join(dir, 'pgbouncer.ini')],
      spawn: { cwd: dir, ...(who ?? {}) },
      readyWhat: 'answer SELECT 1',
      readyTimeoutMs: 10_000,
      stopSignal: 'SIGINT',
      stopGraceMs: 2_000,
    });
  }

  get url(): string {
    return `postgres://leasehold@127.0.0.1:${this.port}/leasehold`;
  }

  protected async ready(): Promise<boolean> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 1_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}

/** A bouncer in transaction mode in front of `serverPort`, with `connections` server connections for all its clients. */
async function startPgBouncer(serverPort: number, connections = 2): Promise<PgBouncer> {
  const dir = makeTempDir('leasehold-pgbouncer-');
  const port = await freePort();
  const ini = `[databases]
leasehold = host=127.0.0.1 port=${serverPort} dbname=leasehold user=leasehold

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = ${connections}
max_client_conn = 200
logfile = ${join(dir, 'pgbouncer.log')}
pidfile = ${join(dir, 'pgbouncer.pid')}
`;
  writeFileSync(join(dir, 'pgbouncer.ini'), ini);
  const who = identity();
  if (who) chownSync(dir, who.uid, who.gid);
  const bouncer = new PgBouncer(port, dir);
  await bouncer.start();
  return bouncer;
}

describe.skipIf(PGBOUNCER === undefined)('PostgreSQL through PgBouncer in transaction mode', () => {
  const db = postgresFixture();

  async function bouncer(connections?: number): Promise<PgBouncer> {
    const b = await startPgBouncer(db.server.port, connections);
    db.later(() => b.stop());
    return b;
  }

  function throughBouncer(b: PgBouncer): pg.Pool {
    const pool = new pg.Pool({ connectionString: b.url, max: 3 });
    pool.on('error', () => {});
    db.later(() => pool.end());
    return pool;
  }

  it('statements, the migration and jobs work; waiters queue in order, and a direct listening session wakes them', async () => {
    const b = await bouncer();
    const prefix = randomPrefix();
    const direct = db.ownPool({ max: 1 });
    const pods = [0, 1, 2, 3].map(() => db.leasehold({ postgres: throughBouncer(b), listen: direct }, { prefix }));
    let inside = 0;
    let most = 0;
    const tokens: number[] = [];
    await Promise.all(
      pods.map(async (pod) => {
        for (let i = 0; i < 8; i++) {
          await pod.withLock('counter', { ttl: 5_000, wait: 20_000 }, async (_signal, lock) => {
            most = Math.max(most, ++inside);
            tokens.push(lock.fencingToken);
            await new Promise((resolve) => setTimeout(resolve, 2));
            inside--;
          });
        }
      }),
    );
    expect(most).toBe(1);
    expect(tokens).toEqual([...tokens].sort((x, y) => x - y));
    expect(new Set(tokens).size).toBe(32);

    const [a, w] = pods as [Leasehold, Leasehold];
    const held = await a.acquire('wake', { ttl: 20_000 });
    const waiting = w.acquire('wake', { wait: 15_000 });
    const store = new PostgresStore(db.pool, { prefix });
    await waitFor(
      async () => (await store.queued('wake', 0)).count === 1 && listenersOf(channelOf(prefix, 'wake')) === 1,
    );
    const releasedAt = performance.now();
    await held.release();
    await (await waiting).release();
    expect(performance.now() - releasedAt).toBeLessThan(1_500);
    expect(await a.runOnce('job', () => 'ran', { tick: 1_000 })).toEqual({ ran: true, value: 'ran' });
    expect(await w.runOnce('job', () => 'ran', { tick: 1_000 })).toEqual({ ran: false, reason: 'already-ran' });
  });

  it('named statements the bouncer does not keep: the first refusal, doubled or missing, switches a store to unnamed ones, and every call answers as it should', async () => {
    // One server connection for every client: a name one client prepared is there for the others.
    const b = await bouncer(1);
    const prefix = randomPrefix();
    const sent = new Map<pg.Client, Array<string | undefined>>();
    const through = async () => {
      const client = new pg.Client({ connectionString: b.url });
      client.on('error', () => {});
      await client.connect();
      db.later(() => client.end());
      const query = client.query.bind(client) as (config: { name?: string }) => Promise<unknown>;
      const names: Array<string | undefined> = [];
      (client as unknown as { query: typeof query }).query = (config) => {
        names.push(config.name);
        return query(config);
      };
      sent.set(client, names);
      return client;
    };
    const [ca, cb, other] = [await through(), await through(), await through()];
    const [a, w] = [ca, cb].map((c) => {
      const s = new PostgresStore(c, { prefix, ...SETTINGS });
      db.later(() => s.close());
      return s;
    }) as [PostgresStore, PostgresStore];
    const acquireName = statements(schemaNames(prefix)).acquire.name;
    expect(await a.acquire('x', { ...REQUEST, owner: 'a' })).toMatchObject({ acquired: true });
    // w's Parse of a name the server connection has already: refused (42P05), sent again unnamed.
    expect(await w.acquire('x', { ...REQUEST, owner: 'w' })).toMatchObject({ acquired: false });
    expect(await w.release('x', 'w')).toBe('not-owner');
    expect(sent.get(cb)?.filter((name) => name !== undefined)).toEqual([acquireName]);
    // The server connection forgets a's statement: a's next Bind names one that is missing (26000).
    await other.query({ text: 'DEALLOCATE ALL' });
    expect(await a.acquire('x', { ...REQUEST, owner: 'a' })).toMatchObject({ acquired: true });
    expect(await a.extend('x', 'a', 5_000)).toBe('extended');
    expect(await a.release('x', 'a')).toBe('released');
    expect(await w.acquire('x', { ...REQUEST, owner: 'w' })).toMatchObject({ acquired: true });
    expect(await w.release('x', 'w')).toBe('released');
    expect(sent.get(ca)?.filter((name) => name !== undefined)).toEqual([acquireName, acquireName]);
  });

  it('without a direct listening session, LISTEN through the bouncer is not to be relied on: waiters still get the lock, by their timers', async () => {
    const b = await bouncer();
    const prefix = randomPrefix();
    const [a, w] = [0, 1].map(() => db.leasehold(throughBouncer(b), { prefix })) as [Leasehold, Leasehold];
    const held = await a.acquire('fallback', { ttl: 1_000, autoExtend: false });
    const lock = await w.acquire('fallback', { wait: 5_000 });
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await held.release()).toBe(false);
    expect(await lock.release()).toBe(true);
  });
});
