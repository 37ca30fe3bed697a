import { contended, fairness, HOLD_MS, WORKERS } from './holders.mjs';

const WRITERS = 4;

/**
 * A read-write lock under 16 workers, 12 readers and 4 writers, each holding 1 ms: leasehold's
 * `mode: 'shared'` / `'exclusive'` beside redis-semaphore's Mutex for every worker (it has no
 * read-write lock, so its readers wait for one another). `overlaps` counts a writer admitted
 * beside anyone (must be 0); the writer columns show whether writers starve under readers.
 */
export default {
  name: 'rwlock',
  title: `Read-write lock: ${WORKERS - WRITERS} readers and ${WRITERS} writers on one key, each holds it ${HOLD_MS} ms, one shared client`,
  contestants: ['leasehold', 'redis-semaphore'],
  metrics: [
    { key: 'acquisitionsPerSec', label: 'acquisitions/s', better: 'higher', digits: 0 },
    { key: 'readsPerSec', label: 'reads/s', better: 'higher', digits: 0 },
    { key: 'writesPerSec', label: 'writes/s', better: 'higher', digits: 0 },
    { key: 'meanHeld', label: 'mean holders', better: 'higher', digits: 2 },
    { key: 'readerWaitP99', label: 'reader wait p99 ms', better: 'lower', digits: 1 },
    { key: 'writerWaitP50', label: 'writer wait p50 ms', better: 'lower', digits: 2 },
    { key: 'writerWaitP99', label: 'writer wait p99 ms', better: 'lower', digits: 1 },
    { key: 'writerWaitMax', label: 'writer wait max ms', better: 'lower', digits: 0 },
    { key: 'fewestWrites', label: 'fewest per writer', better: 'higher', digits: 0 },
    { key: 'callsPerAcquisition', label: 'calls/acq', better: 'lower', digits: 2 },
    { key: 'serverCpuPerAcquisition', label: 'redis CPU µs/acq', better: 'lower', digits: 1 },
    { key: 'timeouts', label: 'timeouts', better: 'lower', digits: 0 },
    { key: 'overlaps', label: 'overlaps', better: 'lower', digits: 0 },
  ],
  async run(contestant, ctx) {
    const roles = Array.from({ length: WORKERS }, (_, i) =>
      i % (WORKERS / WRITERS) === 0
        ? { name: 'writer', options: { mode: 'exclusive' } }
        : { name: 'reader', options: { mode: 'shared' } },
    );
    // A writer is admitted with nobody holding; a reader with no writer holding (any holder, for a mutex).
    const mutexOnly = contestant.name !== 'leasehold';
    const admits = (open, role) =>
      (open.get('writer') ?? 0) === 0 && (role === 'reader' && !mutexOnly ? true : (open.get('reader') ?? 0) === 0);
    const c = await contended(contestant, ctx, roles, admits);
    const writers = roles.flatMap((r, i) => (r.name === 'writer' ? [i] : []));
    const count = (ids) => ids.reduce((sum, i) => sum + c.perWorker[i], 0);
    const readers = roles.flatMap((r, i) => (r.name === 'reader' ? [i] : []));
    const [r, w] = [c.waits.get('reader'), c.waits.get('writer')];
    return {
      acquisitionsPerSec: c.perWorker.reduce((a, b) => a + b, 0) / c.seconds,
      readsPerSec: count(readers) / c.seconds,
      writesPerSec: count(writers) / c.seconds,
      meanHeld: c.meanHeld,
      readerWaitP99: r.percentile(99),
      writerWaitP50: w.percentile(50),
      writerWaitP99: w.percentile(99),
      writerWaitMax: w.max(),
      fewestWrites: fairness(c.perWorker, writers).fewest,
      callsPerAcquisition: c.callsPerAcquisition,
      serverCpuPerAcquisition: c.serverCpuPerAcquisition,
      timeouts: c.timeouts,
      overlaps: c.broken,
      mostAtOnce: c.most,
    };
  },
};
