import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, type QueryResultRow } from 'pg';
import { freePort } from './ports.js';

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
const KILLED_EXIT_TIMEOUT_MS = 3_000;
const QUERY_TIMEOUT_MS = 10_000;
const OUTPUT_TAIL_CHARS = 8_000;

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

export interface PostgresServer {
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
  /** Pid of the current postmaster; changes after `restart()`. */
  readonly pid: number;
  /** The server's temporary directory: the unix socket lives here, the cluster in `dataDir`. */
  readonly dir: string;
  readonly dataDir: string;
  /** False once the postmaster has exited (after `stop()`, `kill9()` or a crash). */
  readonly running: boolean;
  /** SIGSTOP to the postmaster and every child process: connections stay open, nothing answers. */
  pause(): void;
  /** SIGCONT to the postmaster and every child process. */
  resume(): void;
  /** SIGKILL to the postmaster and every backend, resolved once all of them are gone. */
  kill9(): Promise<void>;
  /** Fast shutdown (SIGINT: disconnect clients, checkpoint), SIGKILL after 5 s. Idempotent. */
  stop(): Promise<void>;
  /** Stop (or kill, with `hard`) and start again on the same port and data, waiting until ready. */
  restart(opts?: PostgresRestartOptions): Promise<void>;
  /** Runs one statement as the superuser in `database` over a fresh connection; resolves its rows. */
  query<R extends QueryResultRow = QueryResultRow>(sql: string, params?: readonly unknown[]): Promise<R[]>;
  /** The last few kilobytes the server wrote to stdout and stderr. */
  logs(): string;
}

// Every live server is killed when the test process exits, however it exits. The registry sits
// on globalThis because a test runner may evaluate this module more than once in one process.
interface Registry {
  readonly servers: Set<PostgresProcess>;
  readonly tempDirs: Set<string>;
}

const REGISTRY: unique symbol = Symbol.for('leasehold.test.harness.postgres');
type GlobalWithRegistry = typeof globalThis & { [REGISTRY]?: Registry };

function registry(): Registry {
  const holder = globalThis as GlobalWithRegistry;
  const existing = holder[REGISTRY];
  if (existing !== undefined) return existing;
  const created: Registry = { servers: new Set(), tempDirs: new Set() };
  holder[REGISTRY] = created;
  installCleanup(created);
  return created;
}

function installCleanup(reg: Registry): void {
  const cleanUp = (): void => {
    for (const server of reg.servers) server.killNow();
    reg.servers.clear();
    for (const dir of reg.tempDirs) {
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
      } catch {
        // Best effort at exit; a leftover temp directory is harmless.
      }
    }
    reg.tempDirs.clear();
  };
  process.once('exit', cleanUp);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      cleanUp();
      process.off(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

function appendTail(tail: string, chunk: string): string {
  const joined = tail + chunk;
  return joined.length > OUTPUT_TAIL_CHARS ? joined.slice(-OUTPUT_TAIL_CHARS) : joined;
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

function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    // PGDATA, PGPORT and friends would override what the harness passes.
    if (!key.startsWith('PG')) env[key] = value;
  }
  env.LC_ALL = 'C';
  env.LANG = 'C';
  return env;
}

function spawnOptions(cwd: string) {
  const who = serverIdentity();
  return {
    cwd,
    env: childEnv(),
    stdio: ['ignore', 'pipe', 'pipe'] as ['ignore', 'pipe', 'pipe'],
    ...(who === null ? {} : { uid: who.uid, gid: who.gid }),
  };
}

function run(command: string, args: readonly string[], cwd: string, timeout: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, spawnOptions(cwd));
    let output = '';
    const collect = (text: string): void => {
      output = appendTail(output, text);
    };
    child.stdout.setEncoding('utf8').on('data', collect);
    child.stderr.setEncoding('utf8').on('data', collect);
    const timer = setTimeout(() => child.kill('SIGKILL'), timeout);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`could not run ${command}: ${error.message}`, { cause: error }));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`${command} ${args.join(' ')} failed (code ${code}, signal ${signal}):\n${output}`));
    });
  });
}

interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
}

/** Every process in /proc: pid, state letter and parent pid. */
function processTable(): ProcStat[] {
  const table: ProcStat[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return table;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue;
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    table.push({ pid: Number(entry), state: fields[0] ?? '?', ppid: Number(fields[1]) });
  }
  return table;
}

/** The postmaster's children: backends and auxiliary processes (checkpointer, walwriter, ...). */
function childrenOf(ppid: number): number[] {
  return processTable()
    .filter((proc) => proc.ppid === ppid)
    .map((proc) => proc.pid);
}

/** Whether any of `pids` still runs. Zombies do not count: orphans may never be reaped, but hold nothing. */
function anyAlive(pids: ReadonlySet<number>): boolean {
  return processTable().some((proc) => pids.has(proc.pid) && proc.state !== 'Z' && proc.state !== 'X');
}

function sendSignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

class PostgresProcess implements PostgresServer {
  readonly host = HOST;
  readonly url: string;
  readonly superuserUrl: string;
  readonly user = ROLE;
  readonly database = DATABASE;
  readonly dataDir: string;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private alive = false;
  private paused = false;
  private stopping: Promise<void> | undefined;
  private lastPid = 0;
  private output = '';
  /** Processes sent SIGKILL, awaited before the next start so that none still holds the data dir. */
  private readonly killed = new Set<number>();

  constructor(
    readonly port: number,
    readonly dir: string,
    private readonly settings: Readonly<Record<string, string | number | boolean>>,
  ) {
    this.url = `postgres://${ROLE}@${HOST}:${port}/${DATABASE}`;
    this.superuserUrl = `postgres://${SUPERUSER}@${HOST}:${port}/${DATABASE}`;
    this.dataDir = join(dir, 'data');
  }

  get pid(): number {
    return this.lastPid;
  }

  get running(): boolean {
    return this.alive;
  }

  logs(): string {
    return this.output;
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
    this.output = appendTail(this.output, out);
    await this.launch();
    await this.query(`CREATE ROLE ${ROLE} LOGIN`, [], 'postgres');
    await this.query(`CREATE DATABASE ${DATABASE} OWNER ${ROLE}`, [], 'postgres');
  }

