// node-cron v4 tasks that run once per fire across every instance, with leasehold as node-cron's
// run coordinator: node-cron asks it before each fire of a `distributed` task; the instance that
// claims the fire runs it, with a lease kept alive while it runs, a fencing token and a run history.
// Start it three times against one Redis (REDIS_URL); without REDIS_URL, three coordinators in
// this process share a MemoryStore.
import cron from 'node-cron';
import { Redis } from 'ioredis';
import { Leasehold, MemoryStore } from 'leasehold';

const RUN_FOR_MS = Number(process.env.RUN_FOR_MS ?? 5_000);

function startInstance(backend, instance) {
  const locks = new Leasehold(backend, { instance });
  const coordinator = locks.nodeCronCoordinator();
  const task = cron.schedule(
    '* * * * * *',
    // coordinator.task gives the task (signal, run), like a job of locks.schedule.
    coordinator.task(async (signal, run) => {
      console.log(`fire ${run.tick.toISOString()} ran on ${run.instance} with token ${run.fencingToken}`);
    }),
    {
      name: 'report:node-cron', // the same on every instance: it names the job
      distributed: true,
      runCoordinator: coordinator,
      distributedLease: 10_000, // the run's lease (lockAtMostFor), extended while it runs
    },
  );
  // A fire whose claim close() cut short, as the process stops, is skipped too: not reported.
  task.on('execution:skipped', ({ date, reason }) => {
    if (!stopping) console.log(`fire ${date.toISOString()} skipped on ${instance}: ${reason}`);
  });
  return locks;
}

const redis = process.env.REDIS_URL ? new Redis(process.env.REDIS_URL) : undefined;
const shared = new MemoryStore(); // for the three in-process instances, without Redis
const instances = redis
  ? [startInstance(redis, process.env.INSTANCE ?? `pid-${process.pid}`)]
  : ['pod-a', 'pod-b', 'pod-c'].map((name) => startInstance(shared, name));

let stopping = false;

setTimeout(async () => {
  stopping = true;
  await cron.shutdown(); // stops every task of this process, waiting for runs in progress
  for (const locks of instances) await locks.close();
  await redis?.quit();
}, RUN_FOR_MS);
