import { invalidArgument } from '../../core/errors.js';
import { show } from '../../core/validate.js';
import type { BackendEntry } from '../backend.js';
import { isPg, type PgBackend, type PgClientBackend, type PgPoolBackend } from './connection.js';
import { PostgresStore } from './postgres-store.js';
import { checkPrefix } from './schema.js';

export type { PgClientBackend, PgPoolBackend };

/**
 * PostgreSQL with settings: `new Leasehold({ postgres: pool, listen: directClient })`. Structural,
 * like the pool and client types, so pg stays an optional peer.
 */
export interface PostgresSetup {
  /** Where every statement runs: a pg Pool (through PgBouncer in transaction mode too) or Client. */
  readonly postgres: PgPoolBackend | PgClientBackend;
  /**
   * Where hand-offs are LISTENed for: a pool or client with session connections to the server
   * (not through PgBouncer in transaction mode). Default: `postgres` itself.
   */
  readonly listen?: PgPoolBackend | PgClientBackend | undefined;
  /**
   * Create the prefix's tables and functions on first use when they are missing (one read checks).
   * Default true; false for a role that may not create them (run `migrationSql(prefix)` beforehand).
   */
  readonly migrate?: boolean | undefined;
}

/** What `new Leasehold(…)` takes for PostgreSQL: a pg Pool, a pg Client, or either with settings. */
export type PostgresBackend = PgPoolBackend | PgClientBackend | PostgresSetup;

function isSetup(input: unknown): input is { postgres: unknown; listen?: unknown; migrate?: unknown } {
  return typeof input === 'object' && input !== null && isPg((input as { postgres?: unknown }).postgres);
}

function setupOf(input: unknown): { db: PgBackend; listen: PgBackend | undefined; migrate: boolean } {
  if (isPg(input)) return { db: input, listen: undefined, migrate: true };
  if (!isSetup(input)) throw new TypeError('not a pg pool or client');
  const { postgres, listen, migrate } = input;
  if (listen !== undefined && !isPg(listen)) {
    throw invalidArgument(`\`listen\` must be a pg Pool or Client, got ${show(listen)}`);
  }
  if (migrate !== undefined && typeof migrate !== 'boolean') {
    throw invalidArgument(`\`migrate\` must be a boolean, got ${show(migrate)}`);
  }
  return { db: postgres as PgBackend, listen, migrate: migrate ?? true };
}

export const postgresBackend: BackendEntry = {
  describe: 'a pg Pool or Client',
  detect: (input) => isPg(input) || isSetup(input),
  create: (input, { prefix, onError }) => {
    const { db, listen, migrate } = setupOf(input);
    const store = new PostgresStore(db, { prefix: checkPrefix(prefix), onError, listen, migrate });
    return { store, owned: true };
  },
};
