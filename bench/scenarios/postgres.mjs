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
};

/**
 * A full run times each row 2,000 ms in 7 rounds, whatever the Redis scenarios take: leasehold's
 * rows came out 3–8% dearer against the write in passes of 1,200 ms than of 2,000 ms, run after run.
 */
const FULL = { rounds: 7, duration: 2_000 };

function cycleRun(ctx) {
  if (!process.env.BENCH_POSTGRES_URL && !process.env.LEASEHOLD_PG_BIN && !existsSync('/usr/lib/postgresql')) {
    return Promise.resolve({ unavailable: 'no PostgreSQL server binaries (/usr/lib/postgresql)' });
  }
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-bench-pg-json-'));
  const out = join(dir, 'cycle.json');
  const { rounds, duration } = ctx.mode === 'full' ? FULL : ctx;
  const args = [SCRIPT, '--rounds', String(rounds), '--duration', String(duration), '--json', out];
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [...args, '--pin', ctx.pin], { maxBuffer: 1 << 20 }, (error, _stdout, stderr) => {
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
  contestants: Object.keys(ROWS),
  timeLimitMs: (ctx) =>
    Math.max(ctx.rounds, FULL.rounds) * 4 * (Math.max(ctx.duration, FULL.duration) + 1_000) + 120_000,
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
    ctx.postgresCycle ??= cycleRun(ctx);
    const result = await ctx.postgresCycle;
    if (result.unavailable) return { unavailable: result.unavailable };
    return result.rows[ROWS[contestant.name]];
  },
};
