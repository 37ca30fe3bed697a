import pg from 'pg';
import type { Backend } from '../../src/index.js';
import { listenersOf } from '../../src/store/postgres/listener.js';
import { channelOf } from '../../src/store/postgres/queries.js';
import { schemaNames } from '../../src/store/postgres/schema.js';
import { type PostgresServer, startPostgres } from '../harness/index.js';
import type { ContractBackend } from './backends.js';

/**
 * Room for the suite's clients: every Leasehold of a test gets a fresh pool or client, and a
 * listening session while it waits.
 */
export const POSTGRES_SETTINGS = { max_connections: 400 } as const;

/** A pool that gives its idle connections back soon, so a suite of fresh pools stays under max_connections. */
export function testPool(server: PostgresServer, options: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: server.url, max: 4, idleTimeoutMillis: 500, ...options });
  // A server restarted under an idle connection makes the pool emit 'error': the caller's to handle.
  pool.on('error', () => {});
  return pool;
}

export async function testClient(server: PostgresServer): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: server.url });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/**
 * PostgreSQL behind the contract suite. Fencing tokens come from a sequence (`tokens: 'log'`);
 * the tests that look behind a lock's back read and write the prefix's tables over a pool of
 * their own; the listeners of a lock are the stores of this process whose LISTEN on its channel
 * the server confirmed (the server keeps no view of other sessions' LISTENs).
 */
async function postgres(
  label: string,
  connect: (server: PostgresServer) => Promise<Backend>,
): Promise<ContractBackend> {
  const server = await startPostgres({ settings: POSTGRES_SETTINGS });
  const raw = testPool(server);
  const opened: Backend[] = [];
  return {
    label,
    tokens: 'log',
    client: async () => {
      const client = await connect(server);
      opened.push(client);
      return client;
    },
    expire: async (prefix, name) => {
      const { locks } = schemaNames(prefix);
      await raw.query(
        `UPDATE ${locks} SET owner = NULL, reserved = false, flagged = false, expires_at = '-infinity' WHERE name = $1`,
        [name],
      );
    },
    subscriptions: async (prefix, name) => listenersOf(channelOf(prefix, name)),
    queued: async (prefix, name) => {
      const { waiters } = schemaNames(prefix);
      const found = await raw.query<{ n: string }>(
        `SELECT count(*) AS n FROM ${waiters} WHERE name = $1 AND alive_until >= clock_timestamp()`,
        [name],
      );
      return Number(found.rows[0]?.n ?? 0);
    },
    close: async () => {
      await Promise.all(opened.map((c) => (c as pg.Pool | pg.Client).end().catch(() => undefined)));
      await raw.end();
      await server.stop();
    },
  };
}

/**
 * A pool with a connection open already, as the Redis adapters hand over connected clients: a
 * test that starts one instance's acquisition before another's must not see the second win the
 * race because the first was still connecting.
 */
export function postgresPoolBackend(): Promise<ContractBackend> {
  return postgres('pg.Pool', async (server) => {
    const pool = testPool(server);
    await pool.query('SELECT 1');
    return pool;
  });
}

export function postgresClientBackend(): Promise<ContractBackend> {
  return postgres('pg.Client', (server) => testClient(server));
}
