import { commandsSent, countAtServer } from '../clients.mjs';
import { countingPassMs, cpuDuring, cycleFor, now, warmupMs, withLibrary } from '../harness.mjs';

const LOOPS = 64;

/**
 * 64 concurrent loops on distinct keys over one client (as one app process would run them):
 * throughput when nothing contends, bounded by client CPU and round trips, not by waiting.
 * After the timed pass, a short untimed one under MONITOR counts what the server received.
 */
export default {
  name: 'parallel',
  references: true,
  title: `Parallel: ${LOOPS} concurrent loops on distinct keys, one client`,
  metrics: [
    { key: 'cyclesPerSec', label: 'cycles/s', better: 'higher', digits: 0 },
    { key: 'callsPerCycle', label: 'calls/cycle', better: 'lower', digits: 2 },
    { key: 'serverRoundTripsPerCycle', label: 'round trips/cycle (server)', better: 'lower', digits: 2 },
    { key: 'clientCpuPerCycle', label: 'node CPU µs/cycle', better: 'lower', digits: 1 },
    { key: 'serverCpuPerCycle', label: 'redis CPU µs/cycle', better: 'lower', digits: 1 },
    { key: 'scriptPerCycle', label: 'of which in scripts µs/cycle', better: 'lower', digits: 1 },
  ],
  async run(library, ctx) {
    return withLibrary(library, [ctx.port], async (lock) => {
      const keys = Array.from({ length: LOOPS }, (_, i) => `bench-parallel-${i}`);
      await Promise.all(keys.map((key) => cycleFor(lock, key, warmupMs(ctx.duration))));
      const all = (ms) => Promise.all(keys.map((key) => cycleFor(lock, key, ms)));
      const total = (counts) => counts.reduce((a, b) => a + b, 0);
      const sentBefore = commandsSent();
      const start = now();
      const {
        result: counts,
        clientCpuUs,
        serverCpuUs,
        scriptUs,
      } = await cpuDuring(ctx.admin, () => all(ctx.duration));
      const elapsed = (now() - start) / 1000;
      const cycles = total(counts);
      const callsPerCycle = (commandsSent() - sentBefore) / cycles;
      const counted = await countAtServer(ctx.admin, () => all(countingPassMs(ctx.duration)));
      const countedCycles = total(counted.result);
      return {
        cyclesPerSec: cycles / elapsed,
        callsPerCycle,
        serverRoundTripsPerCycle: counted.commands / countedCycles,
        serverScriptCommandsPerCycle: counted.scripted / countedCycles,
        countingPassCallsPerCycle: counted.calls / countedCycles,
        countedCycles,
        clientCpuPerCycle: clientCpuUs / cycles,
        serverCpuPerCycle: serverCpuUs / cycles,
        scriptPerCycle: scriptUs / cycles,
      };
    });
  },
};
