import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { ErrorCode, LockError } from '../../src/index.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { statements } from '../../src/store/postgres/queries.js';
import { schemaNames } from '../../src/store/postgres/schema.js';
import { testClient } from '../contract/postgres.js';
import { randomPrefix } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * The lock and job calls go as named prepared statements: each connection parses them once, and a
 * name stands for one text only. `preparedStatements: false` sends them unnamed. (Through a pooler
 * that refuses them, see pgbouncer.test.ts.)
 */

/** The settings the tests' stores are made with (the rest, waiter lease and hand-on, are the defaults). */
const SETTINGS = { instance: 'test', fenceRetention: 60_000 } as const;
const REQUEST = { ttl: 5_000 } as const;

interface Prepared {
  name: string;
  runs: number;
}

/** The statements prepared on `client`'s session, and how often each ran. */
async function preparedOn(client: pg.Client): Promise<Prepared[]> {
  const { rows } = await client.query<Prepared>(
    'SELECT name, (generic_plans + custom_plans)::int AS runs FROM pg_prepared_statements ORDER BY name',
  );
  return rows;
}

describe('PostgreSQL prepared statements', () => {
  const db = postgresFixture();

  async function client(): Promise<pg.Client> {
    const c = await testClient(db.server);
    db.later(() => c.end());
    return c;
  }

  function store(on: pg.Client, options: { prefix?: string; preparedStatements?: boolean } = {}): PostgresStore {
    const s = new PostgresStore(on, { prefix: randomPrefix(), ...SETTINGS, ...options });
    db.later(() => s.close());
    return s;
  }

  it('acquire, extend and release are prepared once on a connection and run from then on (a quiet name: take and free)', async () => {
    const c = await client();
    const s = store(c);
    for (let i = 0; i < 5; i++) {
      expect(await s.acquire('p', { ...REQUEST, owner: `o${i}` })).toMatchObject({ acquired: true });
      expect(await s.extend('p', `o${i}`, 5_000)).toBe('extended');
      expect(await s.release('p', `o${i}`)).toBe('released');
    }
    const prepared = await preparedOn(c);
    expect(prepared.map((p) => p.name.replace(/_[0-9a-f]{20}$/, ''))).toEqual([
      'leasehold_acquire',
      'leasehold_extend',
      'leasehold_free',
      'leasehold_release',
      'leasehold_take',
    ]);
    expect(prepared.map((p) => p.runs)).toEqual([1, 5, 4, 1, 4]);
  });

  it('a name stands for one text: two prefixes on one connection prepare two statements each', async () => {
    const c = await client();
    const [a, b] = [store(c), store(c)];
    for (const s of [a, b]) {
      expect(await s.acquire('p', { ...REQUEST, owner: 'o' })).toMatchObject({ acquired: true });
      expect(await s.release('p', 'o')).toBe('released');
    }
    expect((await preparedOn(c)).map((p) => p.runs)).toEqual([1, 1, 1, 1]);
    const [x, y] = [statements(schemaNames('x')), statements(schemaNames('y'))];
    expect(x.acquire.name).not.toBe(y.acquire.name);
    expect(x.acquire.name).toBe(statements(schemaNames('x')).acquire.name);
  });

  it('preparedStatements: false sends every statement unnamed', async () => {
    const c = await client();
    const s = store(c, { preparedStatements: false });
    expect(await s.acquire('p', { ...REQUEST, owner: 'o' })).toMatchObject({ acquired: true });
    expect(await s.release('p', 'o')).toBe('released');
    expect(await preparedOn(c)).toEqual([]);
  });

  it('new Leasehold({ postgres, preparedStatements }) takes the setting, and refuses one that is not a boolean', async () => {
    const [named, unnamed] = [await client(), await client()];
    const prefix = randomPrefix();
    for (const locks of [
      db.leasehold({ postgres: named }, { prefix }),
      db.leasehold({ postgres: unnamed, preparedStatements: false }, { prefix }),
    ]) {
      await (await locks.acquire('p', { ttl: 5_000 })).release();
    }
    expect((await preparedOn(named)).length).toBeGreaterThan(0);
    expect(await preparedOn(unnamed)).toEqual([]);
    const error = (() => {
      try {
        db.leasehold({ postgres: named, preparedStatements: 'no' } as never);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(LockError);
    expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
    expect((error as Error).message).toMatch(/`preparedStatements` must be a boolean, got "no"/);
  });

  it('a statement error other than a missing or doubled name is the store error it was, never sent again', async () => {
    const c = await client();
    const s = store(c);
    expect(await s.extend('p', 'o', 5_000)).toBe('expired');
    let sent = 0;
    const query = c.query.bind(c) as (config: unknown) => Promise<unknown>;
    (c as unknown as { query: (config: unknown) => Promise<unknown> }).query = (config) => {
      sent++;
      return query(config);
    };
    // A bigint argument out of range: the server refuses it at Bind (22003), as a 26000 would be.
    const error = await s.extend('p', 'o', 2 ** 64).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect((error as LockError).code).toBe(ErrorCode.STORE_ERROR);
    expect(sent).toBe(1);
  });
});
