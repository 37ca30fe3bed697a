/**
 * Side-by-side benchmark of leasehold and its peers: one redis-server of our own, the same
 * client library (ioredis) for all, libraries interleaved in a fresh random order each round,
 * the median over rounds reported. Only ratios within one run mean anything: this machine's
 * speed drifts between runs.
 *
 *   node bench/run.mjs [--quick] [--rounds N] [--duration MS] [--scenario NAME[,NAME]]
 *                      [--libs NAME[,NAME]] [--memory-cycles N] [--pin cpu0|split|none] [--out DIR]
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, platform, release, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { closeAll, connectAdmin, serverVersion } from './clients.mjs';
import { LIBRARIES } from './peers.mjs';
import { pinSplit, pinToOneCpu } from './placement.mjs';
import { writeReport } from './report.mjs';
import contended from './scenarios/contended.mjs';
import contendedApart from './scenarios/contended-apart.mjs';
import footprint, { FOOTPRINT_LOCKS } from './scenarios/footprint.mjs';
import limit from './scenarios/limit.mjs';
import memory from './scenarios/memory.mjs';
import parallel from './scenarios/parallel.mjs';
import parallelSplit from './scenarios/parallel-split.mjs';
import postgres from './scenarios/postgres.mjs';
import redlock from './scenarios/redlock.mjs';
import rwlock from './scenarios/rwlock.mjs';
import semaphore from './scenarios/semaphore.mjs';
import serial from './scenarios/serial.mjs';
import { startRedis } from './server.mjs';

const SCENARIOS = [
  serial,
  parallel,
  parallelSplit,
  limit,
  contended,
  contendedApart,
  semaphore,
  rwlock,
  redlock,
  memory,
  footprint,
  postgres,
];
const DEFAULT_OUT = new URL('./results/', import.meta.url).pathname;

/** Sized so that a full run takes about 13 minutes on a 2-core machine, and --quick under one. */
const MODES = {
  full: { rounds: 5, duration: 1200, memoryCycles: 1_000_000, footprintLocks: FOOTPRINT_LOCKS.full },
  quick: { rounds: 1, duration: 300, memoryCycles: 30_000, footprintLocks: FOOTPRINT_LOCKS.quick },
};

function list(value) {
  return value ? value.flatMap((v) => v.split(',')).filter(Boolean) : undefined;
}

