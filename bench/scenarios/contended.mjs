import { setTimeout as sleep } from 'node:timers/promises';
import { commandStats, commandsSent, countAtServer, serverCpuSeconds } from '../clients.mjs';
import { countingPassMs, cycleFor, LOCK_OPTIONS, now, warmupMs, withInstances } from '../harness.mjs';
import { Samples } from '../stats.mjs';

export const WORKERS = 16;
const HOLD_MS = 1;
const KEY = 'bench-contended';

function sum(stats) {
  return Object.values(stats).reduce((a, b) => a + b, 0);
}

/**
 * The 16 workers take turns on KEY for `ms`: each acquires, holds it HOLD_MS (its work), releases,
 * and goes again. A worker whose wait spans the end of the window finishes it, so the longest
 * waits are counted rather than cut off; acquisitions after the window count in `acquisitions`
 * (what the calls and the CPU are divided by) but not in `perWorker` or `handoffs`.
 *
 * `busyMs` is the time inside the window during which some worker held the lock and ran its
 * work: from the moment acquire resolved to the moment the work was done and release was
 * called. It is the union of those spans (overlaps, which must not happen, are not counted twice).
 */
async function contest(locks, ms) {
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
  let busySince = 0;
  let busyMs = 0;
  let stopped = false;

  const start = now();
  const end = start + ms;
  const stop = setTimeout(() => {
    stopped = true;
  }, ms);
  const busy = (from, to) => Math.max(0, Math.min(to, end) - Math.max(from, start));

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
      else busySince = got;
      await sleep(HOLD_MS);
      releasedAt = now();
      if (--holding === 0) busyMs += busy(busySince, releasedAt);
      await lock.release(handle);
    }
  };
  await Promise.all(perWorker.map((_, id) => worker(id)));
  clearTimeout(stop);
  return { perWorker, waits, gaps, acquisitions, handoffs, timeouts, overlaps, busyMs };
}

/** The figures of a contended run, in the order the tables show them (other contended scenarios pick from them). */
export const METRICS = [
  { key: 'handoffsPerSec', label: 'handoffs/s', better: 'higher', digits: 0 },
  { key: 'acquisitionsPerSec', label: 'acquisitions/s', better: 'higher', digits: 0 },
  { key: 'utilization', label: 'lock utilization', better: 'higher', digits: 3 },
  { key: 'handoffGapP50', label: 'handoff gap p50 ms', better: 'lower', digits: 2 },
  { key: 'waitP50', label: 'wait p50 ms', better: 'lower', digits: 2 },
  { key: 'waitP99', label: 'wait p99 ms', better: 'lower', digits: 1 },
  { key: 'waitMax', label: 'wait max ms', better: 'lower', digits: 0 },
  { key: 'minPerWorker', label: 'fewest per worker', better: 'higher', digits: 0 },
  { key: 'leastServedShare', label: 'least-served ÷ fair share', better: 'higher', digits: 2 },
  { key: 'callsPerAcquisition', label: 'calls/acq', better: 'lower', digits: 2 },
  { key: 'serverRoundTripsPerAcquisition', label: 'round trips/acq (server)', better: 'lower', digits: 2 },
  { key: 'serverCommandsPerAcquisition', label: 'server cmds/acq', better: 'lower', digits: 2 },
  { key: 'clientCpuPerAcquisition', label: 'node CPU µs/acq', better: 'lower', digits: 1 },
  { key: 'serverCpuPerAcquisition', label: 'redis CPU µs/acq', better: 'lower', digits: 1 },
  { key: 'timeouts', label: 'timeouts', better: 'lower', digits: 0 },
  { key: 'overlaps', label: 'overlaps', better: 'lower', digits: 0 },
];

/**
 * 16 workers take turns on one key, each holding it 1 ms, through `instances` library
 * instances (1: one app process whose workers share a client; 16: one process per worker).
 *
 * A handoff is an acquisition by a different worker than the last holder: a lock that lets the
 * releasing worker take it straight back scores acquisitions, not handoffs. The handoff gap is
 * from the previous holder calling release to the next worker holding the lock. Utilization is
 * the share of the window during which the lock was held and worked under (1 = never idle).
 * After the timed window, a short untimed one under MONITOR counts what the server received.
 */
export function contended({ name, title, instances }) {
  return {
    name,
    title,
    metrics: METRICS,
    // With one instance, leasehold's functions with the least waiting around them run beside the
    // libraries (peers.mjs): every waiter is that instance's, and a release's reply hands it the lock.
    references: instances === 1,
    run(library, ctx) {
      return withInstances(library, ctx.port, instances, async (locks) => {
        await Promise.all(locks.map((lock) => cycleFor(lock, KEY, warmupMs(ctx.duration) / locks.length)));

        await ctx.admin.config('RESETSTAT');
        const sentBefore = commandsSent();
        const serverCpuBefore = await serverCpuSeconds(ctx.admin);
        const clientCpuBefore = process.cpuUsage();
        const c = await contest(locks, ctx.duration);
        const clientCpu = process.cpuUsage(clientCpuBefore);
        const calls = commandsSent() - sentBefore;
        const serverCpuUs = ((await serverCpuSeconds(ctx.admin)) - serverCpuBefore) * 1e6;
        const serverCommands = sum(await commandStats(ctx.admin));

        const counted = await countAtServer(ctx.admin, () => contest(locks, countingPassMs(ctx.duration)));

        const seconds = ctx.duration / 1000;
        const served = c.perWorker.reduce((a, b) => a + b, 0);
        const fewest = Math.min(...c.perWorker);
        return {
          handoffsPerSec: c.handoffs / seconds,
          acquisitionsPerSec: served / seconds,
          utilization: c.busyMs / ctx.duration,
          handoffGapP50: c.gaps.percentile(50),
          waitP50: c.waits.percentile(50),
          waitP99: c.waits.percentile(99),
          waitMax: c.waits.max(),
          minPerWorker: fewest,
          leastServedShare: served > 0 ? fewest / (served / WORKERS) : 0,
          callsPerAcquisition: calls / c.acquisitions,
          serverRoundTripsPerAcquisition: counted.commands / counted.result.acquisitions,
          serverScriptCommandsPerAcquisition: counted.scripted / counted.result.acquisitions,
          countingPassCallsPerAcquisition: counted.calls / counted.result.acquisitions,
          countedAcquisitions: counted.result.acquisitions,
          serverCommandsPerAcquisition: serverCommands / c.acquisitions,
          clientCpuPerAcquisition: (clientCpu.user + clientCpu.system) / c.acquisitions,
          serverCpuPerAcquisition: serverCpuUs / c.acquisitions,
          timeouts: c.timeouts,
          // Either pass: a second holder is a broken lock whenever it happens.
          overlaps: c.overlaps + counted.result.overlaps,
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
