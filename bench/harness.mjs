import { closeAll, connect, scriptMicros, serverCpuSeconds } from './clients.mjs';
import { Samples } from './stats.mjs';

/** Lease and wait budget for every library, in every scenario: long enough that neither runs out. */
export const LOCK_OPTIONS = Object.freeze({ ttl: 10_000, wait: 10_000 });

/** Warm-up before measuring (scripts loaded, JIT settled), as a fraction of the scenario duration. */
const WARMUP_FRACTION = 0.15;
const MAX_WARMUP_MS = 300;

/** The MONITOR counting pass that follows a timed one (see countAtServer): short, and never timed. */
const COUNTING_FRACTION = 0.25;
const MIN_COUNTING_MS = 100;
const MAX_COUNTING_MS = 300;

export const now = () => performance.now();

export function countingPassMs(duration) {
  return Math.min(MAX_COUNTING_MS, Math.max(MIN_COUNTING_MS, duration * COUNTING_FRACTION));
}

export function warmupMs(duration) {
  return Math.min(MAX_WARMUP_MS, duration * WARMUP_FRACTION);
}

/**
 * Run `body(lock, clients)` with a fresh adapter of `library` on fresh ioredis clients, one per
 * port, so that no connection, script cache entry or subscription carries over between runs.
 */
export async function withLibrary(library, ports, body) {
  const clients = await Promise.all(ports.map((port) => connect(port)));
  const lock = library.create();
  try {
    await lock.setup(clients);
    return await body(lock, clients);
  } finally {
    await lock.teardown().catch((error) => console.error(`[${library.name}] teardown: ${error.message}`));
    await closeAll(clients);
  }
}

/**
 * Run `body(locks)` with `count` independent instances of `library` on one server, each on its
 * own fresh client: what `count` app processes would be.
 */
export async function withInstances(library, port, count, body) {
  const made = [];
  try {
    for (let i = 0; i < count; i++) {
      const clients = [await connect(port)];
      const lock = library.create();
      made.push({ lock, clients });
      await lock.setup(clients);
    }
    return await body(made.map((m) => m.lock));
  } finally {
    for (const { lock, clients } of made) {
      await lock.teardown().catch((error) => console.error(`[${library.name}] teardown: ${error.message}`));
      await closeAll(clients);
    }
  }
}

/** Acquire and release `key` in a loop until `ms` have passed; resolves the number of cycles. */
export async function cycleFor(lock, key, ms) {
  const end = now() + ms;
  let cycles = 0;
  while (now() < end) {
    await lock.release(await lock.acquire(key, LOCK_OPTIONS));
    cycles++;
  }
  return cycles;
}

/** One loop on one key for `ms`: cycles/s and the latency of each acquisition. */
export async function timedCycles(lock, key, ms) {
  const latencies = new Samples();
  const start = now();
  const end = start + ms;
  let cycles = 0;
  while (now() < end) {
    const sent = now();
    const handle = await lock.acquire(key, LOCK_OPTIONS);
    latencies.add(now() - sent);
    await lock.release(handle);
    cycles++;
  }
  return {
    cyclesPerSec: cycles / ((now() - start) / 1000),
    acquireP50: latencies.percentile(50),
    acquireP99: latencies.percentile(99),
    cycles,
  };
}

/**
 * CPU spent while `body` runs, in µs: by this process (the library and ioredis) and by the
 * server (INFO cpu), and of the server's the part spent inside scripts (INFO commandstats).
 * Divided by the work done, they say what one cycle costs on each side.
 */
export async function cpuDuring(admin, body) {
  const scriptsBefore = await scriptMicros(admin);
  const serverBefore = await serverCpuSeconds(admin);
  const clientBefore = process.cpuUsage();
  const result = await body();
  const client = process.cpuUsage(clientBefore);
  const serverAfter = await serverCpuSeconds(admin);
  const scriptUs = (await scriptMicros(admin)) - scriptsBefore;
  return {
    result,
    clientCpuUs: client.user + client.system,
    serverCpuUs: (serverAfter - serverBefore) * 1e6,
    scriptUs,
  };
}
