// croner jobs that run once per tick across every instance. croner has no coordinator protocol,
// so the job's callback asks leasehold itself: `runOnce` with the tick, the fire's scheduled time,
// as the run's identity. The instance that claims the tick runs it (with a lease kept alive while
// it runs and a fencing token); the others, and any instance firing late, are told it already ran
// or is running. Start it three times against one Redis (REDIS_URL); without REDIS_URL, three
// instances in this process share a MemoryStore.
import { Cron } from 'croner';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const RUN_FOR_MS = Number(process.env.RUN_FOR_MS ?? 5_000);
/** A fire later than this after its scheduled time is skipped rather than run late. */
const MAX_LATENESS_MS = 5_000;

/** croner calls back at, or just after, the scheduled time: the latest occurrence up to now. */
function scheduledTick(job, now = Date.now()) {
  let tick = job.nextRun(new Date(now - MAX_LATENESS_MS));
  for (let next = tick && job.nextRun(tick); next && next.getTime() <= now; next = job.nextRun(next)) tick = next;
  return tick && tick.getTime() <= now ? tick : null;
}

function startInstance(backend, instance) {
  const locks = new Leasehold(backend, { instance });
  const job = new Cron('* * * * * *', async (self) => {
    const tick = scheduledTick(self);
    if (!tick) return;
    const result = await locks.runOnce(
      'report:croner',
      async (signal, run) => {
        console.log(`tick ${run.tick.toISOString()} ran on ${run.instance} with token ${run.fencingToken}`);
      },
      { tick, lockAtMostFor: 10_000 },
    );
    if (!result.ran) console.log(`tick ${tick.toISOString()} skipped on ${instance}: ${result.reason}`);
  });
  return { job, locks };
}

// With REDIS_URL this process is one instance; without it, it runs three on one MemoryStore.
const client = process.env.REDIS_URL && new Redis(process.env.REDIS_URL);
const store = client || new MemoryStore();
const running = (client ? [process.env.INSTANCE ?? `pid-${process.pid}`] : ['pod-a', 'pod-b', 'pod-c']).map(
  (name) => startInstance(store, name),
);
await sleep(RUN_FOR_MS);
for (const { job, locks } of running) {
  job.stop(); // no more fires
  while (job.isBusy()) await sleep(20); // a run in progress finishes and releases its lock
  await locks.close();
}
if (client) await client.quit();