function positiveInt(value, name) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${value}`);
  return n;
}

function parseOptions() {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      duration: { type: 'string' },
      scenario: { type: 'string', multiple: true },
      libs: { type: 'string', multiple: true },
      'memory-cycles': { type: 'string' },
      pin: { type: 'string', default: 'cpu0' },
      out: { type: 'string' },
    },
  });
  const mode = values.quick ? MODES.quick : MODES.full;
  const scenarioNames = list(values.scenario) ?? SCENARIOS.map((s) => s.name);
  const libNames = list(values.libs) ?? LIBRARIES.map((l) => l.name);
  if (!['cpu0', 'split', 'none'].includes(values.pin)) {
    throw new Error(`--pin must be cpu0, split or none, got ${values.pin}`);
  }
  for (const name of scenarioNames) {
    if (!SCENARIOS.some((s) => s.name === name)) throw new Error(`unknown --scenario ${name}`);
  }
  for (const name of libNames) {
    if (!LIBRARIES.some((l) => l.name === name)) throw new Error(`unknown --libs ${name}`);
  }
  return {
    mode: values.quick ? 'quick' : 'full',
    rounds: values.rounds ? positiveInt(values.rounds, 'rounds') : mode.rounds,
    duration: values.duration ? positiveInt(values.duration, 'duration') : mode.duration,
    memoryCycles: values['memory-cycles'] ? positiveInt(values['memory-cycles'], 'memory-cycles') : mode.memoryCycles,
    footprintLocks: mode.footprintLocks,
    scenarios: SCENARIOS.filter((s) => scenarioNames.includes(s.name)),
    libraries: LIBRARIES.filter((l) => libNames.includes(l.name)),
    pin: values.pin,
    out: values.out ?? DEFAULT_OUT,
    complete: !values.scenario && !values.libs,
  };
}

function shuffled(items) {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy;
}

function versionAt(url) {
  return JSON.parse(readFileSync(url, 'utf8')).version.replace(/^v/, '');
}

/** Read from the file: some peers do not export their package.json. */
/** A package's version, or 'not installed' (an on-demand peer whose install failed). */
function packageVersion(name) {
  try {
    return versionAt(new URL(`../node_modules/${name}/package.json`, import.meta.url));
  } catch {
    return 'not installed';
  }
}

function leaseholdRevision() {
  try {
    const git = (...args) =>
      execFileSync('git', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const commit = git('rev-parse', '--short', 'HEAD');
    const dirty = git('status', '--porcelain', 'src') !== '';
    return dirty ? `${commit} + uncommitted src changes` : commit;
  } catch {
    return 'unknown';
  }
}

async function machine(admin) {
  const cpu = cpus();
  return {
    cpu: cpu[0]?.model.trim() ?? 'unknown',
    cores: cpu.length,
    memoryGB: Math.round(totalmem() / 2 ** 30),
    os: `${platform()} ${release()}`,
    node: process.version,
    redis: await serverVersion(admin),
    ioredis: packageVersion('ioredis'),
    leasehold: `${versionAt(new URL('../package.json', import.meta.url))} (${leaseholdRevision()})`,
    peers: Object.fromEntries(
      ['redlock', '@sesamecare-oss/redlock', 'redis-semaphore', 'redlock-universal'].map((n) => [n, packageVersion(n)]),
    ),
  };
}

/** Pin node and the servers as `--pin` says (bench/placement.mjs), and say where they run. */
function placed(pin, servers) {
  if (pin === 'none') return 'not pinned (--pin none)';
  return (pin === 'split' ? pinSplit : pinToOneCpu)(servers.map((s) => s.pid));
}

/** Who takes part in a scenario: the libraries it names (or all), or its own fixed contestants. */
function contestants(scenario, libraries) {
  if (scenario.contestants) return scenario.contestants.map((name) => ({ name }));
  if (scenario.libraries) return libraries.filter((l) => scenario.libraries.includes(l.name));
  return libraries.filter(
    (l) => (!l.reference || scenario.references) && (!l.scenarios || l.scenarios.includes(scenario.name)),
  );
}

function brief(metrics) {
  if (metrics.error) return `error: ${metrics.error}`;
  if (metrics.unavailable) return 'n/a';
  return Object.entries(metrics)
    .filter(([, v]) => typeof v === 'number')
    .slice(0, 4)
    .map(([k, v]) => `${k}=${Number(v.toFixed(v < 10 ? 3 : 0))}`)
    .join(' ');
}

/**
 * A replica of the server on `port`, attached only while a library that waits for it runs: the
 * server does not copy the other libraries' writes to it, which would cost each in proportion to
 * what it writes.
 */
function replicaOf(admin, port) {
  return {
    admin,
    async attach() {
      await admin.replicaof('127.0.0.1', port);
      for (let i = 0; i < 400 && !/master_link_status:up/.test(await admin.info('replication')); i++) {
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    detach: () => admin.replicaof('NO', 'ONE'),
  };
}

async function runOne(scenario, contestant, ctx) {
  await Promise.all(ctx.admins.map((a) => a.flushall().then(() => a.script('FLUSH'))));
  const replicated = contestant.replica === true && ctx.replica !== undefined;
  if (replicated) await ctx.replica.attach();
  // A hung library must not hang the whole run: give up on it and say so.
  const limitMs = scenario.timeLimitMs?.(ctx) ?? ctx.duration * 4 + 60_000;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no result within ${limitMs} ms`)), limitMs);
  });
  try {
    return await Promise.race([scenario.run(contestant, ctx), timeout]);
  } catch (error) {
    return { error: error?.message ?? String(error) };
  } finally {
    clearTimeout(timer);
    if (replicated) await ctx.replica.detach();
  }
}

