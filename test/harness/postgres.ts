import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client, type QueryResultRow } from 'pg';
import { freePort } from './ports.js';
import {
  envWithout,
  makeTempDir,
  type ProcessSpawnOptions,
  retryOnPortClash,
  runTool,
  type ServerControls,
  ServerProcess,
} from './process.js';

const HOST = '127.0.0.1';
const DEBIAN_PG_ROOT = '/usr/lib/postgresql';
/** The unprivileged system user servers run as when the tests run as root. */
const SYSTEM_USER = 'leasehold-pg';
const SUPERUSER = 'postgres';
const ROLE = 'leasehold';
const DATABASE = 'leasehold';
const INITDB_TIMEOUT_MS = 60_000;
const READY_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 5_000;
const QUERY_TIMEOUT_MS = 10_000;

export interface StartPostgresOptions {
  /** Port to listen on. Default: a free port chosen by the harness. */
  port?: number | undefined;
  /** Extra server settings, passed as `-c name=value` after the harness defaults so they win. */
  settings?: Readonly<Record<string, string | number | boolean>> | undefined;
}

export interface PostgresRestartOptions {
  /** SIGKILL the postmaster and every backend instead of a fast shutdown. Default false. */
  hard?: boolean | undefined;
}

/**
 * `pid` is the postmaster's. `pause()`, `resume()` and `kill9()` signal the postmaster and every
 * child process (backends and auxiliary processes), `kill9()` resolves once all of them are gone.
 * `stop()` is a fast shutdown (SIGINT: disconnect clients, checkpoint), SIGKILL after 5 s.
 */
export interface PostgresServer extends ServerControls {
  readonly host: '127.0.0.1';
  readonly port: number;
  /** `postgres://leasehold@127.0.0.1:PORT/leasehold`: the role and database tests use. */
  readonly url: string;
  /** `postgres://postgres@127.0.0.1:PORT/leasehold`: the bootstrap superuser, same database. */
  readonly superuserUrl: string;
  /** `leasehold`, owner of `database`, not a superuser. */
  readonly user: string;
  /** `leasehold` */
  readonly database: string;
  /** The server's temporary directory: the unix socket lives here, the cluster in `dataDir`. */
  readonly dir: string;
  readonly dataDir: string;
  /** Stop (or kill, with `hard`) and start again on the same port and data, waiting until ready. */
  restart(opts?: PostgresRestartOptions): Promise<void>;
  /** Runs one statement as the superuser in `database` over a fresh connection; resolves its rows. */
  query<R extends QueryResultRow = QueryResultRow>(sql: string, params?: readonly unknown[]): Promise<R[]>;
}

interface Identity {
  uid: number;
  gid: number;
}

let identity: Identity | null | undefined;

function lookUpUser(name: string): Identity | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
    const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * PostgreSQL refuses to run as root. As root, the servers run as the system user `leasehold-pg`,
 * created here the first time (several test workers may race to create it: whoever loses finds
 * it made). Not root: `null`, the servers run as the current user.
 */
