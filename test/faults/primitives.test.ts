import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, randomPrefix, startRedis, waitFor } from '../harness/index.js';
import { Holder, type HolderMessage } from './child.js';

/**
 * The primitives across processes on a real redis-server: a leader paused past its lease (SIGSTOP)
 * is deposed and exactly one other process leads; acquireAll by two processes over overlapping
 * sets in opposite orders completes without deadlock.
 */
let server: RedisServer;
const holders: Holder[] = [];

beforeAll(async () => {
  server = await startRedis();
});
afterEach(async () => {
  await Promise.all(holders.splice(0).map((h) => h.kill9()));
});
afterAll(async () => {
  await server?.stop();
});

async function holder(prefix: string): Promise<Holder> {
  const h = await Holder.start(server.url, prefix);
  holders.push(h);
  return h;
}

/** Every message of every holder, in arrival order, recorded as it comes (nothing is consumed). */
function record(from: readonly Holder[]): { seen: { from: number; message: HolderMessage }[] } {
  const log = { seen: [] as { from: number; message: HolderMessage }[] };
  from.forEach((h, i) => {
    h.process.on('message', (message: HolderMessage) => {
      log.seen.push({ from: i, message });
    });
  });
  return log;
}

describe('lead across processes', () => {
  it('a leader paused past its lease is deposed, and exactly one other process leads, with a higher token', async () => {
    const prefix = randomPrefix();
    const candidates = [await holder(prefix), await holder(prefix), await holder(prefix)];
    const log = record(candidates);
    const elected = () => log.seen.filter((e) => e.message.event === 'elected');
    for (const c of candidates) c.send({ cmd: 'lead', name: 'leader', ttl: 600 });
    await waitFor(async () => elected().length === 1, { timeout: 10_000 });
    const first = elected()[0] as { from: number; message: HolderMessage };
    candidates[first.from]?.process.kill('SIGSTOP');
    // The lease runs out while the leader is frozen: one other candidate is elected.
    await waitFor(async () => elected().length === 2, { timeout: 10_000 });
    const second = elected()[1] as { from: number; message: HolderMessage };
    expect(second.from).not.toBe(first.from);
    expect(second.message.fencingToken as number).toBeGreaterThan(first.message.fencingToken as number);
    // The remaining candidate stays a candidate while the new leader holds the lease.
    await sleep(1_500);
    expect(elected()).toHaveLength(2);
    candidates[first.from]?.process.kill('SIGCONT');
    // Woken, the old leader learns at once that its lease is gone: deposed, reason lost.
    await waitFor(async () => log.seen.some((e) => e.from === first.from && e.message.event === 'deposed'), {
      timeout: 5_000,
    });
    const deposed = log.seen.find((e) => e.from === first.from && e.message.event === 'deposed');
    expect(deposed?.message).toMatchObject({ reason: 'lost' });
    expect(elected()).toHaveLength(2);
  });
});

describe('acquireAll across processes', () => {
  it('two processes over overlapping sets in opposite orders both finish every round', async () => {
    const prefix = randomPrefix();
    const [a, b] = [await holder(prefix), await holder(prefix)];
    a.send({ cmd: 'acquireAll', names: ['x:1', 'x:2', 'x:3'], rounds: 25, wait: 10_000, ttl: 2_000 });
    b.send({ cmd: 'acquireAll', names: ['x:3', 'x:2', 'x:1'], rounds: 25, wait: 10_000, ttl: 2_000 });
    const [doneA, doneB] = await Promise.all([a.next(20_000), b.next(20_000)]);
    expect(doneA).toEqual({ event: 'done', rounds: 25 });
    expect(doneB).toEqual({ event: 'done', rounds: 25 });
  });
});