async function main() {
  const options = parseOptions();
  const started = performance.now();
  const needsNodes = Math.max(1, ...options.scenarios.map((s) => s.nodes ?? 1));
  const servers = [];
  const admins = [];
  const extra = [];
  let replica;
  try {
    for (let i = 0; i < needsNodes; i++) servers.push(await startRedis());
    for (const server of servers) admins.push(await connectAdmin(server.port));
    // A library that waits for a replica gets one, beside the first server, while its turn lasts.
    if (options.libraries.some((l) => l.replica)) {
      const server = await startRedis();
      extra.push(server);
      replica = replicaOf(await connectAdmin(server.port), servers[0].port);
    }
    const ctx = {
      port: servers[0].port,
      ports: servers.map((s) => s.port),
      admin: admins[0],
      admins,
      replica,
      duration: options.duration,
      memoryCycles: options.memoryCycles,
      footprintLocks: options.footprintLocks,
      rounds: options.rounds,
      mode: options.mode,
      pin: options.pin,
    };
    const meta = {
      startedAt: new Date().toISOString(),
      machine: await machine(admins[0]),
      options: {
        mode: options.mode,
        rounds: options.rounds,
        durationMs: options.duration,
        memoryCycles: options.memoryCycles,
        scenarios: options.scenarios.map((s) => s.name),
        libraries: options.libraries.map((l) => l.name),
      },
      placement: placed(options.pin, servers),
    };
    const results = Object.fromEntries(
      options.scenarios.map((s) => [
        s.name,
        {
          title: s.title,
          metrics: s.metrics,
          contestants: Object.fromEntries(contestants(s, options.libraries).map((c) => [c.name, []])),
        },
      ]),
    );
    const log = (text) => process.stderr.write(`${text}\n`);
    log(
      `redis-server ${meta.machine.redis} on 127.0.0.1:${ctx.ports.join(', ')}; ${options.mode} mode; ${meta.placement}`,
    );

    const repeated = options.scenarios.filter((s) => !s.once);
    for (let round = 1; round <= options.rounds; round++) {
      for (const scenario of repeated) {
        // A scenario with a placement of its own (parallel-split) runs in it, beside the run's cpu0.
        const moved = scenario.placement !== undefined && options.pin === 'cpu0';
        if (moved) placed(scenario.placement, servers);
        for (const contestant of shuffled(contestants(scenario, options.libraries))) {
          const metrics = await runOne(scenario, contestant, ctx);
          results[scenario.name].contestants[contestant.name].push(metrics);
          log(`[round ${round}/${options.rounds}] ${scenario.name} ${contestant.name}: ${brief(metrics)}`);
        }
        if (moved) placed(options.pin, servers);
      }
    }
    for (const scenario of options.scenarios.filter((s) => s.once)) {
      for (const contestant of contestants(scenario, options.libraries)) {
        const metrics = await runOne(scenario, contestant, ctx);
        results[scenario.name].contestants[contestant.name].push(metrics);
        log(`${scenario.name} ${contestant.name}: ${brief(metrics)}`);
      }
    }
    meta.elapsedSeconds = Math.round((performance.now() - started) / 1000);
    const written = await writeReport(results, meta, {
      out: options.out,
      updateReadme: options.complete && options.mode === 'full' && options.out === DEFAULT_OUT,
    });
    log(`${meta.elapsedSeconds} s; wrote ${written.join(', ')}`);
  } finally {
    await closeAll(replica ? [...admins, replica.admin] : admins);
    await Promise.all([...servers, ...extra].map((s) => s.stop()));
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
