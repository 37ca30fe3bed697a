// A process taking turns on a semaphore or a read-write lock, driven over IPC, so a test can kill -9
// it while it holds. It reports every section it held: when it entered and left (wall clock in ms,
// on CLOCK_MONOTONIC, which every process of the machine shares: performance.timeOrigin is taken per
// process and can be off by a millisecond or more, more than a hand-off takes), whether its lease was still valid when it left,
// and its fencing token.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold } from '../../dist/index.js';

const [url, prefix, name, kind, limit, hold, ttl] = process.argv.slice(2);
const client = new Redis(url, { maxRetriesPerRequest: 1 });
client.on('error', () => {});
const locks = new Leasehold(client, { prefix });
const options = kind === 'semaphore' ? { limit: Number(limit) } : { mode: kind === 'reader' ? 'shared' : 'exclusive' };
const wall = () => Number(process.hrtime.bigint()) / 1e6;
let stopped = false;

process.on('message', async (msg) => {
  if (msg.cmd === 'stop') stopped = true;
});

process.send({ event: 'ready' });
try {
  while (!stopped) {
    const lock = await locks.acquire(name, { ...options, ttl: Number(ttl), wait: 30_000 });
    const enter = wall();
    process.send({ event: 'entered' });
    await sleep(Number(hold));
    const exit = wall();
    const valid = lock.expiresIn() > 0;
    process.send({ event: 'section', kind, enter, exit, valid, fencingToken: lock.fencingToken });
    await lock.release();
  }
  await locks.close();
  await client.quit();
  process.send({ event: 'done' }, () => process.exit(0));
} catch (error) {
  process.send({ event: 'error', message: String(error) }, () => process.exit(1));
}
