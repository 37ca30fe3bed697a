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
  /**
   * Send the lock and job calls as named prepared statements, each parsed once per connection.
   * Default true. Through a pooler in transaction mode that does not keep them (PgBouncer before
   * 1.21, or without `max_prepared_statements`) the first refusal switches the store to unnamed
   * statements; false sends them unnamed from the start.
   */
  readonly preparedStatements?: boolean | undefined;
}

/** What `new Leasehold(…)` takes for PostgreSQL: a pg Pool, a pg Client, or either with settings. */
export type PostgresBackend = PgPoolBackend | PgClientBackend | PostgresSetup;

interface Setup {
  postgres: unknown;
  listen?: unknown;
  migrate?: unknown;
  preparedStatements?: unknown;
}

function isSetup(input: unknown): input is Setup {
  return typeof input === 'object' && input !== null && isPg((input as { postgres?: unknown }).postgres);
}

interface Settings {
  db: PgBackend;
  listen: PgBackend | undefined;
  migrate: boolean;
  preparedStatements: boolean;
}

function setupOf(input: unknown): Settings {
  if (isPg(input)) return { db: input, listen: undefined, migrate: true, preparedStatements: true };
  if (!isSetup(input)) throw new TypeError('not a pg pool or client');
  const { postgres, listen, migrate, preparedStatements } = input;
  if (listen !== undefined && !isPg(listen)) {
    throw invalidArgument(`\`listen\` must be a pg Pool or Client, got ${show(listen)}`);
  }
  if (migrate !== undefined && typeof migrate !== 'boolean') {
    throw invalidArgument(`\`migrate\` must be a boolean, got ${show(migrate)}`);
  }
  if (preparedStatements !== undefined && typeof preparedStatements !== 'boolean') {
    throw invalidArgument(`\`preparedStatements\` must be a boolean, got ${show(preparedStatements)}`);
  }
  return {
    db: postgres as PgBackend,
    listen,
    migrate: migrate ?? true,
    preparedStatements: preparedStatements ?? true,
  };
}

export const postgresBackend: BackendEntry = {
  describe: 'a pg Pool or Client',
  detect: (input) => isPg(input) || isSetup(input),
  create: (input, { onError, ...settings }) => {
    const { db, listen, migrate, preparedStatements } = setupOf(input);
    const prefix = checkPrefix(settings.prefix);
    const store = new PostgresStore(db, { ...settings, prefix, onError, listen, migrate, preparedStatements });
    return { store, owned: true };
  },
};
