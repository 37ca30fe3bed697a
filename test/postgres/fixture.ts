import type pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { type Backend, Leasehold, type LeaseholdOptions } from '../../src/index.js';
import { POSTGRES_SETTINGS, testPool } from '../contract/postgres.js';
import { type PostgresServer, startPostgres } from '../harness/index.js';

/** One PostgreSQL server for a test file, a pool on it, and what each test opened, closed after it. */
export interface PostgresFixture {
  readonly server: PostgresServer;
  readonly pool: pg.Pool;
  /** A Leasehold closed after the test. */
  leasehold(backend: Backend, options?: LeaseholdOptions): Leasehold;
  /** A pool of the test's own (its settings: application_name, max…), ended after the test. */
  ownPool(options?: pg.PoolConfig): pg.Pool;
  /** Run `cleanup` after the test (the last registered first). */
  later(cleanup: () => unknown): void;
}

/** Registers the file's hooks; the fields are there from beforeAll on. */
export function postgresFixture(): PostgresFixture {
  let server: PostgresServer | undefined;
  let pool: pg.Pool | undefined;
  const cleanups: Array<() => unknown> = [];
  beforeAll(async () => {
    server = await startPostgres({ settings: POSTGRES_SETTINGS });
    pool = testPool(server, { max: 8 });
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await pool?.end();
    await server?.stop();
  });
  const fixture: PostgresFixture = {
    get server() {
      if (!server) throw new Error('the server starts in beforeAll');
      return server;
    },
    get pool() {
      if (!pool) throw new Error('the pool opens in beforeAll');
      return pool;
    },
    leasehold: (backend, options = {}) => {
      const locks = new Leasehold(backend, options);
      cleanups.push(() => locks.close());
      return locks;
    },
    ownPool: (options = {}) => {
      const own = testPool(fixture.server, options);
      cleanups.push(() => own.end());
      return own;
    },
    later: (cleanup) => {
      cleanups.push(cleanup);
    },
  };
  return fixture;
}
