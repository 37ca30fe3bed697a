/**
 * PostgreSQL's serial cycle against one write on the same server, in one run.
 *
 *   npx tsup --silent && node bench/postgres-cycle.mjs [--rounds 5] [--duration 2000] [--pin cpu0|split|none] [--json FILE]
 *
 * Rows: `one write`, an INSERT … ON CONFLICT DO UPDATE of one row of a plain table, prepared, on a
 * pg.Client (the floor: one round trip, one committed write); `one write (pool)`, the same on a
 * pg.Pool; leasehold's acquire + release of one name on a pg.Pool and on a pg.Client; and
 * `leasehold's statements (pool|client)`, the two statements leasehold's store sends for that cycle,
 * with nothing of the library around them (a floor with leasehold's guarantees: the distance from it
 * to leasehold's row is the library's own).
 * `LEASEHOLD_BASELINE=/path/to/dist/index.js` adds the same two rows for that build. Each round
 * runs every row, starting one row further on than the round before, on fresh connections; the
 * table gives the median over rounds. `cycle ÷ write` is the floor's rate over the row's, in the
 * same round: how many writes one cycle costs (the bar); `CPU ÷ write` the same by the CPU node
 * and the server spent per operation, which a busy machine disturbs less; `÷ write, same backend`
 * divides a pool's row by the write on a pool instead, leaving out what pg-pool costs a statement.
 *
 * It starts a PostgreSQL of its own (initdb in a temporary directory, a free loopback port, the test
 * harness's settings: fsync off; as root it runs as the user `leasehold-pg`), or uses
 * `BENCH_POSTGRES_URL`. By default node and the server are pinned to CPU 0, as bench/placement.mjs
 * explains; the server's backends inherit it. `--pin split` puts node on CPU 0 and the server on
 * CPU 1, as on machines of their own. `--json FILE` also writes each row's medians there
 * (`npm run bench` runs it so, as its `postgres` scenario).
 */
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Leasehold } from '../dist/index.js';
import { internals } from './internals.mjs';
import { pinSplit, pinToOneCpu } from './placement.mjs';
import { median, Samples } from './stats.mjs';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    duration: { type: 'string', default: '2000' },
    pin: { type: 'string', default: 'cpu0' },
    json: { type: 'string' },
  },
});
if (!['cpu0', 'split', 'none'].includes(flags.pin))
  throw new Error(`--pin must be cpu0, split or none, got ${flags.pin}`);
const ROUNDS = Number(flags.rounds);
const DURATION_MS = Number(flags.duration);
const WARMUP_MS = Math.min(300, DURATION_MS * 0.15);
const LOCK_OPTIONS = Object.freeze({ ttl: 10_000, wait: 10_000 });
/** Each build has a prefix of its own: its schema's functions are its own. */
const PREFIX = 'bench_pg_cycle';
const BASELINE_PREFIX = 'bench_pg_cycle_baseline';
/** The name the statements floor takes and frees (its row is made before the rounds). */
const FLOOR_NAME = 'floor';

const baselinePath = process.env.LEASEHOLD_BASELINE;
const Baseline = baselinePath
  ? (await import(new URL(baselinePath, `file://${process.cwd()}/`).href)).Leasehold
  : undefined;

/** A PostgreSQL of our own, as test/harness/postgres.ts starts one. */
class LocalPostgres {
  dir = mkdtempSync(join(tmpdir(), 'leasehold-bench-pg-'));
  process = undefined;
  port = 0;

