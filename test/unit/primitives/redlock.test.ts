import { afterEach, describe, expect, it } from 'vitest';
import { Leasehold, LockTimeoutError, MemoryStore } from '../../../src/index.js';
import { untilAborted } from '../../harness/index.js';

/** Reentrant holds, acquireAll and lead on Redlock (five independent in-process nodes). */
const instances: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

const nodes = () => [1, 2, 3, 4, 5].map(() => new MemoryStore());

function redlock(stores: MemoryStore[]): Leasehold {
  const locks = new Leasehold(stores);
  instances.push(locks);
  return locks;
}

describe('primitives on Redlock', () => {
  it('a nested reentrant acquisition holds the same quorum lease; another context waits', async () => {
    const stores = nodes();
    const locks = redlock(stores);
    const other = redlock(stores);
    const seen = await locks.withLock('r', { reentrant: true }, async (_signal, outer) => {
      const inner = await locks.acquire('r', { reentrant: true, wait: 0 });
      const refused = await other.acquire('r', { wait: 50 }).catch((e: unknown) => e);
      const result = { same: inner.fencingToken === outer.fencingToken, holds: inner.holdCount, refused };
      await inner.release();
      return result;
    });
    expect(seen.same).toBe(true);
    expect(seen.holds).toBe(2);
    expect(seen.refused).toBeInstanceOf(LockTimeoutError);
    const after = await other.tryAcquire('r');
    expect(after).not.toBeNull();
    await after?.release();
  });

  it('acquireAll takes every name on a quorum, all or nothing', async () => {
    const stores = nodes();
    const [a, b] = [redlock(stores), redlock(stores)];
    const blocker = await b.acquire('m:2');
    await expect(a.acquireAll(['m:1', 'm:2'], { wait: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    const free = await b.tryAcquire('m:1');
    expect(free).not.toBeNull();
    await free?.release();
    await blocker.release();
    const all = await a.acquireAll(['m:1', 'm:2']);
    expect(all.locks.every((l) => l.expiresIn() > 0)).toBe(true);
    expect(await all.release()).toBe(true);
  });

  it('lead elects one candidate and hands on at stop()', async () => {
    const stores = nodes();
    const [a, b] = [redlock(stores), redlock(stores)];
    const hold = (signal: AbortSignal) => untilAborted(signal);
    const first = a.lead('boss', hold);
    await new Promise((resolve) => first.once('elected', resolve));
    const second = b.lead('boss', hold);
    expect(second.isLeader).toBe(false);
    const elected = new Promise((resolve) => second.once('elected', resolve));
    await first.stop();
    await elected;
    expect(second.isLeader).toBe(true);
    await second.stop();
  });
});
