import { runChild, serveChild } from '../child.mjs';
import { closeAll, connect, connectAdmin } from '../clients.mjs';
import { LIBRARIES } from '../peers.mjs';

/** Locks held at once in the full run: enough that a byte per lock shows above the server's noise. */
const HELD = { full: 20_000, quick: 2_000 };
const TTL = 600_000;

/** Buffers the server counts in used_memory that hold no lock: clients' and a replica's, the backlog. */
const TRANSIENT = ['mem_clients_normal', 'mem_clients_slaves', 'mem_replication_backlog', 'mem_aof_buffer'];

/**
 * used_memory less the transient buffers: a replica attached to the server (for the bench's
 * `replicas: 1` row) holds the writes it has not yet taken in an output buffer that would otherwise
 * count, by as much as 50 B per lock depending on when the replica drains it.
 */
async function usedMemory(admin) {
  const info = await admin.info('memory');
  const field = (name) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return TRANSIENT.reduce((used, name) => used - field(name), field('used_memory'));
}

/** Delete what a run left (a released name's fencing counter outlives it), so later runs start level. */
async function sweep(admin, pattern) {
  let cursor = '0';
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    if (keys.length > 0) await admin.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/**
 * The measured side, in a child process of its own (--expose-gc, a heap no other scenario shares):
 * hold `count` locks on distinct names, read the server's used_memory and this process's live heap,
 * release them all, read used_memory again.
 */
async function child(port, count, libraryName) {
  const library = LIBRARIES.find((l) => l.name === libraryName);
  const client = await connect(port);
  const admin = await connectAdmin(port);
  const lock = library.create();
  await lock.setup([client]);
  // Every library holds the same names (each adds its own prefix or suffix), one library at a time.
  const pattern = '*bench-footprint-*';
  await sweep(admin, pattern);
  // One lock taken and released first: the library's scripts are loaded, its caches warm.
  await lock.release(await lock.acquire('bench-footprint-warm', { ttl: TTL, wait: 1_000 }));
  globalThis.gc();
  const server0 = await usedMemory(admin);
  const heap0 = process.memoryUsage().heapUsed;
  const held = [];
  for (let i = 0; i < count; i++) {
    held.push(await lock.acquire(`bench-footprint-${i}`, { ttl: TTL, wait: 1_000 }));
  }
  globalThis.gc();
  const heap1 = process.memoryUsage().heapUsed;
  const server1 = await usedMemory(admin);
  for (const handle of held) await lock.release(handle);
  held.length = 0;
  const server2 = await usedMemory(admin);
  await sweep(admin, pattern);
  await lock.teardown();
  await closeAll([client, admin]);
  return {
    held: count,
    serverBytesPerHeld: (server1 - server0) / count,
    serverBytesPerReleased: (server2 - server0) / count,
    heapBytesPerHeld: (heap1 - heap0) / count,
  };
}

/**
 * What a held lock and a released name cost: the server's memory, and the client's live heap. The
 * fenced floor (bench/fenced-floor.mjs) holds a lock key and a fencing counter under leasehold's key
 * names: the least a lock with a counter beside it keeps, against which the memory bars are read;
 * the retained-token floor keeps a clock token for the retention instead, as leasehold's tokens are.
 */
export default {
  name: 'footprint',
  title: 'Footprint: locks held at once on distinct names, then released',
  once: true,
  timeLimitMs: () => 180_000,
  // 'baseline' (LEASEHOLD_BASELINE, see peers.mjs) when it is given.
  libraries: [
    'leasehold',
    'baseline',
    'redis-semaphore',
    'redlock',
    '@sesamecare-oss/redlock',
    'redlock-universal',
    'fenced functions (floor)',
    'retained token (floor)',
    'one key per lock (floor)',
  ],
  metrics: [
    { key: 'held', label: 'locks held', better: 'higher', digits: 0 },
    { key: 'serverBytesPerHeld', label: 'redis B per held lock', better: 'lower', digits: 0 },
    { key: 'serverBytesPerReleased', label: 'redis B per released name', better: 'lower', digits: 0 },
    { key: 'heapBytesPerHeld', label: 'client heap B per held lock', better: 'lower', digits: 0 },
  ],
  run(library, ctx) {
    return runChild(
      import.meta.url,
      [ctx.port, ctx.footprintLocks, library.name],
      `footprint child for ${library.name}`,
    );
  },
};

serveChild(import.meta.url, (port, count, libraryName) => child(Number(port), Number(count), libraryName));

export { HELD as FOOTPRINT_LOCKS };
