import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold } from 'leasehold';

const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const locks = new Leasehold(client);

// Runs on one instance at a time; the lease is extended while the work runs.
const result = await locks.withLock('invoice:42', async (signal, lock) => {
  console.log(`holding ${lock.name} with fencing token ${lock.fencingToken}`);
  await sleep(100, undefined, { signal }); // the work: it is aborted if the lease is lost
  return 'invoice 42 sent';
});
console.log(result);

// leasehold first, then your own client: nothing is left open, so the process exits.
await locks.close();
await client.quit();
