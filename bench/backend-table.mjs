/**
 * Each kind of lock on each backend, leasehold alone: the mutex, a semaphore of 4 permits and a
 * read-write lock, serial and under contention, on Redis, Redis waiting for one replica,
 * PostgreSQL and etcd. bench/backends.ts starts PostgreSQL and etcd and runs this with their URLs
 * (BENCH_POSTGRES_URL, BENCH_ETCD_URLS, comma-separated); the Redis servers are started here.
 *
 *   node bench/backend-table.mjs [--rounds N] [--duration MS] [--out DIR]
 *
 * Every run counts its grants and checks what it saw: an acquire or release that failed, a lease
 * lost while held, more holders at once than the kind of lock allows, or a fencing token that went
 * back stops the whole bench with an error. Nothing is retried and nothing is left out quietly.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, platform, release } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Leasehold } from '../dist/index.js';
import { closeAll, commandsSent, connect, connectAdmin } from './clients.mjs';
import { LOCK_OPTIONS, now, warmupMs } from './harness.mjs';
import { startRedis } from './server.mjs';
import { median, Samples } from './stats.mjs';

const LIMIT = 4;
const WORKERS = 16;
const WRITERS = 2;
const HOLD_MS = 1;

/** The kinds of lock, as the options of one acquire, and how many holders each admits beside whom. */
const MUTEX = { label: 'mutex', options: {} };
const SEMAPHORE = { label: `semaphore (limit ${LIMIT})`, options: { limit: LIMIT } };
const SHARED = { label: 'read-write lock, shared', options: { mode: 'shared' } };
const EXCLUSIVE = { label: 'read-write lock, exclusive', options: { mode: 'exclusive' } };

/**
 * What one contended run may never see. `admits(open, role)`: may a holder in `role` be granted
 * while `open` (holders by role) hold? `exclusive(role)`: its grant follows every earlier one, so
 * its fencing token must exceed every token granted before it, and every later token exceed it.
 */
const RULES = {
  mutex: { admits: (open) => open.total === 0, exclusive: () => true },
  semaphore: { admits: (open) => open.total < LIMIT, exclusive: () => false },
  rwlock: {
    admits: (open, role) => (role === 'writer' ? open.total === 0 : (open.byRole.writer ?? 0) === 0),
    exclusive: (role) => role === 'writer',
  },
};

/** `WORKERS` workers in one role, or the first `WRITERS` as writers and the rest as readers. */
const alike = (role, kind) => Array.from({ length: WORKERS }, () => [role, kind]);
const mixed = Array.from({ length: WORKERS }, (_, i) => (i < WRITERS ? ['writer', EXCLUSIVE] : ['reader', SHARED]));

/** The measurements, in the order of the table. */
const MEASUREMENTS = [
  { name: 'mutex-serial', run: (open, ms) => serial(open, ms, MUTEX) },
  { name: 'mutex-contended', run: (open, ms) => contended(open, ms, 'mutex', alike('holder', MUTEX)) },
  { name: 'semaphore-serial', run: (open, ms) => serial(open, ms, SEMAPHORE) },
  { name: 'semaphore-contended', run: (open, ms) => contended(open, ms, 'semaphore', alike('holder', SEMAPHORE)) },
  { name: 'shared-serial', run: (open, ms) => serial(open, ms, SHARED) },
  { name: 'rwlock-mixed', run: (open, ms) => contended(open, ms, 'rwlock', mixed) },
];

