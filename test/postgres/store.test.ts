import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  type Backend,
  ErrorCode,
  Leasehold,
  type LeaseholdOptions,
  LockError,
  StoreUnavailableError,
} from '../../src/index.js';
import { PostgresStore, type PostgresStoreOptions } from '../../src/store/postgres/postgres-store.js';
import { migrationSql, schemaNames } from '../../src/store/postgres/schema.js';
import { testClient } from '../contract/postgres.js';
import { freePort, randomPrefix, waitFor } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * What is particular to PostgreSQL: how `new Leasehold(…)` recognises pg's pools and clients, the
 * migration (plain SQL, idempotent, safe to run concurrently, any prefix quoted safely, a role
 * that may not create objects), one listening session per store whatever the number of waiters,
 * the store's replies step by step (re-sent calls, hand-offs, operator tooling, row clean-up),
 * and how failures are told apart (unavailable, or a store error).
 */

/** The settings the tests' stores are made with (the rest, waiter lease and hand-on, are the defaults). */
const SETTINGS = { instance: 'test', fenceRetention: 60_000 } as const;
const REQUEST = { ttl: 5_000 } as const;

describe('PostgreSQL store', () => {
  const db = postgresFixture();
  const { later, ownPool } = db;
  const leasehold = (backend: Backend, options: LeaseholdOptions) => db.leasehold(backend, options);

  function store(options: PostgresStoreOptions = {}, on: pg.Pool | pg.Client = db.pool): PostgresStore {
    const s = new PostgresStore(on, { prefix: randomPrefix(), ...SETTINGS, ...options });
    later(() => s.close());
    return s;
  }

  describe('new Leasehold(…)', () => {
    it('takes a pg Pool, a Client, a client checked out of a pool, and either with settings', async () => {
      const prefix = randomPrefix();
      const client = await testClient(db.server);
      later(() => client.end());
      const checkedOut = await db.pool.connect();
      later(() => checkedOut.release());
      const listen = await testClient(db.server);
      later(() => listen.end());
      const pool = db.pool;
      const backends: Backend[] = [pool, client, checkedOut, { postgres: pool, listen }, { postgres: client }];
      const all = backends.map((b) => leasehold(b, { prefix }));
      const tokens: number[] = [];
      for (const locks of all) {
        const lock = await locks.acquire('shared', { ttl: 5_000, wait: 5_000 });
        for (const other of all) if (other !== locks) expect(await other.tryAcquire('shared')).toBeNull();
        tokens.push(lock.fencingToken);
        expect(await lock.release()).toBe(true);
      }
      expect(tokens).toEqual([...tokens].sort((a, b) => a - b));
      expect(new Set(tokens).size).toBe(tokens.length);
      // Closing every Leasehold leaves the caller's pool and clients working.
      await Promise.all(all.map((l) => l.close()));
      for (const c of [pool, client, checkedOut, listen])
        expect((await c.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    });

    it('on one pg Client shared by two stores, their listeners and many calls at once, never sends a statement while another runs', async () => {
      // pg runs one statement at a time on a Client; one sent meanwhile waits in a queue of pg's
      // that pg deprecates (and pg 9 removes). The stores order their own statements.
      const client = await testClient(db.server);
      later(() => client.end());
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      let running = 0;
      let overlapped = 0;
      let sent = 0;
      (client as { query: unknown }).query = (...args: unknown[]) => {
        sent += 1;
        if (running > 0) overlapped += 1;
        running += 1;
        const done = () => {
          running -= 1;
        };
        const reply = query(...args);
        reply.then(done, done);
        return reply;
      };
      const prefix = randomPrefix();
      const [a, b] = [leasehold(client, { prefix }), leasehold(client, { prefix })];
      const held = await a.acquire('busy', { ttl: 5_000 });
      // Waiters on both, so both listen on the client while the calls run.
      const waiting = [a, b].map((l) => l.withLock('busy', { ttl: 5_000, wait: 5_000 }, async () => true));
      const calls = Array.from({ length: 40 }, (_, i) =>
        (i % 2 === 0 ? a : b).withLock(`name-${i % 7}`, { ttl: 5_000, wait: 5_000 }, async () => i),
      );
      expect(await Promise.all(calls)).toEqual(Array.from({ length: 40 }, (_, i) => i));
      await held.release();
      expect(await Promise.all(waiting)).toEqual([true, true]);
      expect(sent).toBeGreaterThan(80);
      expect(overlapped).toBe(0);
    });

    it('refuses settings that are not what they should be, naming them', () => {
      const cases: Array<[unknown, RegExp]> = [
        [{ postgres: db.pool, listen: 'postgres://elsewhere' }, /`listen` must be a pg Pool or Client, got "postgres/],
        [{ postgres: db.pool, migrate: 'yes' }, /`migrate` must be a boolean, got "yes"/],
      ];
      for (const [backend, message] of cases) {
        const error = (() => {
          try {
            new Leasehold(backend as Backend);
          } catch (e) {
            return e;
          }
        })();
        expect(error).toBeInstanceOf(LockError);
        expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
        expect((error as Error).message).toMatch(message);
      }
      expect(() => new Leasehold({ postgres: {} } as never)).toThrow(/expected .*a pg Pool or Client/);
      expect(() => new Leasehold(db.pool, { prefix: 'a\0b' })).toThrow(/must not contain NUL/);
    });
  });

  describe('the migration', () => {
    it('is plain SQL that runs again and again, and from many sessions at once', async () => {
      const prefix = randomPrefix();
      const sql = migrationSql(prefix);
      expect(sql).toMatch(/CREATE TABLE IF NOT EXISTS "\w+_locks"/);
      await db.pool.query(sql);
      await db.pool.query(sql);
      // Ten stores of a fresh prefix start at once, each migrating on first use, while they take locks.
      const fresh = randomPrefix();
      const stores = Array.from({ length: 10 }, () => store({ prefix: fresh }, ownPool({ max: 2 })));
      const replies = await Promise.all(stores.map((s, i) => s.acquire(`m${i % 3}`, { ...REQUEST, owner: `o${i}` })));
      expect(replies.filter((r) => r.acquired)).toHaveLength(3);
      const tables = await db.server.query(`SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE $1`, [
        `${fresh}%`,
      ]);
      expect(tables).toEqual([{ n: 4 }]);
    });

    it('upgrades a schema 3 in place: a lock held and a waiter queued before go on, the mutex and the semaphore both run after', async () => {
      // schema-3.sql: the migration of schema 3 (before shared holds) for prefix upgrade_v3.
      const prefix = 'upgrade_v3';
      await db.pool.query(readFileSync(new URL('./schema-3.sql', import.meta.url), 'utf8'));
      const n = schemaNames(prefix);
      const old = await db.pool.query(`SELECT * FROM ${n.fn.acquire}('held', 'a', 30000, 0, 0, 'old', 60000, 30000)`);
      expect(old.rows[0]).toMatchObject({ acquired: true });
      await db.pool.query(`SELECT * FROM ${n.fn.acquire}('held', 'w', 30000, 0, 1, 'old', 60000, 30000)`);
      const locks = leasehold(db.pool, { prefix });
      const permits = [await locks.acquire('sem', { limit: 2 }), await locks.acquire('sem', { limit: 2 })];
      expect(await locks.tryAcquire('sem', { limit: 2 })).toBeNull();
      expect(await locks.tryAcquire('held')).toBeNull();
      // A store of schema 7 or before, still running while its instances are replaced, reads
      // acquire's reply as a row: the function that gives it is kept beside the one-text attempt.
      const asRow = (name: string) =>
        db.pool.query(`SELECT * FROM ${n.fn.acquire}($1, 'z', 30000, 0, 0, 'old', 60000, 30000)`, [name]);
      expect((await asRow('sem')).rows[0]).toEqual({ acquired: false, value: '0', held_as: '2' });
      const refused = (await asRow('held')).rows[0];
      expect(refused).toMatchObject({ acquired: false, held_as: null });
      expect(Number(refused.value)).toBeGreaterThan(0);
      const granted = (await asRow('free')).rows[0];
      expect(granted).toMatchObject({ acquired: true, held_as: null });
      expect(Number(granted.value)).toBeGreaterThan(0);
      const s = store({ prefix });
      expect((await s.queued('held', 5)).first).toEqual(['w']);
      expect(await s.release('held', 'a')).toBe('released');
      const taken = await s.acquire('held', { ...REQUEST, owner: 'w', queue: 'member' });
      expect(taken).toMatchObject({ acquired: true });
      expect(await s.release('held', 'w')).toBe('released');
      for (const permit of permits) expect(await permit.release()).toBe(true);
      const version = await db.pool.query(`SELECT obj_description(to_regclass($1), 'pg_class') AS v`, [n.locks]);
      expect(version.rows[0]?.v).toMatch(/schema 8$/);
      // Run again on the upgraded schema: nothing to do, nothing dropped.
      await db.pool.query(migrationSql(prefix));
    });

    it('quotes any prefix: quotes, dollars, backslashes, spaces, non-ASCII, longer than an identifier', async () => {
      const prefixes = [`it's "odd"`, 'a$$b$leasehold$c', 'back\\slash; DROP TABLE x', 'ünï cödé ✓', 'p'.repeat(200)];
      for (const prefix of prefixes) {
        const locks = leasehold(db.pool, { prefix });
        const a = await locks.acquire('x', { ttl: 5_000 });
        expect(await locks.tryAcquire('x')).toBeNull();
        expect(await a.release()).toBe(true);
        const b = await locks.acquire('x', { ttl: 5_000 });
        expect(b.fencingToken).toBeGreaterThan(a.fencingToken);
        expect(await b.release()).toBe(true);
      }
      // Long prefixes are cut and hashed: two that share their first 60 bytes stay apart.
      const [long1, long2] = ['q'.repeat(70), `${'q'.repeat(69)}r`];
      expect(schemaNames(long1).locks).not.toBe(schemaNames(long2).locks);
      const one = await leasehold(db.pool, { prefix: long1 }).acquire('same', { ttl: 5_000 });
      expect(await leasehold(db.pool, { prefix: long2 }).tryAcquire('same')).not.toBeNull();
      await one.release();
    });

    it('migrate: false finds a missing schema and says so (a store error); a role without rights runs on one migrated beforehand with the grants the docs list', async () => {
      const prefix = randomPrefix();
      const unmigrated = leasehold({ postgres: db.pool, migrate: false }, { prefix });
      const missing = await unmigrated.acquire('x').catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(LockError);
      expect(missing).not.toBeInstanceOf(StoreUnavailableError);
      expect((missing as LockError).code).toBe(ErrorCode.STORE_ERROR);
      expect((missing as Error).message).toMatch(/schema of prefix .* is missing .*migrationSql/);

      await db.pool.query(migrationSql(prefix));
      const role = `app_${prefix}`;
      await db.server.query(`CREATE ROLE ${role} LOGIN`);
      later(() => db.server.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`));
      const app = ownPool({ connectionString: db.server.url.replace('//leasehold@', `//${role}@`) });
      const denied = await leasehold(app, { prefix })
        .acquire('x')
        .catch((e: unknown) => e);
      expect((denied as LockError).code).toBe(ErrorCode.STORE_ERROR);
      expect((denied as Error).message).toMatch(/permission denied.*SQLSTATE 42501/);

      const n = schemaNames(prefix);
      await db.pool.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ${n.locks}, ${n.waiters}, ${n.runs}, ${n.holds} TO ${role}`,
      );
      await db.pool.query(`GRANT USAGE ON SEQUENCE ${n.fence} TO ${role}`);
      const granted = leasehold(app, { prefix });
      const lock = await granted.acquire('x', { ttl: 5_000 });
      expect(await granted.runOnce('job', () => 'ran')).toEqual({ ran: true, value: 'ran' });
      expect(await granted.withLock('permits', { limit: 2 }, () => 'held')).toBe('held');
      expect(await lock.release()).toBe(true);
    });
  });

  it('one listening session per store, however many waiters on however many locks; given back once nobody waits', async () => {
    const prefix = randomPrefix();
    const app = `listen-${prefix}`;
    const holders = leasehold(db.pool, { prefix });
    const names = ['l0', 'l1', 'l2', 'l3', 'l4'];
    const held = await Promise.all(names.map((name) => holders.acquire(name, { ttl: 10_000 })));
    const waiters = leasehold(ownPool({ max: 4, application_name: app, idleTimeoutMillis: 30_000 }), { prefix });
    const waiting = names.flatMap((name) =>
      [0, 1].map(() => waiters.acquire(name, { wait: 10_000 }).then((lock) => lock.release())),
    );
    const listening = async () =>
      (
        await db.server.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`,
          [app],
        )
      )[0]?.n;
    const probe = new PostgresStore(db.pool, { prefix });
    await waitFor(async () => (await Promise.all(names.map((n) => probe.queued(n, 0)))).every((q) => q.count === 2), {
      timeout: 5_000,
    });
    expect(await listening()).toBe(1);
    for (const lock of held) await lock.release();
    expect(await Promise.all(waiting)).toEqual(Array(10).fill(true));
    // A release channel lingers a moment after its last waiter; then the session goes back to the pool.
    await waitFor(
      async () =>
        (
          await db.server.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query = 'UNLISTEN *'`,
            [app],
          )
        )[0]?.n === 1,
      { timeout: 5_000, message: 'the session given back' },
    );
    expect(await listening()).toBe(0);
  });

  describe('replies, step by step', () => {
    it('a re-sent acquire answers with that grant’s token, a re-sent release answers released until another owner takes the lock', async () => {
      const s = store();
      const first = await s.acquire('r', { ...REQUEST, owner: 'a' });
      expect(await s.acquire('r', { ...REQUEST, owner: 'a' })).toEqual(first);
      expect(await s.acquire('r', { ...REQUEST, owner: 'b' })).toMatchObject({ acquired: false });
      expect(await s.extend('r', 'b', 5_000)).toBe('not-owner');
      expect(await s.extend('r', 'a', 5_000)).toBe('extended');
      expect(await s.release('r', 'b')).toBe('not-owner');
      expect(await s.release('r', 'a')).toBe('released');
      expect(await s.release('r', 'a')).toBe('released');
      expect(await s.inspect('r')).toMatchObject({ owner: null, pttl: -2, releasedBy: 'a', holder: null });
      expect(await s.extend('r', 'a', 5_000)).toBe('expired');
      const second = await s.acquire('r', { ...REQUEST, owner: 'b' });
      expect(second.acquired && first.acquired && second.fence > first.fence).toBe(true);
      expect(await s.release('r', 'a')).toBe('not-owner');
      const state = await s.inspect('r');
      expect(state).toMatchObject({ owner: 'b', releasedBy: null, holder: { instance: 'test' } });
      expect(state.pttl).toBeGreaterThan(4_000);
      expect(state.holder?.token).toBe(state.fence);
      expect(Math.abs((state.holder?.takenAt ?? 0) - Date.now())).toBeLessThan(60_000);
    });

    it('a release hands the lock to the first live waiter, reserved for it, and tells the watchers who is next', async () => {
      const s = store();
      const heard: unknown[] = [];
      const stop = await s.watch('h', (handOff) => heard.push(handOff));
      await s.acquire('h', { ...REQUEST, owner: 'holder' });
      for (const owner of ['w1', 'w2', 'w3', 'w4', 'w5']) {
        expect((await s.acquire('h', { ...REQUEST, owner, queue: 'join' })).acquired).toBe(false);
      }
      expect(await s.queued('h', 2)).toEqual({ count: 5, first: ['w1', 'w2'], reserved: null });
      expect(await s.release('h', 'holder')).toBe('released');
      await waitFor(() => heard.length === 1);
      expect(heard).toEqual([{ woken: 'w1', next: ['w2', 'w3', 'w4'] }]);
      const queued = await s.queued('h', 10);
      expect(queued).toMatchObject({ count: 4, first: ['w2', 'w3', 'w4', 'w5'], reserved: { owner: 'w1' } });
      // Reserved: nobody else may take it, the waiter it was kept for may.
      expect(await s.acquire('h', { ...REQUEST, owner: 'barger' })).toMatchObject({ acquired: false });
      expect(await s.acquire('h', { ...REQUEST, owner: 'w1', queue: 'member' })).toMatchObject({ acquired: true });
      // w2 gives up from the head: it leaves the queue, and w3, first now, is told to ask again.
      await s.leave('h', 'w2');
      expect((await s.queued('h', 1)).first).toEqual(['w3']);
      await waitFor(() => heard.length === 2);
      expect(heard[1]).toEqual({ woken: 'w3', next: [] });
      // The lease flagged by the waiters behind: its release hands on again, to w3.
      expect(await s.release('h', 'w1')).toBe('released');
      await waitFor(() => heard.length === 3);
      expect(heard[2]).toEqual({ woken: 'w3', next: ['w4', 'w5'] });
      // w3 leaves while the lock is reserved for it: the reservation passes to w4.
      await s.leave('h', 'w3');
      await waitFor(() => heard.length === 4);
      expect(heard[3]).toEqual({ woken: 'w4', next: ['w5'] });
      stop();
    });

    it('dead waiters are dropped by their own lease; an expired lock released hands on all the same', async () => {
      const prefix = randomPrefix();
      const s = store({ prefix });
      // The dead waiter queued through a store of a shorter waiter lease.
      const dying = store({ prefix, waiterLease: 100 });
      await s.acquire('d', { ...REQUEST, owner: 'holder', ttl: 300 });
      await dying.acquire('d', { ...REQUEST, owner: 'dead', queue: 'join' });
      await s.acquire('d', { ...REQUEST, owner: 'live', queue: 'join' });
      await sleep(350);
      expect((await s.queued('d', 5)).first).toEqual(['live']);
      // The holder's lease ran out: its late release finds no lease, and wakes the first live waiter.
      expect(await s.release('d', 'holder')).toBe('expired');
      expect((await s.queued('d', 5)).reserved?.owner).toBe('live');
    });

    it('operator tooling: scanLocks with Redis glob semantics over held locks, forceRelease hands on, locate names the row', async () => {
      const s = store();
      for (const name of ['order:1', 'order:2', 'order:10', 'job*x', 'other', 'order:free']) {
        await s.acquire(name, { ...REQUEST, owner: `o-${name}` });
      }
      await s.release('order:free', 'o-order:free');
      const scan = async (glob: string, count = 2) => {
        const names: string[] = [];
        for await (const name of s.scanLocks(glob, count)) names.push(name);
        return names.sort();
      };
      expect(await scan('order:*')).toEqual(['order:1', 'order:10', 'order:2']);
      expect(await scan('order:?')).toEqual(['order:1', 'order:2']);
      expect(await scan('order:[13]*')).toEqual(['order:1', 'order:10']);
      expect(await scan('job\\*x')).toEqual(['job*x']);
      expect(await scan('*', 1)).toHaveLength(5);

      await s.acquire('order:1', { ...REQUEST, owner: 'next', queue: 'join' });
      const forced = await s.forceRelease('order:1');
      expect(forced).toMatchObject({
        result: 'released',
        owner: 'o-order:1',
        woken: 'next',
        holder: { instance: 'test' },
      });
      expect(await s.forceRelease('order:1')).toEqual({ result: 'not-held' });
      const taken = await s.acquire('order:1', { ...REQUEST, owner: 'next', queue: 'member' });
      expect(taken.acquired && forced.result === 'released' && taken.fence > (forced.holder?.token ?? 0)).toBe(true);
      expect(s.locate('order:1')).toBe(`${s.names.locks} row "order:1"`);
    });

    it('a grant keeps its row at least as long as it needs, a sixteenth longer, so the grants after it leave retain_until alone', async () => {
      const s = store();
      const retained = async () =>
        (
          await db.pool.query<{ until: string; ms: number }>(
            `SELECT retain_until::text AS until, extract(epoch FROM retain_until - taken_at) * 1000 AS ms
             FROM ${s.names.locks} WHERE name = 'r'`,
          )
        ).rows[0];
      await s.acquire('r', { ...REQUEST, owner: 'a' });
      await s.release('r', 'a');
      await s.acquire('r', { ...REQUEST, owner: 'b' });
      const first = await retained();
      expect(Number(first?.ms)).toBeGreaterThanOrEqual(SETTINGS.fenceRetention);
      expect(Number(first?.ms)).toBeLessThanOrEqual((SETTINGS.fenceRetention * 17) / 16);
      await s.release('r', 'b');
      await s.acquire('r', { ...REQUEST, owner: 'c' });
      expect((await retained())?.until).toBe(first?.until);
    });

    it('rows with nothing live left are dropped as new names are taken', async () => {
      const prefix = randomPrefix();
      const s = store({ prefix });
      // The short-lived rows are taken through a store of a short retention.
      const brief = store({ prefix, fenceRetention: 1 });
      const short = { ...REQUEST, ttl: 100 };
      const rows = async () =>
        (await db.pool.query<{ name: string }>(`SELECT name FROM ${s.names.locks} ORDER BY name`)).rows.map(
          (r) => r.name,
        );
      // Each row is there after its release (an earlier one may already be gone on a slow run:
      // its lease and retention end 100 ms after its grant, and taking the next name drops it).
      for (const name of ['g1', 'g2', 'g3', 'g4']) {
        await brief.acquire(name, { ...short, owner: 'o' });
        await brief.release(name, 'o');
        expect(await rows()).toContain(name);
      }
      await sleep(short.ttl + 50);
      await s.acquire('n1', { ...REQUEST, owner: 'o' });
      await s.acquire('n2', { ...REQUEST, owner: 'o' });
      expect(await rows()).toEqual(['n1', 'n2']);
    });
  });

  describe('a name quiet here (its last release here found nobody behind it)', () => {
    /** A store on a client of its own, and the statements it sent, by name without the hash. */
    async function counted(prefix: string): Promise<{ s: PostgresStore; sent: string[] }> {
      const c = await testClient(db.server);
      later(() => c.end());
      const sent: string[] = [];
      const query = c.query.bind(c) as (config: unknown) => Promise<unknown>;
      (c as unknown as { query: (config: unknown) => Promise<unknown> }).query = (config) => {
        const name = (config as { name?: string }).name;
        if (name !== undefined) sent.push(name.replace(/^leasehold_|_[0-9a-f]{20}$/g, ''));
        return query(config);
      };
      return { s: store({ prefix }, c), sent };
    }

    /** Two stores on one prefix, lock q quiet in the first (`here`), whose statements are counted. */
    async function quietHere(): Promise<{ here: PostgresStore; there: PostgresStore; sent: string[] }> {
      const prefix = randomPrefix();
      const [{ s: here, sent }, { s: there }] = [await counted(prefix), await counted(prefix)];
      await here.acquire('q', { ...REQUEST, owner: 'a' });
      await here.release('q', 'a');
      return { here, there, sent };
    }

    it('is taken and freed by its UPDATE alone; a name not quiet costs one statement per call all the same', async () => {
      const { s, sent } = await counted(randomPrefix());
      for (const owner of ['a', 'b', 'c']) {
        expect(await s.acquire('q', { ...REQUEST, owner })).toMatchObject({ acquired: true });
        expect(await s.release('q', owner)).toBe('released');
      }
      expect(sent).toEqual(['acquire', 'release', 'take', 'free', 'take', 'free']);
      expect(await s.inspect('q')).toMatchObject({ owner: null, releasedBy: 'c' });
    });

    it('remembers 1,024 quiet names at most: the name it noted first is then sent as a name not quiet', async () => {
      const { s, sent } = await counted(randomPrefix());
      for (let i = 0; i <= 1_024; i++) {
        await s.acquire(`n${i}`, { ...REQUEST, owner: 'o' });
        await s.release(`n${i}`, 'o');
      }
      sent.length = 0;
      // n0 is noted again, and n1, the oldest now, makes room for it; n2 is still remembered.
      for (const name of ['n0', 'n2']) {
        await s.acquire(name, { ...REQUEST, owner: 'o' });
        await s.release(name, 'o');
      }
      expect(sent).toEqual(['acquire', 'release', 'take', 'free']);
    });

    it('held by another: the UPDATE takes nothing, the attempt function refuses and queues; the release then hands on', async () => {
      const { here, there, sent } = await quietHere();
      expect(await there.acquire('q', { ...REQUEST, owner: 'b' })).toMatchObject({ acquired: true });
      sent.length = 0;
      const refused = await here.acquire('q', { ...REQUEST, owner: 'w', queue: 'join' });
      expect(refused).toMatchObject({ acquired: false });
      expect(refused.acquired === false && 'pttl' in refused && refused.pttl).toBeGreaterThan(0);
      expect(sent).toEqual(['take', 'attempt']);
      expect(await there.queued('q', 1)).toMatchObject({ count: 1, first: ['w'] });
      expect(await there.release('q', 'b')).toBe('released');
      expect(await there.acquire('q', { ...REQUEST, owner: 'barger' })).toMatchObject({ acquired: false });
      expect(await here.acquire('q', { ...REQUEST, owner: 'w', queue: 'member' })).toMatchObject({ acquired: true });
      // No longer quiet here: the next release is the one statement that may hand on.
      sent.length = 0;
      expect(await here.release('q', 'w')).toBe('released');
      expect(sent).toEqual(['release']);
    });

    it('a waiter behind its holder: the UPDATE frees nothing, the release function hands on to the waiter', async () => {
      const { here, there, sent } = await quietHere();
      expect(await here.acquire('q', { ...REQUEST, owner: 'h' })).toMatchObject({ acquired: true });
      expect(await there.acquire('q', { ...REQUEST, owner: 'w', queue: 'join' })).toMatchObject({ acquired: false });
      sent.length = 0;
      expect(await here.release('q', 'h')).toBe('released');
      expect(sent).toEqual(['free', 'release_alone']);
      expect(await here.inspect('q')).toMatchObject({ owner: null, releasedBy: 'h' });
      expect(await here.queued('q', 1)).toMatchObject({ reserved: { owner: 'w' } });
      expect(await here.acquire('q', { ...REQUEST, owner: 'barger' })).toMatchObject({ acquired: false });
      // A re-sent release of the lease it handed on answers released, until the waiter takes the lock.
      expect(await here.release('q', 'h')).toBe('released');
      expect(await there.acquire('q', { ...REQUEST, owner: 'w', queue: 'member' })).toMatchObject({ acquired: true });
      expect(await here.release('q', 'h')).toBe('not-owner');
    });
  });

  describe('failures', () => {
    it('nothing listening: acquire fails with StoreUnavailableError in bounded time', async () => {
      const dead = ownPool({ connectionString: `postgres://leasehold@127.0.0.1:${await freePort()}/leasehold` });
      const locks = leasehold(dead, { commandTimeout: 500 });
      const started = performance.now();
      const error = await locks.acquire('x').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toMatch(/ECONNREFUSED|connect/);
      expect(performance.now() - started).toBeLessThan(3_000);
    });

    it('a frozen server: calls fail as unavailable within commandTimeout, and succeed once it resumes', async () => {
      const locks = leasehold(ownPool({ max: 2 }), { prefix: randomPrefix(), commandTimeout: 300 });
      await (await locks.acquire('warm', { ttl: 1_000 })).release();
      db.server.pause();
      later(() => db.server.resume());
      const error = await locks.acquire('x').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toMatch(/no answer .* within 300 ms/);
      db.server.resume();
      await waitFor(async () => (await locks.tryAcquire('y').catch(() => null)) !== null, { timeout: 5_000 });
    });

    it('a lock name PostgreSQL cannot store is a store error, not unavailability', async () => {
      const error = await store()
        .acquire('nul\0name', { ...REQUEST, owner: 'o' })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockError);
      expect((error as LockError).code).toBe(ErrorCode.STORE_ERROR);
    });
  });
});