  /** Spawns the postmaster and resolves once it runs queries. */
  async launch(): Promise<void> {
    const settings: Record<string, string | number | boolean> = {
      port: this.port,
      listen_addresses: HOST,
      unix_socket_directories: this.dir,
      // Durable against a killed process (the page cache keeps every write), not against a
      // crashed machine, which tests do not simulate.
      fsync: 'off',
      full_page_writes: 'off',
      shared_buffers: '16MB',
      max_connections: 100,
      logging_collector: 'off',
      log_line_prefix: '%m [%p] ',
      ...this.settings,
    };
    const args = ['-D', this.dataDir];
    for (const [name, value] of Object.entries(settings)) args.push('-c', `${name}=${String(value)}`);
    // Detached: a session of its own, out of reach of signals meant for the test runner's
    // terminal. (Each backend makes itself a process group leader, so signals that must reach
    // every process of the server are sent to the postmaster and to each of its children.)
    const child = spawn(join(pgBin(), 'postgres'), args, { ...spawnOptions(this.dir), detached: true });
    this.child = child;
    this.alive = true;
    this.paused = false;
    let spawnError: Error | undefined;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.alive = false;
        this.paused = false;
        registry().servers.delete(this);
        this.output = appendTail(this.output, `\n[exited: code ${code}, signal ${signal}]\n`);
        resolve();
      });
      child.once('error', (error) => {
        spawnError = error;
        this.alive = false;
        registry().servers.delete(this);
        resolve();
      });
    });
    const collect = (text: string): void => {
      this.output = appendTail(this.output, text);
    };
    child.stdout?.setEncoding('utf8').on('data', collect);
    child.stderr?.setEncoding('utf8').on('data', collect);
    this.lastPid = child.pid ?? 0;
    registry().servers.add(this);

    const deadline = performance.now() + READY_TIMEOUT_MS;
    let lastProblem = 'no attempt made';
    while (performance.now() < deadline) {
      if (!this.alive) {
        const why =
          spawnError === undefined
            ? 'postgres exited during startup'
            : `could not spawn postgres: ${spawnError.message}`;
        throw new Error(`${why} (port ${this.port})\n--- output tail ---\n${this.output}`);
      }
      try {
        await this.query('SELECT 1', [], 'postgres', 1_000);
        return;
      } catch (error) {
        lastProblem = messageOf(error);
      }
      await sleep(50);
    }
    await this.kill9();
    throw new Error(
      `postgres on port ${this.port} did not answer within ${READY_TIMEOUT_MS} ms ` +
        `(last: ${lastProblem})\n--- output tail ---\n${this.output}`,
    );
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

  /**
   * Synchronous SIGKILL to the postmaster and all its children, for exit handlers too. The
   * postmaster is stopped first so that it forks no child after they were listed.
   */
  killNow(): void {
    if (!this.alive || this.lastPid <= 0) return;
    sendSignal(this.lastPid, 'SIGSTOP');
    const pids = [...childrenOf(this.lastPid), this.lastPid];
    for (const pid of pids) {
      this.killed.add(pid);
      sendSignal(pid, 'SIGKILL');
    }
  }

  /** SIGSTOP to the postmaster first (no new backend while the others are being stopped), then every child. */
  pause(): void {
    this.assertRunning('SIGSTOP');
    sendSignal(this.lastPid, 'SIGSTOP');
    for (const pid of childrenOf(this.lastPid)) sendSignal(pid, 'SIGSTOP');
    this.paused = true;
  }

  resume(): void {
    this.assertRunning('SIGCONT');
    for (const pid of childrenOf(this.lastPid)) sendSignal(pid, 'SIGCONT');
    sendSignal(this.lastPid, 'SIGCONT');
    this.paused = false;
  }

  async kill9(): Promise<void> {
    this.killNow();
    await this.exited;
    await this.killedGone();
  }

  stop(): Promise<void> {
    if (!this.alive) return this.killedGone();
    this.stopping ??= this.gracefulStop().finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  async restart(opts: PostgresRestartOptions = {}): Promise<void> {
    if (opts.hard === true) await this.kill9();
    else await this.stop();
    this.output = appendTail(this.output, `\n[restarting${opts.hard === true ? ' after kill -9' : ''}]\n`);
    await this.launch();
  }

  private async gracefulStop(): Promise<void> {
    if (this.paused) this.resume();
    this.child?.kill('SIGINT');
    const grace = new AbortController();
    const graceful = await Promise.race([
      this.exited.then(() => true),
      sleep(STOP_GRACE_MS, false, { signal: grace.signal }).catch(() => true),
    ]);
    grace.abort();
    if (!graceful) this.killNow();
    await this.exited;
    await this.killedGone();
  }

  /** Waits (a bounded while) until no process sent SIGKILL is left, so a new postmaster can start. */
  private async killedGone(): Promise<void> {
    const deadline = performance.now() + KILLED_EXIT_TIMEOUT_MS;
    while (this.killed.size > 0 && anyAlive(this.killed) && performance.now() < deadline) await sleep(20);
    this.killed.clear();
  }

  private assertRunning(signal: NodeJS.Signals): void {
    if (!this.alive) {
      throw new Error(`postgres on port ${this.port} is not running; cannot send ${signal}`);
    }
  }
}

function isAddressInUse(server: PostgresProcess): boolean {
  return /could not bind|address already in use/i.test(server.logs());
}

function makeTempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-pg-'));
  registry().tempDirs.add(dir);
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
  const attempts = opts.port === undefined ? 3 : 1;
  for (let attempt = 1; ; attempt++) {
    const server = new PostgresProcess(opts.port ?? (await freePort()), makeTempDir(), opts.settings ?? {});
    try {
      await server.create();
      return server;
    } catch (error) {
      await server.kill9();
      if (attempt >= attempts || !isAddressInUse(server)) throw error;
    }
  }
}