/** The rows of the table: a figure of one measurement each. */
const ROWS = [
  ['mutex-serial', 'cyclesPerSec', 'mutex, serial: acquire + release cycles/s', 0],
  ['mutex-serial', 'acquireP50', 'mutex, serial: acquire p50 ms', 2],
  ['mutex-serial', 'cpuPerGrant', 'mutex, serial: node CPU µs per cycle', 0],
  ['mutex-serial', 'callsPerGrant', 'mutex, serial: calls to the backend per cycle', 2],
  ['mutex-contended', 'grantsPerSec', `mutex, ${WORKERS} workers holding ${HOLD_MS} ms: grants/s`, 0],
  ['mutex-contended', 'cpuPerGrant', `mutex, ${WORKERS} workers: node CPU µs per grant`, 0],
  ['mutex-contended', 'callsPerGrant', `mutex, ${WORKERS} workers: calls per grant`, 2],
  ['semaphore-serial', 'cyclesPerSec', `semaphore (limit ${LIMIT}), serial: cycles/s`, 0],
  ['semaphore-serial', 'acquireP50', `semaphore (limit ${LIMIT}), serial: acquire p50 ms`, 2],
  ['semaphore-serial', 'callsPerGrant', `semaphore (limit ${LIMIT}), serial: calls per cycle`, 2],
  [
    'semaphore-contended',
    'grantsPerSec',
    `semaphore, ${WORKERS} workers over ${LIMIT} permits holding ${HOLD_MS} ms: grants/s`,
    0,
  ],
  ['semaphore-contended', 'meanHeld', `semaphore, ${WORKERS} workers: mean permits held (of ${LIMIT})`, 2],
  ['semaphore-contended', 'waitP99', `semaphore, ${WORKERS} workers: wait p99 ms`, 1],
  ['semaphore-contended', 'cpuPerGrant', `semaphore, ${WORKERS} workers: node CPU µs per grant`, 0],
  ['semaphore-contended', 'callsPerGrant', `semaphore, ${WORKERS} workers: calls per grant`, 2],
  ['shared-serial', 'cyclesPerSec', 'read-write lock, shared, serial: cycles/s', 0],
  ['shared-serial', 'acquireP50', 'read-write lock, shared, serial: acquire p50 ms', 2],
  ['shared-serial', 'callsPerGrant', 'read-write lock, shared, serial: calls per cycle', 2],
  [
    'rwlock-mixed',
    'grantsPerSec',
    `read-write lock, ${WORKERS - WRITERS} readers + ${WRITERS} writers holding ${HOLD_MS} ms: grants/s`,
    0,
  ],
  ['rwlock-mixed', 'writesPerSec', 'read-write lock, mixed: of which writes/s', 0],
  ['rwlock-mixed', 'meanHeld', 'read-write lock, mixed: mean holders', 2],
  ['rwlock-mixed', 'writerWaitP99', 'read-write lock, mixed: writer wait p99 ms', 1],
  ['rwlock-mixed', 'cpuPerGrant', 'read-write lock, mixed: node CPU µs per grant', 0],
  ['rwlock-mixed', 'callsPerGrant', 'read-write lock, mixed: calls per grant', 2],
];

/** A run that saw what must not happen: the bench stops with it. */
class BenchFailure extends Error {}

/**
 * A fresh Leasehold on a fresh client of `backend`, under a prefix of its own, with every failure
 * it reports on the side (a lost lease, a failed extension or background call) collected in
 * `troubles`, which the run checks at its end.
 */
async function openLeasehold(backend) {
  const opened = await backend.connect();
  const prefix = `bench-${Math.random().toString(36).slice(2, 10)}`;
  const lh = new Leasehold(opened.client, { prefix, ...backend.options });
  const troubles = [];
  lh.on('lost', ({ name, error }) => troubles.push(`lost ${name}: ${error.message}`));
  lh.on('extendFailed', ({ name, error }) => troubles.push(`extend of ${name} failed: ${error?.message ?? error}`));
  lh.on('releaseFailed', ({ name, error }) => troubles.push(`release of ${name} failed: ${error?.message ?? error}`));
  lh.on('backendError', ({ operation, error }) => troubles.push(`${operation}: ${error?.message ?? error}`));
  return {
    lh,
    troubles,
    counters: backend.counters,
    async close() {
      await lh.close();
      await opened.close();
    },
  };
}

/** Release `lock`, which must still have been ours. */
async function releaseHeld(lock, where) {
  if (!(await lock.release())) {
    throw new BenchFailure(`${where}: release of ${lock.name} (token ${lock.fencingToken}) found it no longer held`);
  }
}

