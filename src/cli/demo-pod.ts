import { Leasehold } from '../leasehold.js';
import { type DemoPlan, type PodEvent, runPod } from './pod.js';
import { connectRedis } from './redis.js';

/** One pod of the multi-process demo: reports its events as JSON lines on stdout. */
export async function demoPod(url: string, pod: string, prefix: string, plan: DemoPlan): Promise<number> {
  const redis = await connectRedis(url);
  const locks = new Leasehold(redis.client, { prefix });
  const report = (e: PodEvent) => process.stdout.write(`${JSON.stringify(e)}\n`);
  report({ type: 'ready', pod, pid: process.pid });
  try {
    await runPod(locks, pod, plan, report);
  } finally {
    await locks.close();
    await redis.close();
  }
  return 0;
}
