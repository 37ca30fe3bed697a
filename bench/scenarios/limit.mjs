import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { HOST } from '../server.mjs';

/** The script a leasehold acquisition runs (SET NX PX + INCR of the fencing counter). */
const LUA = new URL('../../src/store/redis/lua/', import.meta.url);
/** The acquire script as the library loads it: each `-- include: lib/…` line replaced by that file. */
const ACQUIRE_SCRIPT = readFileSync(new URL('acquire.lua', LUA), 'utf8').replace(/^-- include: (\S+)$/gm, (_, path) =>
  readFileSync(new URL(path, LUA), 'utf8').trimEnd(),
);
const CONNECTIONS = 64;
const PIPELINE = 16;
/** Requests per ms of scenario duration: about as long as one library's run at this server's speed. */
const REQUESTS_PER_MS = 40;

function redisBenchmark(args) {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-benchmark', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (text) => {
      out += text;
    });
    child.stderr.setEncoding('utf8').on('data', (text) => {
      out += text;
    });
    child.once('error', reject);
    child.once('close', (code) => {
      // --csv prints a header line, then "command","rps",...
      const row = out.trim().split('\n').at(-1) ?? '';
      const rps = Number(row.split('","')[1]);
      if (code !== 0 || !Number.isFinite(rps)) reject(new Error(`redis-benchmark failed (exit ${code}): ${out}`));
      else resolve(rps);
    });
  });
}

/**
 * What the server itself can do: redis-benchmark (C, 64 connections, 16-deep pipelines) running
 * the acquire script by EVALSHA on random keys, with 1 ms leases so nearly every call takes the
 * acquiring path. A lock cycle is two such calls, so the ceiling in cycles/s is half the rate.
 * The unpipelined rate is shown too: there each connection waits for its reply, which the
 * libraries' loops do not (they share one connection, written back to back).
 */
export default {
  name: 'limit',
  title: `Limit: redis-benchmark EVALSHA of the acquire script, ${CONNECTIONS} connections`,
  contestants: ['redis-benchmark'],
  metrics: [
    { key: 'evalshaPerSec', label: `EVALSHA/s (-P ${PIPELINE})`, better: 'higher', digits: 0 },
    { key: 'cycleCeiling', label: 'cycles/s ceiling (½)', better: 'higher', digits: 0 },
    { key: 'evalshaUnpipelinedPerSec', label: 'EVALSHA/s, unpipelined', better: 'higher', digits: 0 },
  ],
  async run(_contestant, ctx) {
    const sha = await ctx.admin.script('LOAD', ACQUIRE_SCRIPT);
    const requests = Math.max(10_000, Math.round(ctx.duration * REQUESTS_PER_MS));
    // The keys and arguments of an uncontended first attempt (see the header of acquire.lua).
    const keys = ['', ':fence', ':waiters', ':alive', ':reserved'].map((suffix) => `bench:{__rand_int__}${suffix}`);
    // owner, ttl, minimum token, queue mode (join), instance, counter retention, waiter liveness
    const command = [
      'EVALSHA',
      sha,
      String(keys.length),
      ...keys,
      'owner',
      '1',
      '0',
      '1',
      'bench',
      '604800000',
      '6000',
    ];
    const common = ['-h', HOST, '-p', String(ctx.port), '-c', String(CONNECTIONS), '-r', '100000', '--csv'];
    const evalshaPerSec = await redisBenchmark([
      ...common,
      '-P',
      String(PIPELINE),
      '-n',
      String(requests * 3),
      ...command,
    ]);
    const evalshaUnpipelinedPerSec = await redisBenchmark([...common, '-n', String(requests), ...command]);
    return { evalshaPerSec, cycleCeiling: evalshaPerSec / 2, evalshaUnpipelinedPerSec };
  },
};
