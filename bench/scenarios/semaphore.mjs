import { METRICS } from './contended.mjs';
import { contended, fairness, HOLD_MS, WORKERS } from './holders.mjs';

const pick = (...keys) => keys.map((key) => METRICS.find((m) => m.key === key));

const LIMIT = 4;

/**
 * A counting semaphore of 4 permits under 16 workers, each holding a permit 1 ms: leasehold's
 * `limit: 4` beside redis-semaphore's Semaphore. `over limit` counts moments with a fifth holder
 * (must be 0); permit utilization is the mean number of permits held ÷ 4.
 */
export default {
  name: 'semaphore',
  title: `Semaphore: ${WORKERS} workers on one key with ${LIMIT} permits, each holds one ${HOLD_MS} ms, one shared client`,
  contestants: ['leasehold', 'redis-semaphore'],
  metrics: [
    { key: 'acquisitionsPerSec', label: 'acquisitions/s', better: 'higher', digits: 0 },
    { key: 'utilization', label: 'permit utilization', better: 'higher', digits: 3 },
    ...pick(
      'waitP50',
      'waitP99',
      'waitMax',
      'minPerWorker',
      'leastServedShare',
      'callsPerAcquisition',
      'clientCpuPerAcquisition',
      'serverCpuPerAcquisition',
      'timeouts',
    ),
    { key: 'overLimit', label: 'over limit', better: 'lower', digits: 0 },
  ],
  async run(contestant, ctx) {
    const roles = Array.from({ length: WORKERS }, () => ({ name: 'permit', options: { limit: LIMIT } }));
    const c = await contended(contestant, ctx, roles, (open) => (open.get('permit') ?? 0) < LIMIT);
    const waits = c.waits.get('permit');
    const { fewest, share } = fairness(
      c.perWorker,
      roles.map((_, i) => i),
    );
    return {
      acquisitionsPerSec: c.perWorker.reduce((a, b) => a + b, 0) / c.seconds,
      utilization: c.meanHeld / LIMIT,
      waitP50: waits.percentile(50),
      waitP99: waits.percentile(99),
      waitMax: waits.max(),
      minPerWorker: fewest,
      leastServedShare: share,
      callsPerAcquisition: c.callsPerAcquisition,
      clientCpuPerAcquisition: c.clientCpuPerAcquisition,
      serverCpuPerAcquisition: c.serverCpuPerAcquisition,
      timeouts: c.timeouts,
      overLimit: c.broken,
      mostAtOnce: c.most,
    };
  },
};
