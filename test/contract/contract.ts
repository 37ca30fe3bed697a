import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DEFAULTS,
  ErrorCode,
  Leasehold,
  type LeaseholdOptions,
  type Lock,
  LockError,
  LockLostError,
  LockTimeoutError,
} from '../../src/index.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { leftBehind, NOTHING, TimerWatch } from '../harness/leaks.js';
import type { ContractBackend } from './backends.js';
import { primitiveCases } from './primitives.js';
import { sharedCases } from './shared.js';

/**
 * The contract every backend must meet, written once against the public API. The same cases
 * run on the MemoryStore, on ioredis and node-redis against a standalone server, and on both
 * clients against a real 3-master cluster.
 */
export function runContract(make: () => Promise<ContractBackend>): void {
  let backend: ContractBackend;
  let prefix: string;
  const instances: Leasehold[] = [];

  async function leasehold(options: LeaseholdOptions = {}): Promise<Leasehold> {
    const locks = new Leasehold(await backend.client(), { prefix, ...options });
    instances.push(locks);
    return locks;
  }

  /** The library's timers, watched during each test. */
  let timers: TimerWatch;

  /**
   * What `locks` leave behind: the locks they hold, the backend's listeners for `names`, and the
   * library's timers, of every instance (so a test releases what any instance holds first).
   */
  async function leftover(locks: Leasehold | Leasehold[], ...names: string[]) {
    const listeners = async () => {
      let total = 0;
      for (const name of names) total += await backend.subscriptions(prefix, name);
      return total;
    };
    return leftBehind(locks, { timers, listeners });
  }

  beforeAll(async () => {
    backend = await make();
  });
  beforeEach(() => {
    timers = new TimerWatch();
  });
  afterEach(async () => {
    timers.stop();
    await Promise.all(instances.splice(0).map((l) => l.close()));
  });
  afterAll(async () => {
    await backend?.close();
  });

  describe('contract', () => {
    beforeAll(() => {
      prefix = randomPrefix();
    });
    afterEach(() => {
      prefix = randomPrefix();
    });

    it('acquire returns a held lock with a 128-bit owner token and a fencing token', async () => {
      const locks = await leasehold();
      const lock = await locks.acquire('order:1001', { ttl: 5_000 });
      expect(lock.name).toBe('order:1001');
      expect(Buffer.from(lock.owner, 'base64url').length).toBeGreaterThanOrEqual(16);
      // A hybrid token: never below the store's clock in µs since the epoch.
      if ((backend.tokens ?? 'clock') === 'clock') {
        expect(lock.fencingToken).toBeGreaterThanOrEqual(Math.floor(Date.now() * 1000) - 60_000_000);
      } else {
        expect(lock.fencingToken).toBeGreaterThan(0);
      }
      expect(Number.isSafeInteger(lock.fencingToken)).toBe(true);
      expect(lock.expiresIn()).toBeGreaterThan(4_000);
      expect(lock.expiresIn()).toBeLessThanOrEqual(5_000 - 5_000 * DEFAULTS.driftFactor);
      expect(lock.signal.aborted).toBe(false);
      const other = await locks.acquire('order:1002', { ttl: 5_000 });
      expect(other.owner).not.toBe(lock.owner);
      expect(await lock.release()).toBe(true);
      expect(await other.release()).toBe(true);
    });

    it('a held lock refuses others: tryAcquire is null, wait 0 times out at once', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const lock = await a.acquire('job', { ttl: 5_000 });
      expect(await b.tryAcquire('job')).toBeNull();
      await expect(b.acquire('job', { wait: 0 })).rejects.toBeInstanceOf(LockTimeoutError);
      await lock.release();
      const next = await b.tryAcquire('job');
      expect(next).not.toBeNull();
      await next?.release();
    });

    it('release is true once, then false; it never deletes a later owner’s lock', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const first = await a.acquire('res', { ttl: 150, autoExtend: false });
      let second: Lock | null = null;
      await waitFor(
        async () => {
          second = await b.tryAcquire('res', { ttl: 10_000 });
          return second !== null;
        },
        { timeout: 5_000 },
      );
      expect(await first.release()).toBe(false);
      expect(await a.tryAcquire('res')).toBeNull();
      expect(await second!.release()).toBe(true);
      expect(await second!.release()).toBe(false);
    });

    it('fencing tokens strictly increase across owners and never reset on release', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const tokens: number[] = [];
      for (let i = 0; i < 20; i++) {
        const lock = await (i % 2 ? a : b).acquire('fenced', { ttl: 5_000 });
        tokens.push(lock.fencingToken);
        await lock.release();
      }
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as number);
    });

    it('extend resets the lease; a lost lease rejects extend with LockLostError and aborts the signal', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const lock = await a.acquire('ext', { ttl: 1_000, autoExtend: false });
      await lock.extend(10_000);
      expect(lock.expiresIn()).toBeGreaterThan(9_000);
      await backend.expire(prefix, 'ext');
      const thief = await b.acquire('ext', { ttl: 10_000 });
      const lost = lock.extend().catch((e: unknown) => e);
      const error = await lost;
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).reason).toBe('not-owner');
      expect(lock.signal.aborted).toBe(true);
      expect(lock.signal.reason).toBe(error);
      expect(lock.expiresIn()).toBe(0);
      expect(await lock.release()).toBe(false);
      expect(await thief.release()).toBe(true);
    });

    it('the watchdog keeps a lease alive well past its ttl', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const extended: number[] = [];
      a.on('extended', (e) => extended.push(e.fencingToken));
      // Long enough that an extension confirmed late on a busy machine still lands within it; held twice as long.
      const ttl = 1_000;
      const lock = await a.acquire('long', { ttl });
      await sleep(2 * ttl);
      expect(lock.signal.aborted).toBe(false);
      expect(lock.expiresIn()).toBeGreaterThan(0);
      expect(await b.tryAcquire('long')).toBeNull();
      expect(extended.length).toBeGreaterThanOrEqual(2);
      expect(await lock.release()).toBe(true);
      expect(await leftover([a, b], 'long')).toEqual(NOTHING);
    });

    it('the watchdog notices a stolen lease: signal aborts with not-owner and a lost event fires', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const lostEvents: string[] = [];
      a.on('lost', (e) => lostEvents.push(e.error.reason));
      const lock = await a.acquire('stolen', { ttl: 600 });
      await backend.expire(prefix, 'stolen');
      const thief = await b.acquire('stolen', { ttl: 10_000 });
      await waitFor(() => lock.signal.aborted, { timeout: 3_000 });
      expect((lock.signal.reason as LockLostError).reason).toBe('not-owner');
      expect(lostEvents).toEqual(['not-owner']);
      expect(await thief.release()).toBe(true);
    });

    it('without autoExtend the lease ends after ttl and the signal aborts with validity-elapsed', async () => {
      const a = await leasehold();
      const lock = await a.acquire('short', { ttl: 200, autoExtend: false });
      const reason = await new Promise<unknown>((resolve) =>
        lock.signal.addEventListener('abort', () => resolve(lock.signal.reason)),
      );
      expect(reason).toBeInstanceOf(LockLostError);
      expect((reason as LockLostError).reason).toBe('validity-elapsed');
      expect(await leftover(a, 'short')).toEqual(NOTHING);
    });

    it('a waiter is woken by the release, long before the holder’s ttl', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const held = await a.acquire('wake', { ttl: 20_000 });
      const started = performance.now();
      const waiting = b.acquire('wake', { wait: 15_000 });
      // The waiter listens for the lock's hand-offs (a sharded channel on a cluster) before it parks.
      await waitFor(async () => (await backend.subscriptions(prefix, 'wake')) === 1, { timeout: 3_000 });
      await held.release();
      const lock = await waiting;
      // The fallback timer alone would take the holder's 20 s lease; the release wakes it.
      expect(performance.now() - started).toBeLessThan(10_000);
      await lock.release();
    });

    it('a waiter gets a lock whose holder vanished without releasing (expiry publishes nothing)', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const held = await a.acquire('crash', { ttl: 300, autoExtend: false });
      const lock = await b.acquire('crash', { wait: 5_000 });
      expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
      await lock.release();
    });

    it('a waiter the waiters ahead gave up for is woken, and gets the lock once the holder before it runs out', async () => {
      const ttl = 300;
      const [a, b] = [await leasehold(), await leasehold()];
      const held = await a.acquire('gave-up', { ttl: 30_000 });
      const first = b.acquire('gave-up', { ttl, autoExtend: false, wait: 10_000 });
      await waitFor(async () => (await backend.queued(prefix, 'gave-up')) === 1, { timeout: 5_000 });
      // The instance hears hand-offs now: the waiters below ask once, refused by the 30 s lease.
      await waitFor(async () => (await backend.subscriptions(prefix, 'gave-up')) >= 1, { timeout: 5_000 });
      const giveUp = new AbortController();
      const leaving: Promise<unknown>[] = [];
      for (const i of [2, 3, 4]) {
        leaving.push(b.acquire('gave-up', { wait: 10_000, signal: giveUp.signal }).catch((e: unknown) => e));
        await waitFor(async () => (await backend.queued(prefix, 'gave-up')) === i, { timeout: 5_000 });
      }
      // Fifth in line: the release below names only the three after the waiter it wakes.
      const last = b.acquire('gave-up', { wait: 10_000 });
      await waitFor(async () => (await backend.queued(prefix, 'gave-up')) === 5, { timeout: 5_000 });
      await held.release();
      await first;
      giveUp.abort();
      const left = performance.now();
      for (const error of await Promise.all(leaving)) expect(error).toBe(giveUp.signal.reason);
      const lock = await last;
      // Once the first waiter's lease ran out, within a reservation, not at its parked fallback (maxPark, 2 s).
      expect(performance.now() - left).toBeLessThan(ttl + 2 * DEFAULTS.reservation);
      expect(await lock.release()).toBe(true);
    });

    it('a waiter behind one that took the lock with no hand-off naming it is woken, and gets the lock once that lease runs out', async () => {
      const ttl = 300;
      const [a, b, c] = [await leasehold(), await leasehold(), await leasehold()];
      const held = await a.acquire('untold', { ttl: 30_000 });
      const brief = { ttl, autoExtend: false, wait: 10_000 };
      const first = b.acquire('untold', brief);
      await waitFor(async () => (await backend.queued(prefix, 'untold')) === 1, { timeout: 5_000 });
      // The instance hears hand-offs now: the waiters below ask once, refused by the 30 s lease.
      await waitFor(async () => (await backend.subscriptions(prefix, 'untold')) >= 1, { timeout: 5_000 });
      const second = b.acquire('untold', brief);
      await waitFor(async () => (await backend.queued(prefix, 'untold')) === 2, { timeout: 5_000 });
      const giveUp = new AbortController();
      const leaving: Promise<unknown>[] = [];
      for (const i of [3, 4]) {
        leaving.push(b.acquire('untold', { wait: 10_000, signal: giveUp.signal }).catch((e: unknown) => e));
        await waitFor(async () => (await backend.queued(prefix, 'untold')) === i, { timeout: 5_000 });
      }
      // Fifth in line, on its own instance: the release below names only the three after the
      // waiter it wakes, and no hand-off comes after it.
      const last = c.acquire('untold', { wait: 10_000 });
      await waitFor(async () => (await backend.queued(prefix, 'untold')) === 5, { timeout: 5_000 });
      await waitFor(async () => (await backend.subscriptions(prefix, 'untold')) >= 2, { timeout: 5_000 });
      await held.release();
      const released = performance.now();
      await first;
      // The two named behind the second give up while they are not first: nobody is nudged. The
      // second takes the lock when the first's lease runs out, free, and lets its own run out.
      giveUp.abort();
      for (const error of await Promise.all(leaving)) expect(error).toBe(giveUp.signal.reason);
      const lock = await last;
      const took = performance.now() - released;
      expect(await lock.release()).toBe(true);
      await second;
      // Two brief leases and a turn each, not the fifth's parked fallback (maxPark, 2 s).
      expect(took).toBeLessThan(2 * ttl + 2 * DEFAULTS.reservation);
    });

    it('wait runs out with LockTimeoutError and leaves no subscription, timer or key behind', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const held = await a.acquire('busy', { ttl: 10_000 });
      const error = await b.acquire('busy', { wait: 300 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).code).toBe(ErrorCode.LOCK_TIMEOUT);
      expect(await held.release()).toBe(true);
      // The wait's subscription lingers a moment after it left (on etcd, in the store alone).
      await sleep(DEFAULTS.subscriptionLinger);
      expect(await leftover([a, b], 'busy')).toEqual(NOTHING);
    });

    it('an aborted wait rejects with the signal’s reason and leaves nothing behind', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const held = await a.acquire('abort', { ttl: 10_000 });
      const controller = new AbortController();
      const waiting = b.acquire('abort', { wait: 10_000, signal: controller.signal }).catch((e: unknown) => e);
      await sleep(100);
      const reason = new Error('shutting down');
      controller.abort(reason);
      expect(await waiting).toBe(reason);
      expect(await held.release()).toBe(true);
      await sleep(DEFAULTS.subscriptionLinger);
      expect(await leftover([a, b], 'abort')).toEqual(NOTHING);
      expect(await a.tryAcquire('abort')).not.toBeNull();
      const already = new AbortController();
      already.abort(reason);
      await expect(b.acquire('fresh', { signal: already.signal })).rejects.toBe(reason);
    });

    /**
     * Holds `name`, queues one waiter per entry of `queuers` (each only once the one before it is
     * in the backend's queue: that queue defines arrival order), releases, and returns the order
     * the waiters got the lock in.
     */
    async function servedOrder(name: string, queuers: Leasehold[]): Promise<number[]> {
      const held = await (await leasehold()).acquire(name, { ttl: 10_000 });
      const order: number[] = [];
      const waiting: Promise<void>[] = [];
      for (const [i, locks] of queuers.entries()) {
        waiting.push(
          locks.acquire(name, { wait: 10_000 }).then(async (lock) => {
            order.push(i);
            await sleep(5);
            await lock.release();
          }),
        );
        await waitFor(async () => (await backend.queued(prefix, name)) === i + 1, { timeout: 5_000 });
      }
      await held.release();
      await Promise.all(waiting);
      return order;
    }

    it('waiters in one instance are served in arrival order', async () => {
      const a = await leasehold();
      expect(await servedOrder('fifo', [a, a, a, a])).toEqual([0, 1, 2, 3]);
    });

    it('waiters in different instances are served in arrival order, one wake per release', async () => {
      const pods = await Promise.all([0, 1, 2, 3].map(() => leasehold()));
      expect(await servedOrder('fair', pods)).toEqual([0, 1, 2, 3]);
    });

    it('a releaser that asks again at once queues behind the waiter its release woke', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const first = await a.acquire('no-barging', { ttl: 10_000 });
      const bWaits = b.acquire('no-barging', { wait: 5_000 });
      await sleep(100);
      await first.release();
      const again = a.acquire('no-barging', { wait: 5_000 });
      const bLock = await bWaits;
      expect(bLock.fencingToken).toBeGreaterThan(first.fencingToken);
      await bLock.release();
      const aLock = await again;
      expect(aLock.fencingToken).toBeGreaterThan(bLock.fencingToken);
      await aLock.release();
    });

    it('many instances contending: exclusion holds and tokens strictly increase', async () => {
      const pods = await Promise.all(Array.from({ length: 6 }, () => leasehold()));
      let inside = 0;
      let maxInside = 0;
      let counter = 0;
      const tokens: number[] = [];
      await Promise.all(
        pods.map(async (pod) => {
          for (let i = 0; i < 15; i++) {
            await pod.withLock('counter', { ttl: 5_000, wait: 20_000 }, async (_signal, lock) => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              tokens.push(lock.fencingToken);
              const read = counter;
              await sleep(1);
              counter = read + 1;
              inside--;
            });
          }
        }),
      );
      expect(maxInside).toBe(1);
      expect(counter).toBe(90);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1]!);
    });

    it('withLock returns the value, releases, and never replaces the work’s own error', async () => {
      const a = await leasehold();
      const b = await leasehold();
      const value = await a.withLock('w', { ttl: 5_000 }, async (signal, lock) => {
        expect(signal).toBe(lock.signal);
        expect(await b.tryAcquire('w')).toBeNull();
        return 42;
      });
      expect(value).toBe(42);
      const boom = new Error('work failed');
      await expect(
        a.withLock('w', async () => {
          throw boom;
        }),
      ).rejects.toBe(boom);
      const after = await b.tryAcquire('w');
      expect(after).not.toBeNull();
      await after?.release();
      expect(await leftover([a, b], 'w')).toEqual(NOTHING);
    });

    it('work that fails because its lease was lost rejects with the LockLostError, the work’s error as its cause', async () => {
      const a = await leasehold();
      const ttl = 300;
      // The README's pattern: the work waits on the lock's signal, which aborts when the lease runs out.
      let ran = false;
      const pause = (signal: AbortSignal) => {
        ran = true;
        return sleep(20 * ttl, undefined, { signal });
      };
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['withLock', () => a.withLock('lost-w', { ttl, autoExtend: false }, pause)],
        ['tryWithLock', () => a.tryWithLock('lost-t', { ttl, autoExtend: false }, pause)],
        ['withLocks', () => a.withLocks(['lost-a', 'lost-b'], { ttl, autoExtend: false }, pause)],
      ];
      for (const [what, call] of calls) {
        ran = false;
        const error = await call().catch((e: unknown) => e);
        expect(error, what).toBeInstanceOf(LockLostError);
        expect((error as LockLostError).code, what).toBe(ErrorCode.LOCK_LOST);
        expect((error as LockLostError).reason, what).toBe('validity-elapsed');
        // withLocks never hands out a set one of whose leases ran out while it took the next (a
        // busy machine, a Cluster connecting to another master): then no work ran, and nothing
        // failed for the error to carry.
        if (ran || what !== 'withLocks')
          expect(((error as LockLostError).cause as Error).name, what).toBe('AbortError');
        else expect((error as LockLostError).cause, what).toBeUndefined();
      }
      // A work error while the lease is still held is the work's own, as before.
      const boom = new Error('work failed');
      await expect(
        a.withLock('lost-w', { ttl: 5_000 }, async () => {
          throw boom;
        }),
      ).rejects.toBe(boom);
    });

    it('tryWithLock runs when free and reports locked when held', async () => {
      const a = await leasehold();
      const b = await leasehold();
      expect(await a.tryWithLock('t', async () => 'done')).toEqual({ ran: true, value: 'done' });
      const held = await a.acquire('t', { ttl: 5_000 });
      let ran = false;
      expect(
        await b.tryWithLock('t', async () => {
          ran = true;
        }),
      ).toEqual({ ran: false, reason: 'locked' });
      expect(ran).toBe(false);
      await held.release();
    });

    it('await using releases at the end of the block', async () => {
      const a = await leasehold();
      {
        await using lock = await a.acquire('scoped', { ttl: 5_000 });
        expect(lock.expiresIn()).toBeGreaterThan(0);
        expect(await a.tryAcquire('scoped')).toBeNull();
      }
      const again = await a.tryAcquire('scoped');
      expect(again).not.toBeNull();
      await again?.release();
    });

    it('close() stops the watchdog, aborts held locks with closed, and rejects later calls', async () => {
      const client = await backend.client();
      const a = new Leasehold(client, { prefix });
      const lock = await a.acquire('closing', { ttl: 5_000 });
      await a.close();
      expect(lock.signal.aborted).toBe(true);
      expect((lock.signal.reason as LockLostError).reason).toBe('closed');
      expect(await leftover(a, 'closing')).toEqual(NOTHING);
      await expect(a.acquire('closing')).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      // The caller's client still works: close() never closes what it was given.
      const b = new Leasehold(client, { prefix });
      instances.push(b);
      expect(await b.tryAcquire('other')).not.toBeNull();
    });

    it('bad input is refused with an error naming the option and the value', async () => {
      const a = await leasehold();
      const cases: Array<[() => Promise<unknown>, RegExp]> = [
        [() => a.acquire(''), /must not be empty/],
        [() => a.acquire(42 as unknown as string), /must be a string, got 42/],
        [() => a.acquire('x'.repeat(DEFAULTS.maxNameLength + 1)), /at most 512 characters/],
        [() => a.acquire('x', { ttl: -5 }), /`ttl` must be an integer number of milliseconds ≥ 4 .*got -5/],
        [() => a.acquire('x', { ttl: 2 }), /`ttl` must be at least 4 ms: .*drift margin .*got 2/],
        [() => a.acquire('}x'), /must not start with '}'/],
        [() => a.acquire('x', { ttl: 1.5 }), /`ttl` .*got 1\.5/],
        [() => a.acquire('x', { wait: Number.NaN }), /`wait` .*got NaN/],
        [() => a.acquire('x', { signal: {} as AbortSignal }), /`signal` must be an AbortSignal/],
        [() => a.acquire('x', { autoExtend: 'yes' as unknown as boolean }), /`autoExtend` must be a boolean/],
        [
          () => a.tryWithLock('x', { whenUnavailable: 'maybe' as 'run' }, async () => 1),
          /`whenUnavailable` must be one of/,
        ],
        [() => a.withLock('x', {}, 'nope' as unknown as () => 1), /must be a function/],
        [
          () => a.withLock('x', 42 as unknown as () => 1),
          /second argument must be the options .* or the work .*got 42/,
        ],
        // Every option object is checked at the call: a misspelt key is refused, naming it.
        [() => a.acquire('x', { wiat: 100 } as never), /`wiat` is not one of the acquire options: `ttl`, `wait`/],
        [() => a.tryAcquire('x', { wait: 100 } as never), /`wait` is not one of the tryAcquire options/],
        [() => a.withLock('x', { whenUnavalable: 'run' } as never, async () => 1), /`whenUnavalable` is not one/],
        [() => a.acquireAll(['x', 'y'], { mode: 'shared' } as never), /`mode` is not one of the acquireAll options/],
        [() => a.runOnce('x', async () => 1, { lockAtMostFr: 5 } as never), /`lockAtMostFr` is not one of the runOnce/],
        // One rule for names on every backend, checked before any round trip.
        [() => a.acquire('a\0b'), /must not contain the NUL character/],
        [() => a.acquire('a\uD800b'), /well-formed Unicode/],
      ];
      for (const [call, message] of cases) {
        const error = await call().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockError);
        expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
        expect((error as Error).message).toMatch(message);
      }
      const client = await backend.client();
      expect(() => new Leasehold(client, { prefix: 'a{b' })).toThrow(/`prefix`/);
      expect(() => new Leasehold(client, { whenUnavailable: 'foo' } as never)).toThrow(
        /`whenUnavailable` is not one of the Leasehold options/,
      );
      // lead takes the options of a term's lease, not a kind of lock: a shared or counted leader would not be one.
      expect(() => a.lead('x', async () => 1, { mode: 'shared' } as never)).toThrow(/`mode` is not one of the lead/);
      expect(() => a.lead('x', async () => 1, { limit: 2 } as never)).toThrow(/`limit` is not one of the lead/);
      // Names that any backend can store are accepted (astral characters, spaces, braces inside).
      const odd = await a.acquire('ok {é} 🔒 \u0001', { ttl: 5_000 });
      expect(await odd.release()).toBe(true);
      expect(() => new Leasehold({} as never)).toThrow(/expected an ioredis client/);
    });

    primitiveCases({ leasehold, backend: () => backend, prefix: () => prefix });
    sharedCases({ leasehold, backend: () => backend, prefix: () => prefix });
  });
}
