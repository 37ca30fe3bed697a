// Graceful shutdown on SIGTERM (what Kubernetes, systemd and `docker stop` send). The worker holds a
// lock with a long lease (60 s) for a long export; a second instance started meanwhile waits for it.
// On SIGTERM the worker stops the work, which releases the lock, so that the waiting instance takes
// the export over at once rather than after the lease; then it stops its scheduled job, closes
// leasehold and its own Redis client, and exits 0. A SIGTERM while waiting ends the wait.
//
// Without a clean shutdown a killed holder's lock stays taken until its ttl runs out. REDIS_URL:
// the locks on Redis; without it, on a MemoryStore.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const shutdown = new AbortController();
process.once('SIGTERM', () => shutdown.abort(new Error('SIGTERM')));
process.once('SIGINT', () => shutdown.abort(new Error('SIGINT')));

const client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : undefined;
const locks = new Leasehold(client ?? new MemoryStore());

// A job on the scheduler too: stopping it waits for a run in progress.
const cleanup = locks.schedule('exports:cleanup', 60_000, async () => {});

/** The export, in batches; it stops between two batches, or within one, once `signal` aborts. */
async function exportAll(signal, lock) {
  console.log(`holding exports:nightly with token ${lock.fencingToken}`);
  for (;;) await sleep(200, undefined, { signal }); // one batch
}

try {
  await locks.withLock('exports:nightly', { ttl: 60_000, wait: 60_000, signal: shutdown.signal }, (signal, lock) =>
    // Stop when the lease is lost, or when the process is asked to stop.
    exportAll(AbortSignal.any([signal, shutdown.signal]), lock),
  );
} catch (error) {
  if (!shutdown.signal.aborted) throw error;
  // withLock released the lock as the work ended: another instance can take it now.
  console.log(`${shutdown.signal.reason.message}: stopped the export and released exports:nightly`);
}
await cleanup.stop();
await locks.close();
await client?.quit();
console.log('closed; exiting');
