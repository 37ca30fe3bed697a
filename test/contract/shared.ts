import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import {
  DEFAULTS,
  ErrorCode,
  type Leasehold,
  type Lock,
  LockError,
  LockLostError,
  LockTimeoutError,
} from '../../src/index.js';
import { waitFor } from '../harness/index.js';
import type { PrimitiveContext } from './primitives.js';

/**
 * A constant stream of readers on `name`: one arrives every `hold` / 6 ms (each on the next of
 * `readers`, each holding `hold` ms), all arrivals scheduled up front by their due time, so that even
 * a stalled event loop runs them in order and some reader always holds; and one writer asking for
 * the lock meanwhile, waiting up to `bound` ms. Returns how long the writer waited, or null if it
 * never got in; how many shared holds the readers took; and whether the writer held beside a
 * reader. The negative control runs it on a read-write lock without writer preference, which must
 * fail it.
 */
export async function writerUnderReaders(
  readers: readonly Leasehold[],
  writer: Leasehold,
  name: string,
  { hold = 60, bound = 2_000 }: { hold?: number; bound?: number } = {},
): Promise<{ waited: number | null; readerHolds: number; overlapped: boolean }> {
  let holding = 0;
  let readerHolds = 0;
  let writing = false;
  let overlapped = false;
  const reads: Promise<void>[] = [];
  const read = async (locks: Leasehold) => {
    const lock = await locks.acquire(name, { mode: 'shared', ttl: 5_000, wait: 10_000 });
    holding += 1;
    readerHolds += 1;
    if (writing) overlapped = true;
    await sleep(hold);
    holding -= 1;
    await lock.release();
  };
  const every = hold / 6;
  const arrivals = Array.from({ length: Math.ceil((bound + 1_000) / every) }, (_, i) =>
    setTimeout(() => reads.push(read(readers[i % readers.length] as Leasehold)), i * every),
  );
  let waited: number | null = null;
  try {
    await waitFor(async () => readerHolds >= 6, { timeout: 5_000 });
    const asked = performance.now();
    const lock = await writer.acquire(name, { ttl: 5_000, wait: bound }).catch(() => undefined);
    if (lock) {
      waited = performance.now() - asked;
      writing = true;
      if (holding > 0) overlapped = true;
      await sleep(5);
      writing = false;
      await lock.release();
    }
  } finally {
    for (const timer of arrivals) clearTimeout(timer);
    await Promise.all(reads);
  }
  return { waited, readerHolds, overlapped };
}

/** Ends once `count` acquisitions of the locks given are queued in the backend. */
async function queuedUp(ctx: PrimitiveContext, name: string, count: number): Promise<void> {
  await waitFor(async () => (await ctx.backend().queued(ctx.prefix(), name)) === count, {
    timeout: 5_000,
    message: `${count} waiters queued`,
  });
}

/**
 * The semaphore (`limit`) and the read-write lock (`mode`) on every backend that has shared holds;
 * a backend without them refuses both at the call, naming the store.
 */
