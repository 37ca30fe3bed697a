import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { suiteServer } from '../../faults/safety/fixture.js';
import { randomPrefix } from '../../harness/index.js';

/**
 * The writes the client's socket makes to the kernel (one `_write` or one `_writev` each): how many,
 * and how many commands each carried (ioredis writes each command as one chunk).
 */
function countWrites(client: Redis): { readonly count: number; readonly sizes: number[] } {
  const stream = (client as unknown as { stream: Record<string, (...args: unknown[]) => unknown> }).stream;
  const counter = {
    sizes: [] as number[],
    get count() {
      return this.sizes.length;
    },
  };
  for (const method of ['_write', '_writev'] as const) {
    const original = stream[method];
    if (typeof original !== 'function') continue;
    stream[method] = function (this: unknown, ...args: unknown[]) {
      counter.sizes.push(method === '_writev' ? (args[0] as unknown[]).length : 1);
      return original.apply(this, args);
    };
  }
  return counter;
}

/**
 * On a standalone or Sentinel ioredis client, the calls leasehold makes in one tick after the first
 * go out 16 to a write (the first goes at once): many locks released or taken together cost one
 * system call per 16 rather than one each, and the server starts on the first 16 while the rest are
 * made. The order of commands on the connection stays the order in which they were made, the
 * caller's own commands included.
 */
describe('calls made in the same tick (ioredis)', () => {
  // The suite's admin client is the one leasehold is given: nothing else writes on it here.
  const redis = suiteServer();

  /** A Leasehold on the client, warmed up (its scripts loaded), for `body`; closed after it. */
  async function withLocks(body: (locks: Leasehold, client: Redis) => Promise<void>): Promise<void> {
    const client = redis.admin;
    const locks = new Leasehold(client, { prefix: randomPrefix() });
    try {
      await (await locks.acquire('warm')).release();
      await body(locks, client);
    } finally {
      await locks.close();
    }
  }

  it('50 acquisitions in one tick reach the server the first alone, then 16 to a write, each with its own grant', () =>
    withLocks(async (locks, client) => {
      const writes = countWrites(client);
      const held = await Promise.all(Array.from({ length: 50 }, (_, i) => locks.acquire(`lock-${i}`)));
      expect(writes.sizes).toEqual([1, 16, 16, 16, 1]);
      expect(new Set(held.map((lock) => lock.name)).size).toBe(50);
      expect(new Set(held.map((lock) => lock.fencingToken)).size).toBe(50);
      const released = await Promise.all(held.map((lock) => lock.release()));
      expect(released.every(Boolean)).toBe(true);
    }));

  it('a lone call is written at once, not held for the end of the tick', () =>
    withLocks(async (locks, client) => {
      const stream = (client as unknown as { stream: { writableCorked: number } }).stream;
      const writes = countWrites(client);
      const lock = await locks.acquire('alone');
      expect(writes.count).toBe(1);
      expect(stream.writableCorked).toBe(0);
      await lock.release();
    }));

  it("the caller's commands made in the same tick keep their place in the order", () =>
    withLocks(async (locks, client) => {
      const key = `${randomPrefix()}counter`;
      const steps = [
        client.set(key, '1'),
        locks.acquire('ordered-a'),
        client.incr(key),
        locks.acquire('ordered-b'),
        client.get(key),
      ] as const;
      const [, a, incremented, b, read] = await Promise.all(steps);
      expect(incremented).toBe(2);
      expect(read).toBe('2');
      await Promise.all([a.release(), b.release()]);
    }));
});