/** µs of CPU this process (leasehold and its client) spent since `since` (a process.cpuUsage()). */
function cpuMicros(since) {
  const { user, system } = process.cpuUsage(since);
  return user + system;
}

/** Calls to the backend (and, on etcd, raft proposals) per grant between two readings of its counters. */
function perGrant(before, after, grants) {
  const result = { callsPerGrant: (after.calls - before.calls) / grants };
  if (after.proposals !== undefined) result.proposalsPerGrant = (after.proposals - before.proposals) / grants;
  return result;
}

/** One loop on one name for `ms`: cycles, cycles/s and acquire latency; tokens must go up. */
async function cycles(lh, kind, ms) {
  const latencies = new Samples();
  const options = { ...LOCK_OPTIONS, ...kind.options };
  const start = now();
  const end = start + ms;
  let count = 0;
  let lastToken = -Infinity;
  while (now() < end) {
    const asked = now();
    const lock = await lh.acquire('serial', options);
    latencies.add(now() - asked);
    if (!(lock.fencingToken > lastToken)) {
      throw new BenchFailure(`${kind.label}, serial: token ${lock.fencingToken} after ${lastToken}`);
    }
    lastToken = lock.fencingToken;
    await releaseHeld(lock, `${kind.label}, serial`);
    count++;
  }
  const seconds = (now() - start) / 1000;
  return { grants: count, cyclesPerSec: count / seconds, acquireP50: latencies.percentile(50) };
}

async function serial(open, ms, kind) {
  const { lh, troubles, counters, close } = await open();
  try {
    await cycles(lh, kind, warmupMs(ms));
    const before = await counters();
    const cpu = process.cpuUsage();
    const result = await cycles(lh, kind, ms);
    const cpuPerGrant = cpuMicros(cpu) / result.grants;
    return { ...result, cpuPerGrant, ...perGrant(before, await counters(), result.grants), troubles };
  } finally {
    await close();
  }
}

/**
 * `roles.length` workers on one name for `ms`, each taking its turn as `[role, kind]`, holding
 * HOLD_MS, releasing, going again. Counts the grants made inside the window, per worker and role;
 * the waits; the holders at once (most, and the time-weighted mean). The first failure of any
 * worker stops them all and is thrown once they have stopped.
 */
async function contest(lh, ms, rule, roles) {
  const perWorker = new Array(roles.length).fill(0);
  const byRole = {};
  const waits = new Map(roles.map(([role]) => [role, new Samples()]));
  const open = { total: 0, byRole: {} };
  let failure;
  let grants = 0;
  let most = 0;
  let heldArea = 0;
  let lastChange = now();
  let newestToken = -Infinity;
  let exclusiveToken = -Infinity;
  const end = now() + ms;
  const change = (role, delta) => {
    const at = Math.min(now(), end);
    if (at > lastChange) heldArea += open.total * (at - lastChange);
    lastChange = Math.max(lastChange, at);
    open.total += delta;
    open.byRole[role] = (open.byRole[role] ?? 0) + delta;
    most = Math.max(most, open.total);
  };
  const check = (role, lock) => {
    if (!rule.admits(open, role)) {
      throw new BenchFailure(
        `a ${role} was granted beside ${JSON.stringify(open.byRole)} (token ${lock.fencingToken})`,
      );
    }
    const token = lock.fencingToken;
    const floor = rule.exclusive(role) ? newestToken : exclusiveToken;
    if (!(token > floor)) throw new BenchFailure(`a ${role} got token ${token}, not above ${floor}`);
    newestToken = Math.max(newestToken, token);
    if (rule.exclusive(role)) exclusiveToken = token;
  };
  const worker = async (id) => {
    const [role, kind] = roles[id];
    const options = { ...LOCK_OPTIONS, ...kind.options };
    while (failure === undefined && now() < end) {
      const asked = now();
      const lock = await lh.acquire('contended', options);
      const got = now();
      waits.get(role).add(got - asked);
      try {
        check(role, lock);
      } catch (error) {
        // Given back first, so that the other workers are not kept waiting on it.
        await lock.release();
        throw error;
      }
      grants++;
      if (got <= end) {
        perWorker[id]++;
        byRole[role] = (byRole[role] ?? 0) + 1;
      }
      change(role, 1);
      await sleep(HOLD_MS);
      change(role, -1);
      await releaseHeld(lock, `a ${role}`);
    }
  };
  await Promise.all(
    roles.map((_, id) =>
      worker(id).catch((error) => {
        failure ??= error;
      }),
    ),
  );
  if (failure) throw failure;
  return { perWorker, byRole, waits, grants, most, meanHeld: heldArea / ms };
}

