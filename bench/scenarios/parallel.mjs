import { cpuDuring, cycleFor, now, warmupMs, withLibrary } from '../harness.mjs';

const LOOPS = 64;

/**
 * 64 concurrent loops on distinct keys over one client (as one app process would run them):
 * throughput when nothing contends, bounded by client CPU and round trips, not by waiting.
 */
export default {
  name: 'parallel',
  references: true,
  title: `Parallel: ${LOOPS} concurrent loops on distinct keys, one client`,
  metrics: [
    { key: 'cyclesPerSec', label: 'cycles/s', better: 'higher', digits: 0 },
    { key: 'clientCpuPerCycle', label: 'node CPU µs/cycle', better: 'lower', digits: 1 },
    { key: 'serverCpuPerCycle', label: 'redis CPU µs/cycle', better: 'lower', digits: 1 },
  ],
  async run(library, ctx) {
    return withLibrary(library, [ctx.port], async (lock) => {
      const keys = Array.from({ length: LOOPS }, (_, i) => `bench-parallel-${i}`);
      await Promise.all(keys.map((key) => cycleFor(lock, key, warmupMs(ctx.duration))));
      const start = now();
      const {
        result: counts,
        clientCpuUs,
        serverCpuUs,
      } = await cpuDuring(ctx.admin, () => Promise.all(keys.map((key) => cycleFor(lock, key, ctx.duration))));
      const elapsed = (now() - start) / 1000;
      const cycles = counts.reduce((a, b) => a + b, 0);
      return {
        cyclesPerSec: cycles / elapsed,
        clientCpuPerCycle: clientCpuUs / cycles,
        serverCpuPerCycle: serverCpuUs / cycles,
      };
    });
  },
};
