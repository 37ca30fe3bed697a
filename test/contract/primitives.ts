import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { type Leasehold, type LeaseholdOptions, type Lock, LockLostError, LockTimeoutError } from '../../src/index.js';
import { blockFor, untilAborted, waitFor } from '../harness/index.js';
import type { ContractBackend } from './backends.js';

/** What the primitive cases need from the contract suite around them. */
export interface PrimitiveContext {
  leasehold(options?: LeaseholdOptions): Promise<Leasehold>;
  backend(): ContractBackend;
  prefix(): string;
}

/**
 * The primitives that share the Lock handle, on every backend: reentrant holds, several locks at
 * once, leader election. Each case is written against the public API only.
 */
export function primitiveCases(ctx: PrimitiveContext): void {
  describe('reentrant', () => {
    it('a nested reentrant withLock of the same name in the same async context does not wait', async () => {
      const locks = await ctx.leasehold();
      const seen = await locks.withLock('re', { reentrant: true, ttl: 5_000 }, async (_signal, outer) => {
        const started = performance.now();
        const inner = await locks.acquire('re', { reentrant: true, wait: 0 });
        const took = performance.now() - started;
        const nested = { token: inner.fencingToken, owner: inner.owner, holds: inner.holdCount, took };
        expect(await inner.release()).toBe(true);
        // The outer hold keeps the lease after the inner one is released.
        expect(outer.expiresIn()).toBeGreaterThan(0);
        expect(outer.holdCount).toBe(1);
        return { outer: outer.fencingToken, owner: outer.owner, nested };
      });
      expect(seen.nested.token).toBe(seen.outer);
      expect(seen.nested.owner).toBe(seen.owner);
      expect(seen.nested.holds).toBe(2);
      expect(seen.nested.took).toBeLessThan(50);
      // Released by the outermost hold: free again.
      const next = await locks.tryAcquire('re');
      expect(next).not.toBeNull();
      await next?.release();
    });

    it('another async context, or a nested acquisition without reentrant, waits like everyone else', async () => {
      const locks = await ctx.leasehold();
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let started!: () => void;
      const running = new Promise<void>((resolve) => {
        started = resolve;
      });
      const holding = locks.withLock('re2', { reentrant: true }, () => {
        started();
        return gate;
      });
      // The work runs: the lock is held (no other instance is asked first, so none can win it).
      await running;
      expect(await (await ctx.leasehold()).tryAcquire('re2')).toBeNull();
      // A separate async context (not inside the work): refused.
      await expect(locks.acquire('re2', { reentrant: true, wait: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
      release();
      await holding;
      const inside = await locks.withLock('re2', { reentrant: true }, () =>
        locks.acquire('re2', { wait: 100 }).catch((e: unknown) => e),
      );
      expect(inside).toBeInstanceOf(LockTimeoutError);
    });

    it('a lease known to be lost is never re-entered: the nested acquisition rejects with its LockLostError', async () => {
      const locks = await ctx.leasehold();
      const thief = await ctx.leasehold();
      const nested = await locks.withLock(
        're3',
        { reentrant: true, ttl: 5_000, autoExtend: false },
        async (signal, lock) => {
          await ctx.backend().expire(ctx.prefix(), 're3');
          const taken = await thief.acquire('re3', { ttl: 5_000 });
          await expect(lock.extend()).rejects.toMatchObject({ reason: 'not-owner' });
          expect(signal.aborted).toBe(true);
          const error = await locks.acquire('re3', { reentrant: true, wait: 0 }).catch((e: unknown) => e);
          await taken.release();
          return error;
        },
      );
      expect(nested).toBeInstanceOf(LockLostError);
      expect((nested as LockLostError).reason).toBe('not-owner');
    });

    it('a lease that ran out while the event loop was blocked is never re-entered, though no timer noticed', async () => {
      const locks = await ctx.leasehold();
      const ttl = 300;
      let nestedRan = false;
      const outcome = await locks
        .withLock('re4', { reentrant: true, ttl }, async () => {
          // A long synchronous step (or a GC pause): the watchdog cannot run, the lease ends meanwhile.
          blockFor(2 * ttl);
          await locks.withLock('re4', { reentrant: true }, async () => {
            nestedRan = true;
          });
        })
        .catch((e: unknown) => e);
      expect(nestedRan).toBe(false);
      expect(outcome).toBeInstanceOf(LockLostError);
      expect((outcome as LockLostError).reason).toBe('validity-elapsed');
    });
  });

  describe('acquireAll', () => {
    it('takes every name with its own token, and releases them all', async () => {
      const locks = await ctx.leasehold();
      const all = await locks.acquireAll(['m:b', 'm:a', 'm:c'], { ttl: 5_000 });
      expect(all.names).toEqual(['m:b', 'm:a', 'm:c']);
      expect(new Set(all.locks.map((l) => l.fencingToken)).size).toBeGreaterThanOrEqual(1);
      expect(new Set(all.locks.map((l) => l.owner)).size).toBe(3);
      expect(all.expiresIn()).toBeGreaterThan(4_000);
      const other = await ctx.leasehold();
      expect(await other.tryAcquire('m:a')).toBeNull();
      expect(await all.release()).toBe(true);
      const again = await other.acquireAll(['m:a', 'm:b', 'm:c'], { wait: 0 });
      await again.release();
    });

    it('all or nothing: when one name is held, none of the others is left held', async () => {
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const blocker = await b.acquire('n:c', { ttl: 5_000 });
      await expect(a.acquireAll(['n:a', 'n:b', 'n:c', 'n:d'], { wait: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
      for (const name of ['n:a', 'n:b', 'n:d']) {
        const lock = await b.tryAcquire(name);
        expect(lock, name).not.toBeNull();
        await lock?.release();
      }
      await blocker.release();
    });

    it('two callers over overlapping sets in opposite orders never deadlock', async () => {
      const [a, b] = [await ctx.leasehold(), await ctx.leasehold()];
      const run = async (locks: Leasehold, names: string[]) => {
        let held = 0;
        for (let i = 0; i < 10; i++) {
          await locks.withLocks(names, { wait: 5_000, ttl: 2_000 }, async () => {
            held += 1;
            await sleep(1);
          });
        }
        return held;
      };
      const done = await Promise.all([run(a, ['o:1', 'o:2', 'o:3']), run(b, ['o:3', 'o:2', 'o:1'])]);
      expect(done).toEqual([10, 10]);
    });

    it('its signal aborts when any one lease is lost', async () => {
      const locks = await ctx.leasehold();
      const all = await locks.acquireAll(['s:1', 's:2'], { ttl: 5_000, autoExtend: false });
      const signal = all.signal;
      await ctx.backend().expire(ctx.prefix(), 's:2');
      const thief = await (await ctx.leasehold()).acquire('s:2');
      await expect(all.extend()).rejects.toMatchObject({ reason: 'not-owner' });
      expect(signal.aborted).toBe(true);
      expect(await all.release()).toBe(false);
      await thief.release();
    });

    it('refuses an empty list and repeated names', async () => {
      const locks = await ctx.leasehold();
      await expect(locks.acquireAll([])).rejects.toThrow(/non-empty array/);
      await expect(locks.acquireAll(['x', 'x'])).rejects.toThrow(/distinct/);
    });
  });

  describe('lead', () => {
    it('one candidate leads at a time; stop() hands leadership to the next at once', async () => {
      const candidates = await Promise.all([1, 2, 3].map(() => ctx.leasehold({ ttl: 10_000 })));
      const leading = new Set<number>();
      let overlap = 0;
      const terms: number[] = [];
      const elections = candidates.map((locks, i) =>
        locks.lead('leader', async (signal, lock: Lock) => {
          if (leading.size > 0) overlap += 1;
          leading.add(i);
          terms.push(lock.fencingToken);
          await untilAborted(signal);
          leading.delete(i);
        }),
      );
      await waitFor(async () => elections.some((e) => e.isLeader), { timeout: 5_000 });
      const first = elections.findIndex((e) => e.isLeader);
      const started = performance.now();
      await elections[first]?.stop();
      // Handed on by the release, far sooner than the 10 s lease would run out.
      await waitFor(async () => elections.some((e) => e.isLeader), { timeout: 3_000 });
      expect(performance.now() - started).toBeLessThan(3_000);
      const second = elections.findIndex((e) => e.isLeader);
      expect(second).not.toBe(first);
      await Promise.all(elections.map((e) => e.stop()));
      expect(overlap).toBe(0);
      expect(terms.length).toBeGreaterThanOrEqual(2);
      for (let i = 1; i < terms.length; i++) expect(terms[i]).toBeGreaterThan(terms[i - 1] as number);
    });

    it('a leader whose lease is lost is deposed (its signal aborts) and another candidate leads', async () => {
      const [a, b] = [await ctx.leasehold({ ttl: 600 }), await ctx.leasehold({ ttl: 600 })];
      const deposed: string[] = [];
      const first = a.lead('boss', (signal) => untilAborted(signal));
      first.on('deposed', (e) => deposed.push(e.reason));
      await waitFor(async () => first.isLeader, { timeout: 3_000 });
      const second = b.lead('boss', (signal) => untilAborted(signal));
      await ctx.backend().expire(ctx.prefix(), 'boss');
      await waitFor(async () => second.isLeader || deposed.length > 0, { timeout: 5_000 });
      await waitFor(async () => deposed.includes('lost'), { timeout: 5_000 });
      await first.stop();
      await waitFor(async () => second.isLeader, { timeout: 5_000 });
      await second.stop();
    });
  });
}
