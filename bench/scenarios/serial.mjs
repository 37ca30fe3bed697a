import { commandsSent, countAtServer } from '../clients.mjs';
import { countingPassMs, cpuDuring, cycleFor, timedCycles, warmupMs, withLibrary } from '../harness.mjs';

const KEY = 'bench-serial';

/**
 * One loop, one key: the latency floor of an uncontended acquisition, and what it costs per cycle.
 * After the timed pass, a short untimed one under MONITOR counts what the server received.
 */
export default {
  name: 'serial',
  references: true,
  title: 'Serial: one loop, acquire + release on one key',
  metrics: [
    { key: 'cyclesPerSec', label: 'cycles/s', better: 'higher', digits: 0 },
    { key: 'acquireP50', label: 'acquire p50 ms', better: 'lower', digits: 3 },
    { key: 'acquireP99', label: 'acquire p99 ms', better: 'lower', digits: 3 },
    { key: 'callsPerCycle', label: 'calls/cycle', better: 'lower', digits: 2 },
    { key: 'serverRoundTripsPerCycle', label: 'round trips/cycle (server)', better: 'lower', digits: 2 },
    { key: 'clientCpuPerCycle', label: 'node CPU µs/cycle', better: 'lower', digits: 1 },
    { key: 'serverCpuPerCycle', label: 'redis CPU µs/cycle', better: 'lower', digits: 1 },
    { key: 'scriptPerCycle', label: 'of which in scripts µs/cycle', better: 'lower', digits: 1 },
  ],
  run(library, ctx) {
    return withLibrary(library, [ctx.port], async (lock) => {
      await cycleFor(lock, KEY, warmupMs(ctx.duration));
      const sentBefore = commandsSent();
      const { result, clientCpuUs, serverCpuUs, scriptUs } = await cpuDuring(ctx.admin, () =>
        timedCycles(lock, KEY, ctx.duration),
      );
      const callsPerCycle = (commandsSent() - sentBefore) / result.cycles;
      const counted = await countAtServer(ctx.admin, () => cycleFor(lock, KEY, countingPassMs(ctx.duration)));
      return {
        ...result,
        callsPerCycle,
        serverRoundTripsPerCycle: counted.commands / counted.result,
        serverScriptCommandsPerCycle: counted.scripted / counted.result,
        countingPassCallsPerCycle: counted.calls / counted.result,
        countedCycles: counted.result,
        clientCpuPerCycle: clientCpuUs / result.cycles,
        serverCpuPerCycle: serverCpuUs / result.cycles,
        scriptPerCycle: scriptUs / result.cycles,
      };
    });
  },
};