async function contended(open, ms, ruleName, roles) {
  const rule = RULES[ruleName];
  const { lh, troubles, counters, close } = await open();
  try {
    await contest(lh, warmupMs(ms), rule, roles);
    const before = await counters();
    const cpu = process.cpuUsage();
    const c = await contest(lh, ms, rule, roles);
    const cpuPerGrant = cpuMicros(cpu) / c.grants;
    const counted = perGrant(before, await counters(), c.grants);
    const seconds = ms / 1000;
    const inWindow = c.perWorker.reduce((a, b) => a + b, 0);
    const result = {
      grants: c.grants,
      grantsPerSec: inWindow / seconds,
      meanHeld: c.meanHeld,
      most: c.most,
      fewestPerWorker: Math.min(...c.perWorker),
      cpuPerGrant,
      ...counted,
      waitP50: c.waits.get(roles[0][0]).percentile(50),
      waitP99: c.waits.get(roles[0][0]).percentile(99),
      troubles,
    };
    if (ruleName === 'rwlock') {
      result.readsPerSec = (c.byRole.reader ?? 0) / seconds;
      result.writesPerSec = (c.byRole.writer ?? 0) / seconds;
      result.writerWaitP99 = c.waits.get('writer').percentile(99);
      result.readerWaitP99 = c.waits.get('reader').percentile(99);
    }
    return result;
  } finally {
    await close();
  }
}

/** The backends measured: Redis ones always, PostgreSQL and etcd when given their URLs. */
async function startBackends() {
  const started = [];
  const backends = [];
  const redis = await startRedis();
  started.push(redis);
  const redisClient = (port) => async () => {
    const client = await connect(port);
    return { client, close: () => closeAll([client]) };
  };
  // Commands sent by this process's ioredis clients, as clients.mjs counts them.
  const redisCounters = async () => ({ calls: commandsSent() });
  backends.push({ name: 'Redis', connect: redisClient(redis.port), options: {}, counters: redisCounters });
  const primary = await startRedis();
  started.push(primary);
  const replica = await startRedis({ replicaOf: primary.port });
  started.push(replica);
  const admin = await connectAdmin(replica.port);
  for (let i = 0; !/master_link_status:up/.test(await admin.info('replication')); i++) {
    if (i === 200) throw new Error(`the replica of 127.0.0.1:${primary.port} did not come up`);
    await sleep(25);
  }
  await closeAll([admin]);
  backends.push({
    name: 'Redis, replicas: 1',
    connect: redisClient(primary.port),
    options: { replicas: 1, replicaTimeout: 1_000 },
    counters: redisCounters,
  });
  const postgresUrl = process.env.BENCH_POSTGRES_URL;
  if (postgresUrl) {
    const { default: pg } = await import('pg');
    // Statements sent by every pg client of this process (the pool's and the listening one).
    let statements = 0;
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function countedQuery(...args) {
      statements++;
      return query.apply(this, args);
    };
    backends.push({
      name: 'PostgreSQL',
      connect: async () => {
        const pool = new pg.Pool({ connectionString: postgresUrl, max: WORKERS + 4 });
        return { client: pool, close: () => pool.end() };
      },
      options: {},
      counters: async () => ({ calls: statements }),
    });
  }
  const etcdUrls = process.env.BENCH_ETCD_URLS?.split(',').filter(Boolean);
  if (etcdUrls?.length) {
    const { Etcd3 } = await import('etcd3');
    backends.push({
      name: `etcd, ${etcdUrls.length} member${etcdUrls.length === 1 ? '' : 's'}`,
      connect: async () => {
        const client = new Etcd3({ hosts: etcdUrls });
        return { client, close: async () => client.close() };
      },
      options: {},
      counters: () => etcdCounters(etcdUrls),
    });
  }
  return { backends, stop: () => Promise.all(started.map((s) => s.stop())) };
}