export function sharedCases(ctx: PrimitiveContext): void {
  let capable: boolean | undefined;
  /** Whether this backend has shared holds; if not, the refusal is checked here. */
  async function hasShared(): Promise<boolean> {
    if (capable !== undefined) return capable;
    const locks = await ctx.leasehold();
    const error = await locks.tryAcquire('probe', { limit: 1 }).then(
      async (lock) => {
        await lock?.release();
        return undefined;
      },
      (e: unknown) => e,
    );
    capable = error === undefined;
    if (!capable) {
      expect(error).toBeInstanceOf(LockError);
      expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
      expect((error as Error).message).toMatch(/^this \S+ store cannot run a semaphore: it has no shared holds/);
    }
    return capable;
  }

  it('a store without shared holds refuses `limit` and `mode: shared` at the call, naming the store', async () => {
    const locks = await ctx.leasehold();
    if (await hasShared()) {
      await (await locks.acquire('plain', { mode: 'shared' })).release();
      return;
    }
    await expect(locks.acquire('plain', { mode: 'shared' })).rejects.toThrow(/store cannot run a read-write lock/);
    await expect(locks.withLock('plain', { limit: 2 }, () => 1)).rejects.toThrow(/store cannot run a semaphore/);
  });

  describe('semaphore', () => {
    it('admits `limit` holders, each with its own owner and increasing token, and no more', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const held: Lock[] = [];
      for (const locks of [a, b, a]) held.push(await locks.acquire('pool', { limit: 3, ttl: 5_000 }));
      expect(new Set(held.map((l) => l.owner)).size).toBe(3);
      for (let i = 1; i < held.length; i++) {
        expect(held[i]?.fencingToken).toBeGreaterThan(held[i - 1]?.fencingToken as number);
      }
      expect(await b.tryAcquire('pool', { limit: 3 })).toBeNull();
      // A plain acquire of a semaphore's name is another kind of lock: refused at the call.
      await expect(b.tryAcquire('pool')).rejects.toMatchObject({ code: ErrorCode.INVALID_ARGUMENT });
      expect(await held[1]?.release()).toBe(true);
      const next = await b.acquire('pool', { limit: 3, wait: 0 });
      expect(next.fencingToken).toBeGreaterThan(held[2]?.fencingToken as number);
      for (const lock of [next, held[0], held[2]]) expect(await lock?.release()).toBe(true);
    });

    it('waiters get permits in arrival order, each woken by a release', async () => {
      if (!(await hasShared())) return;
      const locks = await ctx.leasehold();
      const holders = [await locks.acquire('fifo', { limit: 2 }), await locks.acquire('fifo', { limit: 2 })];
      const order: number[] = [];
      const waiting: Promise<Lock>[] = [];
      for (let i = 0; i < 3; i++) {
        const other = await ctx.leasehold();
        waiting.push(
          other.acquire('fifo', { limit: 2, wait: 10_000 }).then((lock) => {
            order.push(i);
            return lock;
          }),
        );
        await queuedUp(ctx, 'fifo', i + 1);
      }
      const started = performance.now();
      // Each release hands its permit to the next waiter in line.
      const releasing = [() => holders[0], () => holders[1], () => waiting[0]];
      for (const [i, next] of releasing.entries()) {
        await (await next())?.release();
        await waitFor(async () => order.length === i + 1, { timeout: 5_000 });
      }
      expect(order).toEqual([0, 1, 2]);
      // Woken by the releases, far sooner than any lease (30 s) or timer could.
      expect(performance.now() - started).toBeLessThan(5_000);
      await (await waiting[2])?.release();
    });

    it('an expired permit is reclaimed on the store’s clock; its holder’s extend finds it lost', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const lapsing = await a.acquire('lapse', { limit: 1, ttl: 150, autoExtend: false });
      const next = await b.acquire('lapse', { limit: 1, ttl: 5_000, wait: 5_000 });
      expect(next.fencingToken).toBeGreaterThan(lapsing.fencingToken);
      const error = await lapsing.extend().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect(lapsing.signal.aborted).toBe(true);
      expect(await lapsing.release()).toBe(false);
      expect(await next.release()).toBe(true);
    });

    it('the watchdog keeps a permit past its ttl', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const ttl = 1_000;
      const lock = await a.acquire('kept', { limit: 1, ttl });
      await sleep(2 * ttl);
      expect(lock.signal.aborted).toBe(false);
      expect(await b.tryAcquire('kept', { limit: 1 })).toBeNull();
      expect(await lock.release()).toBe(true);
    });

    it('a limit other than the one the semaphore is held with rejects with INVALID_ARGUMENT naming both', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const lock = await a.acquire('sized', { limit: 3 });
      for (const [options, message] of [
        [{ limit: 5 }, /`limit: 5` does not match lock "sized", held as a semaphore of 3 permits/],
        [{ mode: 'shared' as const }, /`mode: 'shared'` does not match lock "sized", held as a semaphore of 3/],
        [{}, /a plain acquire .* does not match lock "sized", held as a semaphore of 3 permits/],
        [{ mode: 'exclusive' as const }, /a plain acquire .* does not match lock "sized", held as a semaphore of 3/],
      ] as const) {
        // Refused at the first attempt, long before its wait could run out.
        const error = await b.acquire('sized', { ...options, wait: 30_000 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockError);
        expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
        expect((error as Error).message).toMatch(message);
      }
      expect(await ctx.backend().queued(ctx.prefix(), 'sized')).toBe(0);
      await lock.release();
    });

    it('a semaphore of a name held exclusively rejects with INVALID_ARGUMENT naming both; a reader waits', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const lock = await a.acquire('plain', { ttl: 5_000 });
      const error = await b.acquire('plain', { limit: 2, wait: 30_000 }).catch((e: unknown) => e);
      expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
      expect((error as Error).message).toMatch(/`limit: 2` does not match lock "plain", held exclusively/);
      expect(await ctx.backend().queued(ctx.prefix(), 'plain')).toBe(0);
      // The read-write lock's shared mode is the same lock as the mutex: it waits for the holder.
      await expect(b.acquire('plain', { mode: 'shared', wait: 0 })).rejects.toBeInstanceOf(LockTimeoutError);
      await lock.release();
    });
  });

  describe('read-write lock', () => {
    it('readers overlap, each with its own owner and token', async () => {
      if (!(await hasShared())) return;
      const readers = await Promise.all(
        [1, 2, 3].map(async () => (await ctx.leasehold()).acquire('doc', { mode: 'shared' })),
      );
      for (const lock of readers) expect(lock.expiresIn()).toBeGreaterThan(0);
      expect(new Set(readers.map((l) => l.owner)).size).toBe(3);
      expect(new Set(readers.map((l) => l.fencingToken)).size).toBe(3);
      for (const lock of readers) expect(await lock.release()).toBe(true);
    });

    it('an exclusive holder excludes readers, readers exclude it, and a plain acquire is the exclusive mode', async () => {
      if (!(await hasShared())) return;
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const reader = await a.acquire('rw', { mode: 'shared' });
      expect(await b.tryAcquire('rw', { mode: 'exclusive' })).toBeNull();
      expect(await b.tryAcquire('rw')).toBeNull();
      await reader.release();
      const writer = await b.acquire('rw', { mode: 'exclusive', wait: 0 });
      expect(await a.tryAcquire('rw', { mode: 'shared' })).toBeNull();
      expect(await a.tryAcquire('rw')).toBeNull();
      await writer.release();
      const plain = await b.acquire('rw', { wait: 0 });
      expect(await a.tryAcquire('rw', { mode: 'shared' })).toBeNull();
      await plain.release();
    });

    it('once an exclusive waiter is queued, later shared requests queue behind it; its token is above every earlier holder’s', async () => {
      if (!(await hasShared())) return;
      const [a, b, c] = [await ctx.leasehold(), await ctx.leasehold(), await ctx.leasehold()];
      const readers = [await a.acquire('pref', { mode: 'shared' }), await c.acquire('pref', { mode: 'shared' })];
      const writing = b.acquire('pref', { mode: 'exclusive', wait: 10_000 });
      await queuedUp(ctx, 'pref', 1);
      expect(await c.tryAcquire('pref', { mode: 'shared' })).toBeNull();
      const late = c.acquire('pref', { mode: 'shared', wait: 10_000 });
      await queuedUp(ctx, 'pref', 2);
      for (const lock of readers) await lock.release();
      const writer = await writing;
      expect(writer.fencingToken).toBeGreaterThan(Math.max(...readers.map((l) => l.fencingToken)));
      await writer.release();
      const reader = await late;
      expect(reader.fencingToken).toBeGreaterThan(writer.fencingToken);
      await reader.release();
    });

    it('shared waiters at the head of the queue are admitted together', async () => {
      if (!(await hasShared())) return;
      const writer = await (await ctx.leasehold()).acquire('batch', { ttl: 30_000 });
      const readers = await Promise.all([1, 2, 3].map(() => ctx.leasehold()));
      const waiting = readers.map((locks) => locks.acquire('batch', { mode: 'shared', wait: 10_000 }));
      await queuedUp(ctx, 'batch', 3);
      const started = performance.now();
      await writer.release();
      const held = await Promise.all(waiting);
      // All three hold at once, woken by the one release (a reservation is 250 ms; the lease 30 s).
      expect(performance.now() - started).toBeLessThan(2_000);
      for (const lock of held) expect(lock.expiresIn()).toBeGreaterThan(0);
      for (const lock of held) expect(await lock.release()).toBe(true);
    });

    it('readers let in ahead of a writer by a waiter that gives up wake it, so it takes the lock when they run out', async () => {
      if (!(await hasShared())) return;
      const ttl = 300;
      const [a, b, c] = [await ctx.leasehold(), await ctx.leasehold(), await ctx.leasehold()];
      const holder = await a.acquire('ahead', { ttl: 30_000 });
      const reading = { mode: 'shared' as const, ttl, autoExtend: false, wait: 10_000 };
      const first = b.acquire('ahead', reading);
      // The reader first in line, the exclusive waiter second: queued one after the other, since
      // two instances' first attempts race to the server.
      await queuedUp(ctx, 'ahead', 1);
      const giveUp = new AbortController();
      const leaving = c.acquire('ahead', { wait: 10_000, signal: giveUp.signal }).catch((e: unknown) => e);
      await queuedUp(ctx, 'ahead', 2);
      // Both instances hear hand-offs now: the waiters below ask once, refused by the 30 s lease.
      await waitFor(async () => (await ctx.backend().subscriptions(ctx.prefix(), 'ahead')) >= 2, { timeout: 5_000 });
      const readers = [b.acquire('ahead', reading), c.acquire('ahead', reading)];
      await queuedUp(ctx, 'ahead', 4);
      // Fifth in line: the release below names only three after the reader it admits.
      const writing = c.acquire('ahead', { ttl: 5_000, wait: 10_000 });
      await queuedUp(ctx, 'ahead', 5);
      await holder.release();
      await first;
      // The exclusive waiter between the readers gives up: the two behind it join the first, and
      // all three run out unreleased. The writer is told when it is first in line.
      giveUp.abort();
      const left = performance.now();
      expect(await leaving).toBe(giveUp.signal.reason);
      await Promise.all(readers);
      const writer = await writing;
      // Within a reservation of the readers' end, not at its parked fallback (maxPark, 2 s).
      expect(performance.now() - left).toBeLessThan(ttl + 2 * DEFAULTS.reservation);
      expect(await writer.release()).toBe(true);
    });

    it('writers get in under a constant stream of readers within a bounded wait', async () => {
      if (!(await hasShared())) return;
      const readers = await Promise.all([1, 2, 3].map(() => ctx.leasehold()));
      const result = await writerUnderReaders(readers, await ctx.leasehold(), 'stream', { hold: 60, bound: 3_000 });
      expect(result.waited).not.toBeNull();
      expect(result.waited).toBeLessThan(3_000);
      expect(result.overlapped).toBe(false);
      expect(result.readerHolds).toBeGreaterThan(6);
    });

    it('a shared hold lost behind its back aborts its signal', async () => {
      if (!(await hasShared())) return;
      const locks = await ctx.leasehold();
      const lock = await locks.acquire('gone', { mode: 'shared', ttl: 5_000, autoExtend: false });
      await ctx.backend().expire(ctx.prefix(), 'gone');
      const error = await lock.extend().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).reason).toBe('expired');
      expect(lock.signal.aborted).toBe(true);
    });
  });
}
