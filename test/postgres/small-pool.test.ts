import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, ErrorCode, Leasehold } from '../../src/index.js';
import { listenersOf } from '../../src/store/postgres/listener.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { channelOf } from '../../src/store/postgres/queries.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * A pool of one connection: a waiter's listening session must not take the only connection the
 * lock's own statements have, or the holder's release waits for it until commandTimeout. The
 * session is a connection of its own, made from the pool's settings, and gone after close().
 */

/** Short enough that a hand-off by notification stands apart from a waiter's timer (it retries at least every maxPark). */
const COMMAND_TIMEOUT = DEFAULTS.maxPark / 2;
/** The release is one statement, bounded by commandTimeout; the woken waiter must take its reservation before it lapses. */
const HAND_OFF = COMMAND_TIMEOUT + DEFAULTS.reservation;

describe('PostgreSQL on a pool of one connection', () => {
  const db = postgresFixture();

  /** A pool of one connection, by a connection string or by host and port fields, named for pg_stat_activity. */
  function onePool(settings: 'connectionString' | 'fields', app: string): pg.Pool {
    const server = db.server;
    const where =
      settings === 'connectionString'
        ? { connectionString: server.url }
        : { host: server.host, port: server.port, user: server.user, database: server.database };
    const pool = new pg.Pool({ ...where, max: 1, application_name: app, idleTimeoutMillis: 30_000 });
    pool.on('error', () => {});
    db.later(() => pool.end());
    return pool;
  }

  /** Backends of `app` on the server, and how many of them are LISTENing. */
  async function backends(app: string): Promise<{ all: number; listening: number }> {
    const [row] = await db.server.query<{ all: number; listening: number }>(
      `SELECT count(*)::int AS all, count(*) FILTER (WHERE query LIKE 'LISTEN %')::int AS listening
         FROM pg_stat_activity WHERE application_name = $1`,
      [app],
    );
    return row ?? { all: 0, listening: 0 };
  }

  /** Holder and waiter on one pool: the waiter queues and listens, the release hands the lock to it. */
  async function handOff(prefix: string, holders: Leasehold, waiters: Leasehold): Promise<void> {
    const held = await holders.acquire('one', { ttl: 20_000 });
    const waiting = waiters.acquire('one', { wait: 15_000 });
    waiting.catch(() => undefined);
    const probe = new PostgresStore(db.pool, { prefix });
    await waitFor(
      async () => (await probe.queued('one', 0)).count === 1 && listenersOf(channelOf(prefix, 'one')) >= 1,
      { message: 'the waiter queued and listening' },
    );
    const releasedAt = performance.now();
    expect(await held.release()).toBe(true);
    const lock = await waiting;
    const took = performance.now() - releasedAt;
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(took).toBeLessThan(HAND_OFF);
    expect(await lock.release()).toBe(true);
  }

  for (const settings of ['connectionString', 'fields'] as const) {
    it(`one instance, holder and waiter, pool made with ${settings}: the release hands the lock on at once, and close() leaves only the pool's connection`, async () => {
      const prefix = randomPrefix();
      const app = `small-${prefix}`;
      const pool = onePool(settings, app);
      const locks = db.leasehold(pool, { prefix, commandTimeout: COMMAND_TIMEOUT });
      await handOff(prefix, locks, locks);
      expect(pool.totalCount).toBeLessThanOrEqual(1);
      await locks.close();
      // The listening connection is ended by close(); the server sees it go a round trip later.
      await waitFor(async () => (await backends(app)).all === pool.totalCount, {
        timeout: COMMAND_TIMEOUT,
        message: 'only the pool’s connection left',
      });
      expect(await backends(app)).toEqual({ all: pool.totalCount, listening: 0 });
      expect(pool.totalCount).toBeLessThanOrEqual(1);
      expect(pool.waitingCount).toBe(0);
    });
  }

  it('two instances sharing the pool: the waiter’s instance listens outside it; both close clean', async () => {
    const prefix = randomPrefix();
    const app = `small-${prefix}`;
    const pool = onePool('connectionString', app);
    const holders = db.leasehold(pool, { prefix, commandTimeout: COMMAND_TIMEOUT });
    const waiters = db.leasehold(pool, { prefix, commandTimeout: COMMAND_TIMEOUT });
    await handOff(prefix, holders, waiters);
    await handOff(prefix, waiters, holders);
    await Promise.all([holders.close(), waiters.close()]);
    await waitFor(async () => (await backends(app)).all === pool.totalCount, {
      timeout: COMMAND_TIMEOUT,
      message: 'only the pool’s connection left',
    });
    expect(pool.totalCount).toBeLessThanOrEqual(1);
  });

  it('the listening connection killed: a new one LISTENs again, and the next hand-off is prompt', async () => {
    const prefix = randomPrefix();
    const app = `small-${prefix}`;
    const pool = onePool('connectionString', app);
    const locks = db.leasehold(pool, { prefix, commandTimeout: COMMAND_TIMEOUT });
    const held = await locks.acquire('one', { ttl: 20_000 });
    const waiting = locks.acquire('one', { wait: 15_000 });
    waiting.catch(() => undefined);
    const listener = async () =>
      (
        await db.server.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`,
          [app],
        )
      ).map((row) => row.pid);
    await waitFor(async () => (await listener()).length === 1, { message: 'the waiter listening' });
    const [killed] = await listener();
    await db.server.query('SELECT pg_terminate_backend($1)', [killed]);
    await waitFor(
      async () => {
        const now = await listener();
        return now.length === 1 && now[0] !== killed;
      },
      { timeout: DEFAULTS.maxPark * 2, message: 'a new listening connection' },
    );
    const releasedAt = performance.now();
    expect(await held.release()).toBe(true);
    const lock = await waiting;
    expect(performance.now() - releasedAt).toBeLessThan(HAND_OFF);
    expect(await lock.release()).toBe(true);
  });

  it('a pool that cannot open a connection of its own (no Client class): refused at max 1, naming it; at max 2 its second connection listens', async () => {
    const prefix = randomPrefix();
    /** What a pool wrapper may show: pg-pool's members without its Client class. */
    const wrapped = (pool: pg.Pool) => ({
      get totalCount() {
        return pool.totalCount;
      },
      options: { max: pool.options.max },
      query: pool.query.bind(pool),
      connect: pool.connect.bind(pool),
    });
    const one = wrapped(onePool('connectionString', `small-${prefix}`));
    let refused: unknown;
    try {
      new Leasehold(one, { prefix });
    } catch (error) {
      refused = error;
    }
    expect(refused).toMatchObject({ code: ErrorCode.INVALID_ARGUMENT, message: expect.stringMatching(/max 1\b/) });

    const two = db.ownPool({ max: 2 });
    const locks = db.leasehold(wrapped(two), { prefix, commandTimeout: COMMAND_TIMEOUT });
    await handOff(prefix, locks, locks);
  });
});