/** When, what and on what machine, in one line. */
function heading(meta) {
  const load = (values) => values.map((l) => l.toFixed(1)).join(', ');
  return (
    `${meta.date}; leasehold ${meta.leasehold}; ${meta.machine}; load average ${load(meta.loadavg.before)} ` +
    `before, ${load(meta.loadavg.after)} after; ${meta.rounds} rounds of ${meta.durationMs} ms per measurement, ` +
    `${meta.elapsedSeconds} s in all.`
  );
}

/** The commit measured, and whether src/ had changes beyond it (the build is of the working tree). */
function revision() {
  try {
    const git = (...args) =>
      execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = git('status', '--porcelain', 'src') !== '';
    return `${git('rev-parse', '--short', 'HEAD')}${dirty ? ' + uncommitted src changes' : ''}`;
  } catch {
    return 'unknown';
  }
}

function format(value, digits) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return 'n/a';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/**
 * From every member's /metrics: gRPC messages received (a unary call is one; a watch created or
 * cancelled, a keepalive, one each on their streams) summed over members, and raft proposals
 * committed (the cluster's count: the highest any member reports).
 */
async function etcdCounters(urls) {
  const texts = await Promise.all(urls.map(async (url) => (await fetch(`${url}/metrics`)).text()));
  const sum = (text, name) =>
    [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].reduce((n, m) => n + Number(m[1]), 0);
  return {
    calls: texts.reduce((n, text) => n + sum(text, 'grpc_server_msg_received_total'), 0),
    proposals: Math.max(...texts.map((text) => sum(text, 'etcd_server_proposals_committed_total'))),
  };
}

function shuffled(items) {
  return items
    .map((item) => [Math.random(), item])
    .sort(([a], [b]) => a - b)
    .map(([, item]) => item);
}

/** The table: a row per figure, a column per backend, each cell its median over the rounds and ÷ Redis's. */
function table(summary, backends) {
  const names = backends.map((b) => b.name);
  const lines = [
    `| figure (median of rounds; ×: ÷ Redis) | ${names.join(' | ')} |`,
    `| --- | ${names.map(() => '---:').join(' | ')} |`,
  ];
  for (const [measurement, key, label, digits] of ROWS) {
    const base = summary[names[0]][measurement][key];
    const cells = names.map((name, i) => {
      const value = summary[name][measurement][key];
      if (i === 0 || !base || typeof value !== 'number') return format(value, digits);
      return `${format(value, digits)} (×${format(value / base, 2)})`;
    });
    lines.push(`| ${label} | ${cells.join(' | ')} |`);
  }
  const checks = names.map((name) => {
    const s = summary[name];
    return `${s['mutex-contended'].mostMax} / ${s['semaphore-contended'].mostMax} / ${s['rwlock-mixed'].mostMax}`;
  });
  lines.push(`| most holders at once, worst round: mutex / semaphore / mixed | ${checks.join(' | ')} |`);
  const proposals = names.map((name) => {
    const s = summary[name];
    const of = (m) => format(s[m].proposalsPerGrant, 2);
    return s['mutex-serial'].proposalsPerGrant === undefined
      ? '–'
      : `${of('mutex-serial')} / ${of('semaphore-contended')} / ${of('rwlock-mixed')}`;
  });
  lines.push(`| raft proposals per grant: mutex serial / semaphore / mixed | ${proposals.join(' | ')} |`);
  const grants = names.map((name) => format(summary[name].grants, 0));
  lines.push(`| grants counted and checked, all runs | ${grants.join(' | ')} |`);
  return `${lines.join('\n')}\n`;
}

