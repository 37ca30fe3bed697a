import { migrationSql } from '../../store/postgres/schema.js';
import { openClient } from '../backends.js';
import { type DirectCommand, UsageError } from '../command.js';

/** `leasehold migrate --postgres URL`: the PostgreSQL schema of a prefix, printed or applied. */
export const migrate: DirectCommand = {
  name: 'migrate',
  synopsis: 'migrate --postgres URL [--print]',
  summary:
    'Create (or bring up to date) the PostgreSQL tables, sequence and functions of a prefix; --print shows the SQL instead.',
  details: `
  --postgres URL  the database (postgres://user@host:port/db)
  --print         print the migration (plain SQL, idempotent) instead of running it
The migration is what a Leasehold on PostgreSQL runs on first use unless given migrate: false;
run it here (or from the printed SQL) where the application's role may not create tables.
`,
  options: { print: { type: 'boolean' } },
  operands: [],
  async start(args) {
    const sql = migrationSql(args.prefix);
    if (args.flag('print')) {
      process.stdout.write(`${sql.trimEnd()}\n`);
      return 0;
    }
    const url = args.postgres;
    if (url === undefined) throw new UsageError('migrate needs --postgres URL (or --print)');
    const { client, end } = await openClient('postgres', url);
    try {
      await (client as { query(sql: string): Promise<unknown> }).query(sql);
    } finally {
      await end();
    }
    process.stdout.write(`migrated prefix '${args.prefix}' on ${url.replace(/:[^:@/]*@/, ':***@')}\n`);
    return 0;
  },
};