function serverIdentity(): Identity | null {
  if (identity !== undefined) return identity;
  if (process.getuid?.() !== 0) {
    identity = null;
    return identity;
  }
  let found = lookUpUser(SYSTEM_USER);
  let lastError = '';
  for (let attempt = 0; found === undefined && attempt < 5; attempt++) {
    try {
      execFileSync(
        'useradd',
        [
          '--system',
          '--no-create-home',
          '--home-dir',
          '/nonexistent',
          '--shell',
          '/usr/sbin/nologin',
          '-U',
          SYSTEM_USER,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
    } catch (error) {
      // Exit 9: it exists (another worker won the race); 10: /etc/passwd was locked, try again.
      lastError = error instanceof Error ? error.message : String(error);
    }
    found = lookUpUser(SYSTEM_USER);
    if (found === undefined) execFileSync('sleep', ['0.2']);
  }
  if (found === undefined) {
    throw new Error(`could not create the system user ${SYSTEM_USER} to run PostgreSQL as: ${lastError}`);
  }
  identity = found;
  return identity;
}

/**
 * Where `initdb` and `postgres` are: `$LEASEHOLD_PG_BIN`, else Debian's
 * /usr/lib/postgresql/<version>/bin of the newest version installed (15 on bookworm).
 */
function pgBin(): string {
  const fromEnv = process.env.LEASEHOLD_PG_BIN;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  let versions: string[] = [];
  try {
    versions = readdirSync(DEBIAN_PG_ROOT).filter((name) => /^\d+$/.test(name));
  } catch {
    // No Debian PostgreSQL at all: startPostgres says so.
  }
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0] ?? '15';
  return join(DEBIAN_PG_ROOT, newest, 'bin');
}

function spawnOptions(cwd: string): ProcessSpawnOptions {
  const who = serverIdentity();
  // PGDATA, PGPORT and friends would override what the harness passes.
  const env = { ...envWithout('PG'), LC_ALL: 'C', LANG: 'C' };
  return { cwd, env, ...(who === null ? {} : { uid: who.uid, gid: who.gid }) };
}

/** Runs a PostgreSQL tool as the servers' user; resolves its output, rejects on a non-zero exit. */
async function run(command: string, args: readonly string[], cwd: string, timeout: number): Promise<string> {
  const result = await runTool(command, args, { timeout, spawn: spawnOptions(cwd) });
  if (result.code !== 0) {
    throw new Error(
      `${command} ${args.join(' ')} failed (code ${result.code}, signal ${result.signal}):\n${result.output}`,
    );
  }
  return result.output;
}

function serverSettings(
  port: number,
  dir: string,
  settings: Readonly<Record<string, string | number | boolean>>,
): string[] {
  const all: Record<string, string | number | boolean> = {
    port,
    listen_addresses: HOST,
    unix_socket_directories: dir,
    // Durable against a killed process (the page cache keeps every write), not against a
    // crashed machine, which tests do not simulate.
    fsync: 'off',
    full_page_writes: 'off',
    shared_buffers: '16MB',
    max_connections: 100,
    logging_collector: 'off',
    log_line_prefix: '%m [%p] ',
    ...settings,
  };
  return Object.entries(all).flatMap(([name, value]) => ['-c', `${name}=${String(value)}`]);
}

class PostgresProcess extends ServerProcess implements PostgresServer {
  readonly host = HOST;
  readonly url: string;
  readonly superuserUrl: string;
  readonly user = ROLE;
  readonly database = DATABASE;
  readonly dataDir: string;

  constructor(
    readonly port: number,
    readonly dir: string,
    settings: Readonly<Record<string, string | number | boolean>>,
  ) {
    const dataDir = join(dir, 'data');
    super({
      label: `postgres on port ${port}`,
      command: join(pgBin(), 'postgres'),
      args: ['-D', dataDir, ...serverSettings(port, dir, settings)],
      // Detached: a session of its own, out of reach of signals meant for the test runner's
      // terminal. Each backend makes itself a process group leader, so signals that must reach
      // every process of the server go to the postmaster and to each of its children.
      spawn: { ...spawnOptions(dir), detached: true },
      withChildren: true,
      readyWhat: 'answer SELECT 1',
      readyTimeoutMs: READY_TIMEOUT_MS,
      // Fast shutdown: disconnect clients, checkpoint.
      stopSignal: 'SIGINT',
      stopGraceMs: STOP_GRACE_MS,
    });
    this.url = `postgres://${ROLE}@${HOST}:${port}/${DATABASE}`;
    this.superuserUrl = `postgres://${SUPERUSER}@${HOST}:${port}/${DATABASE}`;
    this.dataDir = dataDir;
  }

  /** `initdb`, first start, then the role and database the tests use. */
  async create(): Promise<void> {
    const out = await run(
      join(pgBin(), 'initdb'),
      [
        '-D',
        this.dataDir,
        '-U',
        SUPERUSER,
        '--auth=trust',
        '--encoding=UTF8',
        '--locale=C',
        '--no-sync',
        '--no-instructions',
      ],
      this.dir,
      INITDB_TIMEOUT_MS,
    );
    this.note(out);
    await this.start();
    await this.query(`CREATE ROLE ${ROLE} LOGIN`, [], 'postgres');
    await this.query(`CREATE DATABASE ${DATABASE} OWNER ${ROLE}`, [], 'postgres');
  }

  protected async ready(): Promise<boolean> {
    await this.query('SELECT 1', [], 'postgres', 1_000);
    return true;
  }

  async query<R extends QueryResultRow = QueryResultRow>(
    sql: string,
    params: readonly unknown[] = [],
    database: string = DATABASE,
    timeout: number = QUERY_TIMEOUT_MS,
  ): Promise<R[]> {
    const client = new Client({
      host: HOST,
      port: this.port,
      user: SUPERUSER,
      database,
      connectionTimeoutMillis: timeout,
      query_timeout: timeout,
    });
    // A server that goes away mid-query makes the client emit 'error'; the query rejects anyway.
    client.on('error', () => {});
    try {
      await client.connect();
      const result = await client.query<R>(sql, [...params]);
      return result.rows;
    } finally {
      await client.end().catch(() => {});
    }
  }
}

function makeServerDir(): string {
  const dir = makeTempDir('leasehold-pg-');
  const who = serverIdentity();
  if (who !== null) chownSync(dir, who.uid, who.gid);
  return dir;
}

/**
 * Starts a PostgreSQL server of its own (`initdb` in a fresh temporary directory) on 127.0.0.1,
 * with trust authentication, a role and a database both named `leasehold`, and waits until it
 * runs queries. As root, it runs as the system user `leasehold-pg` (created if missing).
 */
export async function startPostgres(opts: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bin = pgBin();
  if (!existsSync(join(bin, 'postgres')) || !existsSync(join(bin, 'initdb'))) {
    throw new Error(`no initdb and postgres in ${bin}: install Debian's postgresql package (or set LEASEHOLD_PG_BIN)`);
  }
  return retryOnPortClash(
    opts.port === undefined ? 3 : 1,
    async () => new PostgresProcess(opts.port ?? (await freePort()), makeServerDir(), opts.settings ?? {}),
    {
      start: (server) => server.create(),
      discard: (server) => server.kill9(),
      portTaken: (server) => /could not bind|address already in use/i.test(server.logs()),
    },
  );
}
