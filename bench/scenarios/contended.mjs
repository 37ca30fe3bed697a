import { setTimeout as sleep } from 'node:timers/promises';
import { commandStats, commandsSent, serverCpuSeconds } from '../clients.mjs';
import { cycleFor, LOCK_OPTIONS, now, warmupMs, withInstances } from '../harness.mjs';
import { Samples } from '../stats.mjs';

export const WORKERS = 16;
const HOLD_MS = 1;
const KEY = 'bench-contended';

function sum(stats) {
  return Object.values(stats).reduce((a, b) => a + b, 0);
}

/**
 * 16 workers take turns on one key, each holding it 1 ms, through `instances` library
 * instances (1: one app process whose workers share a client; 16: one process per worker).
 * A worker whose wait spans the end of the window finishes it, so the longest waits are
 * counted rather than cut off.
 *
 * A handoff is an acquisition by a different worker than the last holder: a lock that lets the
 * releasing worker take it straight back scores acquisitions, not handoffs. The handoff gap is
 * from the previous holder calling release to the next worker holding the lock.
 */
export function contended({ name, title, instances }) {
  return {
    name,
    title,
    metrics: [
      { key: 'handoffsPerSec', label: 'handoffs/s', better: 'higher', digits: 0 },
      { key: 'acquisitionsPerSec', label: 'acquisitions/s', better: 'higher', digits: 0 },
      { key: 'handoffGapP50', label: 'handoff gap p50 ms', better: 'lower', digits: 2 },
      { key: 'waitP50', label: 'wait p50 ms', better: 'lower', digits: 2 },
      { key: 'waitP99', label: 'wait p99 ms', better: 'lower', digits: 1 },
      { key: 'waitMax', label: 'wait max ms', better: 'lower', digits: 0 },
      { key: 'minPerWorker', label: 'fewest per worker', better: 'higher', digits: 0 },
      { key: 'callsPerAcquisition', label: 'calls/acq', better: 'lower', digits: 2 },
      { key: 'serverCommandsPerAcquisition', label: 'server cmds/acq', better: 'lower', digits: 2 },
      { key: 'serverCpuPerAcquisition', label: 'redis CPU µs/acq', better: 'lower', digits: 1 },
      { key: 'timeouts', label: 'timeouts', better: 'lower', digits: 0 },
      { key: 'overlaps', label: 'overlaps', better: 'lower', digits: 0 },
    ],
    run(library, ctx) {
      return withInstances(library, ctx.port, instances, async (locks) => {
        await Promise.all(locks.map((lock) => cycleFor(lock, KEY, warmupMs(ctx.duration) / locks.length)));
        const perWorker = new Array(WORKERS).fill(0);
        const waits = new Samples();
        const gaps = new Samples();
        let acquisitions = 0;
        let handoffs = 0;
        let lastHolder = -1;
        let releasedAt = 0;
        let timeouts = 0;
        let holding = 0;
        let overlaps = 0;
        let stopped = false;

        await ctx.admin.config('RESETSTAT');
        const sentBefore = commandsSent();
        const cpuBefore = await serverCpuSeconds(ctx.admin);
        const end = now() + ctx.duration;
        const stop = setTimeout(() => {
          stopped = true;
        }, ctx.duration);

        const worker = async (id) => {
          const lock = locks[id % locks.length];
          while (!stopped) {
            const asked = now();
            let handle;
            try {
              handle = await lock.acquire(KEY, LOCK_OPTIONS);
            } catch {
              timeouts++;
              continue;
            }
            const got = now();
            waits.add(got - asked);
            acquisitions++;
            if (lastHolder !== id && lastHolder >= 0) {
              gaps.add(got - releasedAt);
              if (got <= end) handoffs++;
            }
            lastHolder = id;
            if (got <= end) perWorker[id]++;
            // A second holder at once would mean the lock is broken; count it rather than trust it.
            if (++holding > 1) overlaps++;
            await sleep(HOLD_MS);
            holding--;
            releasedAt = now();
            await lock.release(handle);
          }
        };
        await Promise.all(perWorker.map((_, id) => worker(id)));
        clearTimeout(stop);

        const calls = commandsSent() - sentBefore;
        const serverCpuUs = ((await serverCpuSeconds(ctx.admin)) - cpuBefore) * 1e6;
        const serverCommands = sum(await commandStats(ctx.admin));
        const seconds = ctx.duration / 1000;
        return {
          handoffsPerSec: handoffs / seconds,
          acquisitionsPerSec: perWorker.reduce((a, b) => a + b, 0) / seconds,
          handoffGapP50: gaps.percentile(50),
          waitP50: waits.percentile(50),
          waitP99: waits.percentile(99),
          waitMax: waits.max(),
          minPerWorker: Math.min(...perWorker),
          callsPerAcquisition: calls / acquisitions,
          serverCommandsPerAcquisition: serverCommands / acquisitions,
          serverCpuPerAcquisition: serverCpuUs / acquisitions,
          timeouts,
          overlaps,
        };
      });
    },
  };
}

export default contended({
  name: 'contended',
  title: `Contended: ${WORKERS} workers on one key, each holds it ${HOLD_MS} ms, one shared client`,
  instances: 1,
});