  static bin() {
    if (process.env.LEASEHOLD_PG_BIN) return process.env.LEASEHOLD_PG_BIN;
    const versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+$/.test(v));
    return join('/usr/lib/postgresql', versions.sort((a, b) => Number(b) - Number(a))[0] ?? '15', 'bin');
  }

  /** As root, the server runs as `leasehold-pg` (made if missing), as the harness does. */
  static identity() {
    if (process.getuid?.() !== 0) return {};
    const id = (flag) => Number(execFileSync('id', [flag, 'leasehold-pg'], { encoding: 'utf8' }));
    try {
      id('-u');
    } catch {
      execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '-U', 'leasehold-pg']);
    }
    return { uid: id('-u'), gid: id('-g') };
  }

  get url() {
    return `postgres://leasehold@127.0.0.1:${this.port}/leasehold`;
  }

  async start() {
    const who = LocalPostgres.identity();
    if (who.uid !== undefined) chownSync(this.dir, who.uid, who.gid);
    const env = { PATH: process.env.PATH, LC_ALL: 'C', LANG: 'C' };
    const data = join(this.dir, 'data');
    execFileSync(
      join(LocalPostgres.bin(), 'initdb'),
      ['-D', data, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync'],
      { cwd: this.dir, env, ...who, stdio: 'ignore' },
    );
    this.port = await freePort();
    const settings = {
      port: this.port,
      listen_addresses: '127.0.0.1',
      unix_socket_directories: this.dir,
      fsync: 'off',
      full_page_writes: 'off',
      shared_buffers: '16MB',
      max_connections: 100,
    };
    const args = ['-D', data, ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
    this.process = spawn(join(LocalPostgres.bin(), 'postgres'), args, { cwd: this.dir, env, ...who, stdio: 'ignore' });
    const superuser = `postgres://postgres@127.0.0.1:${this.port}/postgres`;
    for (let tries = 0; ; tries++) {
      try {
        await query(superuser, 'SELECT 1');
        break;
      } catch (error) {
        if (tries > 200) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    await query(superuser, 'CREATE ROLE leasehold LOGIN');
    await query(superuser, 'CREATE DATABASE leasehold OWNER leasehold');
  }

  /** CPU seconds of the server so far: the postmaster and its children (Linux /proc, ns). */
  cpuSeconds() {
    const pid = this.process?.pid;
    if (pid === undefined) return null;
    let ns = 0;
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (parent !== pid && Number(entry) !== pid) continue;
        ns += Number(readFileSync(`/proc/${entry}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // The process ended meanwhile.
      }
    }
    return ns / 1e9;
  }

  async stop() {
    const child = this.process;
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGINT');
      await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function query(url, text) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(text);
  } finally {
    await client.end();
  }
}

/**
 * The floor: one prepared upsert of one row, on a client of its own; on a pool, the same write
 * with pg-pool's checkout and return around it, which every statement on a pool pays.
 */
function oneWrite(url, kind = 'client') {
  let backend;
  let i = 0;
  return {
    name: kind === 'pool' ? 'one write (pool)' : 'one write',
    async setup() {
      backend = kind === 'pool' ? new pg.Pool({ connectionString: url }) : new pg.Client({ connectionString: url });
      if (kind === 'client') await backend.connect();
    },
    op: () =>
      backend.query({
        name: 'bench_one_write',
        text: 'INSERT INTO bench_floor (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v',
        values: ['one', i++],
      }),
    teardown: () => backend.end(),
  };
}

/** leasehold's serial acquire + release of one name, on a pool or a client. */
function cycle(name, LeaseholdClass, url, kind, prefix) {
  let backend;
  let locks;
  return {
    name,
    async setup() {
      backend = kind === 'pool' ? new pg.Pool({ connectionString: url }) : new pg.Client({ connectionString: url });
      if (kind === 'client') await backend.connect();
      locks = new LeaseholdClass(backend, { prefix });
      locks.on('backendError', ({ error }) => console.error(`[${name}] ${error.message}`));
    },
    op: async () => {
      const lock = await locks.acquire('cycle', LOCK_OPTIONS);
      await lock.release();
    },
    async teardown() {
      await locks.close();
      await backend.end();
    },
  };
}

/**
 * leasehold's store's two statements for a serial cycle of a name whose last release found nobody
 * behind it (take, then free: named prepared statements, with the values the store sends), on a
 * pool or a client of their own, and nothing of the library around them. Each must take and free
 * the lock, as leasehold's row does.
 */
function statementsFloor(url, kind, prefix) {
  let backend;
  let sql;
  let settings;
  let n = 0;
  const send = (statement, values) => backend.query({ name: statement.name, text: statement.text, values });
  return {
    name: `leasehold's statements (${kind})`,
    async setup() {
      const L = await internals();
      sql = L.statements(L.schemaNames(prefix));
      settings = L.storeSettings({ prefix, instance: 'bench-raw' });
      backend = kind === 'pool' ? new pg.Pool({ connectionString: url }) : new pg.Client({ connectionString: url });
      if (kind === 'client') await backend.connect();
    },
    op: async () => {
      const owner = `${process.pid}-raw-${n++}`;
      const { instance, fenceRetention } = settings;
      const taken = await send(sql.take, [FLOOR_NAME, owner, LOCK_OPTIONS.ttl, 0, instance, fenceRetention]);
      if (taken.rowCount !== 1) throw new Error(`${FLOOR_NAME}: the raw take did not take the lock`);
      const freed = await send(sql.free, [FLOOR_NAME, owner]);
      if (freed.rowCount !== 1) throw new Error(`${FLOOR_NAME}: the raw free did not free the lock`);
    },
    teardown: () => backend.end(),
  };
}

/** Warm up, then run `row.op` serially for DURATION_MS: rate, p50, and CPU per op. */
async function measure(row, server) {
  await row.setup();
  try {
    const warmEnd = performance.now() + WARMUP_MS;
    while (performance.now() < warmEnd) await row.op();
    const latencies = new Samples();
    const cpu = process.cpuUsage();
    const serverCpu = server?.cpuSeconds() ?? null;
    const start = performance.now();
    const end = start + DURATION_MS;
    let ops = 0;
    for (let t = start; t < end; ops++) {
      await row.op();
      const after = performance.now();
      latencies.add(after - t);
      t = after;
    }
    const seconds = (performance.now() - start) / 1000;
    const used = process.cpuUsage(cpu);
    const serverUsed = serverCpu === null ? null : server.cpuSeconds() - serverCpu;
    return {
      rate: ops / seconds,
      p50: latencies.percentile(50) * 1000,
      nodeCpu: (used.user + used.system) / ops,
      serverCpu: serverUsed === null ? null : (serverUsed * 1e6) / ops,
    };
  } finally {
    await row.teardown();
  }
}

/** The rows in round `round`'s order: each round starts one row further on, so each row runs in every place. */
function rotated(list, round) {
  const start = round % list.length;
  return [...list.slice(start), ...list.slice(0, start)];
}

const fmt = (v, digits = 0) => (v === null ? 'n/a' : v.toLocaleString('en-US', { maximumFractionDigits: digits }));

async function main() {
  const server = process.env.BENCH_POSTGRES_URL ? undefined : new LocalPostgres();
  const stopOnSignal = () => server?.stop().finally(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  try {
    await server?.start();
    const url = process.env.BENCH_POSTGRES_URL ?? server.url;
    const pids = server?.process ? [server.process.pid] : [];
    const placement =
      flags.pin === 'none' ? 'not pinned' : (flags.pin === 'split' ? pinSplit : pinToOneCpu)(pids, 'the server');
    await query(url, 'CREATE TABLE IF NOT EXISTS bench_floor (k text PRIMARY KEY, v bigint NOT NULL)');
    // Each build's schema is made once, outside the timed passes.
    const builds = [[Leasehold, PREFIX], ...(Baseline ? [[Baseline, BASELINE_PREFIX]] : [])];
    for (const [LeaseholdClass, prefix] of builds) {
      const migrate = new pg.Client({ connectionString: url });
      await migrate.connect();
      const first = new LeaseholdClass(migrate, { prefix });
      await (await first.acquire('cycle', LOCK_OPTIONS)).release();
      if (prefix === PREFIX) await (await first.acquire(FLOOR_NAME, LOCK_OPTIONS)).release();
      await first.close();
      await migrate.end();
    }

    const rows = [
      () => oneWrite(url),
      () => oneWrite(url, 'pool'),
      () => cycle('leasehold (pool)', Leasehold, url, 'pool', PREFIX),
      () => cycle('leasehold (client)', Leasehold, url, 'client', PREFIX),
      () => statementsFloor(url, 'pool', PREFIX),
      () => statementsFloor(url, 'client', PREFIX),
      ...(Baseline
        ? [
            () => cycle('baseline (pool)', Baseline, url, 'pool', BASELINE_PREFIX),
            () => cycle('baseline (client)', Baseline, url, 'client', BASELINE_PREFIX),
          ]
        : []),
    ];
    const results = new Map();
    for (let round = 0; round < ROUNDS; round++) {
      const inRound = new Map();
      for (const make of rotated(rows, round)) {
        const row = make();
        inRound.set(row.name, await measure(row, server));
      }
      const floor = inRound.get('one write');
      const poolFloor = inRound.get('one write (pool)');
      const cpu = (r) => (r.serverCpu === null ? null : r.nodeCpu + r.serverCpu);
      for (const [name, r] of inRound) {
        const cpuRatio = cpu(r) === null ? null : cpu(r) / cpu(floor);
        const same = (name.includes('pool') ? poolFloor : floor).rate / r.rate;
        results.set(name, [...(results.get(name) ?? []), { ...r, ratio: floor.rate / r.rate, cpuRatio, same }]);
      }
      console.error(`round ${round + 1}/${ROUNDS} done`);
    }
    const medians = Object.fromEntries(
      [...results].map(([name, runs]) => [
        name,
        Object.fromEntries(
          ['rate', 'p50', 'nodeCpu', 'serverCpu', 'ratio', 'cpuRatio', 'same'].map((field) => [
            field,
            median(runs.map((r) => r[field])),
          ]),
        ),
      ]),
    );
    if (flags.json) writeFileSync(flags.json, JSON.stringify({ placement, rows: medians }));
    console.log(`PostgreSQL serial cycle, ${ROUNDS} rounds of ${DURATION_MS} ms; ${placement}`);
    console.log(
      '| row | ops/s | p50 µs | node CPU µs/op | server CPU µs/op | cycle ÷ write | CPU ÷ write | ÷ write, same backend |',
    );
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const name of results.keys()) {
      const m = (field) => medians[name][field];
      console.log(
        `| ${name} | ${fmt(m('rate'))} | ${fmt(m('p50'))} | ${fmt(m('nodeCpu'))} | ${fmt(m('serverCpu'))} | ${fmt(m('ratio'), 2)} | ${fmt(m('cpuRatio'), 2)} | ${fmt(m('same'), 2)} |`,
      );
    }
  } finally {
    await server?.stop();
  }
}

await main();
