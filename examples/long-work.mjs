// Work that outlasts its lease, and what happens when the lease is lost. The watchdog extends the
// lease every ttl/3 while the work runs; the lock's signal goes to everything the work awaits, here
// a download (`fetch`) and a database query, so that they stop the moment the lease is lost.
//
// 1. A 2.5 s download and query under a 1 s lease: the watchdog keeps the lock; both finish.
// 2. The same, but the process stalls for 1.5 s (a long GC pause, blocking CPU work, SIGSTOP):
//    nothing extends the lease meanwhile, so on waking the lock is lost and its signal aborts the
//    download and cancels the query, which was still running on the server.
//
// The download comes from a local HTTP server this program starts. With DATABASE_URL the query is
// `pg_sleep` on PostgreSQL, cancelled with pg_cancel_backend; without it, a cancellable local
// timer stands in for it. REDIS_URL: the locks on Redis; without it, on a MemoryStore.
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const WORK_MS = 2_500;
const TTL_MS = 1_000;

// A slow endpoint: it streams a chunk every 100 ms for ?ms= milliseconds.
const server = createServer(async (request, response) => {
  const ms = Number(new URL(request.url, 'http://x').searchParams.get('ms'));
  response.writeHead(200, { 'content-type': 'text/plain' });
  for (let sent = 0; sent < ms && !response.destroyed; sent += 100) {
    response.write('.');
    await sleep(100);
  }
  response.end();
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const downloadUrl = `http://127.0.0.1:${server.address().port}/export`;

async function download(signal) {
  const response = await fetch(`${downloadUrl}?ms=${WORK_MS}`, { signal });
  return (await response.text()).length; // reading the body is aborted by the signal too
}

let pool;
if (process.env.DATABASE_URL) {
  const { default: pg } = await import('pg');
  pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
}

/** A query the signal can cancel: on abort, pg_cancel_backend from another connection of the pool. */
async function query(signal) {
  if (!pool) {
    await sleep(WORK_MS, undefined, { signal }); // stands in for the query
    return 'local operation';
  }
  const connection = await pool.connect();
  try {
    const { rows } = await connection.query('SELECT pg_backend_pid() AS pid');
    const cancel = () => pool.query('SELECT pg_cancel_backend($1)', [rows[0].pid]).catch(() => {});
    signal.addEventListener('abort', cancel, { once: true });
    try {
      await connection.query('SELECT pg_sleep($1)', [WORK_MS / 1_000]);
    } finally {
      signal.removeEventListener('abort', cancel);
    }
    return 'pg_sleep';
  } finally {
    connection.release();
  }
}

const client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : undefined;
const locks = new Leasehold(client ?? new MemoryStore());
let extensions = 0;
locks.on('extended', () => extensions++);

// 1. The watchdog keeps a 1 s lease for 2.5 s of work.
await locks.withLock('report:monthly', { ttl: TTL_MS }, async (signal, lock) => {
  const started = performance.now();
  const [bytes, ran] = await Promise.all([download(signal), query(signal)]);
  const seconds = ((performance.now() - started) / 1_000).toFixed(1);
  console.log(`finished: ${bytes} bytes and the ${ran} in ${seconds} s under a ${TTL_MS} ms lease`);
  console.log(`the watchdog extended it ${extensions} times; token ${lock.fencingToken}, still held: ${!signal.aborted}`);
});

// 2. A stall longer than the lease: the lock is lost, and the work stops with it.
await locks.withLock('report:monthly', { ttl: TTL_MS }, async (signal) => {
  const work = Promise.allSettled([download(signal), query(signal)]);
  await sleep(300);
  const until = performance.now() + 1_500;
  while (performance.now() < until) {} // the stall: the event loop is blocked
  const [fetched, queried] = await work;
  console.log(`lease lost (${signal.reason.reason}): the signal aborted the work`);
  console.log(`fetch: ${fetched.status === 'rejected' ? fetched.reason.name : 'finished'}`);
  const code = pool ? ` (${queried.reason?.code}: ${queried.reason?.message})` : '';
  console.log(`query: ${queried.status === 'rejected' ? `cancelled${code}` : 'finished'}`);
});

server.close();
await pool?.end();
await locks.close();
await client?.quit();
