// One program on every backend: only the argument to `new Leasehold(…)` differs.
//   BACKEND=memory | redis | postgres | etcd   BACKEND_URL=redis://… | postgres://… | http://…
import { Leasehold, MemoryStore } from 'leasehold';

const kind = process.env.BACKEND ?? 'memory';
const { client, close } = await open(kind, process.env.BACKEND_URL);
const locks = new Leasehold(client, { prefix: `same-program-${process.pid}` });

// A mutex: one holder at a time, each with a higher fencing token than the one before.
const tokens = [];
for (let i = 0; i < 3; i++) {
  await locks.withLock('invoice:42', async (_signal, lock) => tokens.push(lock.fencingToken));
}
// A held lock is not taken twice.
const held = await locks.acquire('report');
const second = await locks.tryWithLock('report', () => 'ran twice');
await held.release();
// A scheduled job's tick runs once, however many times it is asked for.
const tick = Date.UTC(2026, 0, 1);
const first = await locks.runOnce('nightly', () => 'ran', { tick });
const again = await locks.runOnce('nightly', () => 'ran again', { tick });

console.log(
  JSON.stringify({
    increasing: tokens.every((t, i) => i === 0 || t > tokens[i - 1]),
    second,
    first,
    again,
  }),
);
await locks.close();
await close();

async function open(backend, url) {
  if (backend === 'memory') return { client: new MemoryStore(), close: async () => {} };
  if (backend === 'redis') {
    const { Redis } = await import('ioredis');
    const redis = new Redis(url);
    return { client: redis, close: () => redis.quit() };
  }
  if (backend === 'postgres') {
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({ connectionString: url });
    return { client: pool, close: () => pool.end() };
  }
  if (backend === 'etcd') {
    const { Etcd3 } = await import('etcd3');
    const etcd = new Etcd3({ hosts: url });
    return { client: etcd, close: async () => etcd.close() };
  }
  throw new Error(`unknown BACKEND ${backend}`);
}
