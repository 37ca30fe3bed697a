import { cycleFor, timedCycles, warmupMs, withLibrary } from '../harness.mjs';

export const NODES = 5;
const KEY = 'bench-redlock';

/** A library that has no Redlock (yet) says so in its constructor; that is "n/a", not a failure. */
const NOT_AVAILABLE = /not available/i;

/** Redlock over 5 independent masters: one serial loop, the cost of a quorum acquisition. */
export default {
  name: 'redlock',
  title: `Redlock: ${NODES} independent redis-servers, one loop, acquire + release on one key`,
  nodes: NODES,
  // 'baseline' (LEASEHOLD_BASELINE, see peers.mjs) when it is given.
  libraries: [
    'leasehold',
    'baseline',
    'redlock',
    'redis-semaphore',
    "leasehold's functions (floor)",
    'one key per lock (floor)',
  ],
  metrics: [
    { key: 'cyclesPerSec', label: 'cycles/s', better: 'higher', digits: 0 },
    { key: 'acquireP50', label: 'acquire p50 ms', better: 'lower', digits: 3 },
    { key: 'acquireP99', label: 'acquire p99 ms', better: 'lower', digits: 3 },
  ],
  async run(library, ctx) {
    try {
      return await withLibrary(library, ctx.ports.slice(0, NODES), async (lock) => {
        await cycleFor(lock, KEY, warmupMs(ctx.duration));
        return timedCycles(lock, KEY, ctx.duration);
      });
    } catch (error) {
      if (NOT_AVAILABLE.test(error?.message ?? '')) return { unavailable: error.message };
      throw error;
    }
  },
};