function parseOptions() {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      duration: { type: 'string', default: '700' },
      out: { type: 'string', default: new URL('./results/', import.meta.url).pathname },
    },
  });
  const int = (name) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${values[name]}`);
    return n;
  };
  return { rounds: int('rounds'), duration: int('duration'), out: values.out };
}

async function main() {
  const options = parseOptions();
  const started = now();
  const loadBefore = loadavg();
  const { backends, stop } = await startBackends();
  const log = (text) => process.stderr.write(`${text}\n`);
  const runs = Object.fromEntries(
    backends.map((b) => [b.name, Object.fromEntries(MEASUREMENTS.map((m) => [m.name, []]))]),
  );
  try {
    for (let round = 1; round <= options.rounds; round++) {
      // A fresh order each round, of the measurements and of the backends within each: a busy
      // moment of the machine then falls on a different run each time, and the median sets it aside.
      for (const measurement of shuffled(MEASUREMENTS)) {
        const from = Math.floor(Math.random() * backends.length);
        for (const backend of [...backends.slice(from), ...backends.slice(0, from)]) {
          const where = `[round ${round}/${options.rounds}] ${backend.name}, ${measurement.name}`;
          let result;
          try {
            result = await measurement.run(() => openLeasehold(backend), options.duration);
          } catch (error) {
            const what = error instanceof BenchFailure ? error.message : (error?.stack ?? error);
            throw new BenchFailure(`${where}: ${what}`);
          }
          if (result.troubles.length > 0) {
            throw new BenchFailure(`${where}: reported on the side: ${result.troubles.join('; ')}`);
          }
          if (result.grants === 0) throw new BenchFailure(`${where}: no grant at all`);
          delete result.troubles;
          runs[backend.name][measurement.name].push(result);
          log(`${where}: ${JSON.stringify(result, (_, v) => (typeof v === 'number' ? Number(v.toFixed(3)) : v))}`);
        }
      }
    }
  } finally {
    await stop();
  }
  const summary = Object.fromEntries(
    backends.map((b) => {
      const byMeasurement = Object.fromEntries(
        MEASUREMENTS.map((m) => {
          const list = runs[b.name][m.name];
          const keys = Object.keys(list[0]).filter((k) => typeof list[0][k] === 'number');
          const medians = Object.fromEntries(keys.map((k) => [k, median(list.map((r) => r[k]))]));
          medians.mostMax = Math.max(...list.map((r) => r.most ?? 1));
          return [m.name, medians];
        }),
      );
      const grants = MEASUREMENTS.reduce((n, m) => n + runs[b.name][m.name].reduce((a, r) => a + r.grants, 0), 0);
      return [b.name, { ...byMeasurement, grants }];
    }),
  );
  const meta = {
    date: new Date().toISOString(),
    machine: `${cpus()[0]?.model.trim() ?? 'unknown'}, ${cpus().length} cores, ${platform()} ${release()}, Node ${process.version}`,
    leasehold: revision(),
    loadavg: { before: loadBefore, after: loadavg() },
    rounds: options.rounds,
    durationMs: options.duration,
    elapsedSeconds: Math.round((now() - started) / 1000),
  };
  const md = table(summary, backends);
  mkdirSync(options.out, { recursive: true });
  writeFileSync(join(options.out, 'backends.json'), `${JSON.stringify({ ...meta, summary, runs }, null, 2)}\n`);
  writeFileSync(join(options.out, 'backends.md'), `# Each kind of lock on each backend\n\n${heading(meta)}\n\n${md}`);
  process.stdout.write(md);
  log(`${meta.elapsedSeconds} s; wrote ${join(options.out, 'backends.json')} and backends.md`);
}

main().catch((error) => {
  console.error(error instanceof BenchFailure ? `bench failed: ${error.message}` : error);
  process.exitCode = 1;
});
