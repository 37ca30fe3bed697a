// A cron job that runs once per tick however many instances run it. Start this program three times
// against one Redis (REDIS_URL=redis://… node examples/cron-once.mjs, in three terminals or pods):
// every second exactly one of them runs the tick, the others print why they skipped it. Without
// REDIS_URL, three instances in this process share an in-process MemoryStore instead.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const RUN_FOR_MS = Number(process.env.RUN_FOR_MS ?? 5_000);

/** One instance of the service: a Leasehold and the job scheduled on it. Returns its shutdown. */
function startInstance(backend, instance) {
  const locks = new Leasehold(backend, { instance });
  locks.on('jobSkipped', ({ tick, reason }) => console.log(`tick ${tick.toISOString()} skipped on ${instance}: ${reason}`));
  const job = locks.schedule(
    'report:every-second',
    '* * * * * *',
    async (signal, run) => {
      // The work of the tick; pass run.fencingToken to what it writes, and signal to what it awaits.
      console.log(`tick ${run.tick.toISOString()} ran on ${run.instance} with token ${run.fencingToken}`);
    },
    { lockAtMostFor: 10_000 },
  );
  return async () => {
    await job.stop(); // no new ticks; waits for a run in progress
    await locks.close();
  };
}

// On Redis, one instance per process; without it, three instances share a MemoryStore.
const client = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : null;
const backend = client ?? new MemoryStore();
const names = client ? [process.env.INSTANCE ?? `pid-${process.pid}`] : ['pod-a', 'pod-b', 'pod-c'];
const stops = names.map((name) => startInstance(backend, name));

await sleep(RUN_FOR_MS);
await Promise.all(stops.map((stop) => stop()));
await client?.quit();
