import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../postgres-cycle.mjs', import.meta.url));
/** postgres-cycle.mjs's rows, as this scenario names them. */
const ROWS = {
  'one write': 'one write',
  'one write (pg.Pool)': 'one write (pool)',
  'leasehold (pg.Client)': 'leasehold (client)',
  'leasehold (pg.Pool)': 'leasehold (pool)',
  "leasehold's statements (pg.Client, floor)": "leasehold's statements (client)",
  "leasehold's statements (pg.Pool, floor)": "leasehold's statements (pool)",
};
/**
 * The placements the rows are measured in, each a run of postgres-cycle.mjs of its own: the run's
 * (node and the server on CPU 0), then node and the server on CPUs of their own (`--pin split`), as
 * an application and its database on machines of their own. The second's rows end with SPLIT.
 */
export const SPLIT = ', CPUs apart';

/**
 * A full run times each row 2,000 ms in 7 rounds, whatever the Redis scenarios take: leasehold's
 * rows came out 3–8% dearer against the write in passes of 1,200 ms than of 2,000 ms, run after run.
 */
const FULL = { rounds: 7, duration: 2_000 };

function cycleRun(ctx, pin) {
  if (!process.env.BENCH_POSTGRES_URL && !process.env.LEASEHOLD_PG_BIN && !existsSync('/usr/lib/postgresql')) {
    return Promise.resolve({ unavailable: 'no PostgreSQL server binaries (/usr/lib/postgresql)' });
  }
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-bench-pg-json-'));
  const out = join(dir, 'cycle.json');
  const { rounds, duration } = ctx.mode === 'full' ? FULL : ctx;
  const args = [SCRIPT, '--rounds', String(rounds), '--duration', String(duration), '--json', out];
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [...args, '--pin', pin], { maxBuffer: 1 << 20 }, (error, _stdout, stderr) => {
      try {
        if (error) reject(new Error(`postgres-cycle.mjs failed: ${stderr.trim().split('\n').pop() || error.message}`));
        else resolve(JSON.parse(readFileSync(out, 'utf8')));
      } catch (parseError) {
        reject(parseError);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

/**
 * PostgreSQL's serial cycle beside one write on the same server (bench/postgres-cycle.mjs, on a
 * server of its own, its rows interleaved in every round). The rows are measured together, in one
 * run for the scenario: each contestant reads its row from it.
 */
export default {
  name: 'postgres',
  title: 'PostgreSQL: one loop, acquire + release on one name, against one write on the same server',
  once: true,
  contestants: [...Object.keys(ROWS), ...Object.keys(ROWS).map((name) => name + SPLIT)],
  // A contestant waits for one run of postgres-cycle.mjs at most: its placement's, six rows a round.
  timeLimitMs: (ctx) =>
    Math.max(ctx.rounds, FULL.rounds) * 6 * (Math.max(ctx.duration, FULL.duration) + 1_000) + 120_000,
  metrics: [
    { key: 'rate', label: 'ops/s', better: 'higher', digits: 0 },
    { key: 'p50', label: 'p50 µs', better: 'lower', digits: 0 },
    { key: 'nodeCpu', label: 'node CPU µs/op', better: 'lower', digits: 1 },
    { key: 'serverCpu', label: 'server CPU µs/op', better: 'lower', digits: 1 },
    { key: 'ratio', label: 'op ÷ one write', better: 'lower', digits: 2 },
    { key: 'cpuRatio', label: 'CPU ÷ one write', better: 'lower', digits: 2 },
    { key: 'same', label: '÷ write, same backend', better: 'lower', digits: 2 },
  ],
  async run(contestant, ctx) {
    const split = contestant.name.endsWith(SPLIT);
    if (split && ctx.pin !== 'cpu0') {
      return { unavailable: `measured on CPUs apart only beside --pin cpu0 (this run: ${ctx.pin})` };
    }
    ctx.postgresCycle ??= {};
    const pin = split ? 'split' : ctx.pin;
    ctx.postgresCycle[pin] ??= cycleRun(ctx, pin);
    const result = await ctx.postgresCycle[pin];
    if (result.unavailable) return { unavailable: result.unavailable };
    return result.rows[ROWS[split ? contestant.name.slice(0, -SPLIT.length) : contestant.name]];
  },
};
