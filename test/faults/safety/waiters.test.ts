import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { DEFAULTS, ErrorCode, Leasehold, type Lock, LockTimeoutError } from '../../../src/index.js';
import { lockKeys } from '../../../src/store/index.js';
import { randomPrefix, waitFor } from '../../harness/index.js';
import { Holder } from '../child.js';
import { deferrals, ioredis, slowPath, suiteServer } from './fixture.js';

/**
 * Waiters have liveness of their own. A waiter that died (kill -9), or whose leave was lost,
 * costs the others at most one reservation: the waiter after it in line retries when the
 * reservation lapses, and a waiter that stops trying is dropped from the queue. A waiter that
 * gives up (timeout, abort, close) leaves the queue before its caller hears why.
 */
describe('dead and departing waiters', () => {
  const redis = suiteServer();
  const defer = deferrals();

  function instance(prefix: string): Leasehold {
    const client = ioredis(redis.server.port);
    const locks = new Leasehold(client, { prefix });
    defer(() => client.disconnect());
    defer(() => locks.close());
    return locks;
  }

  const queued = (prefix: string, name: string) => redis.admin.zcard(lockKeys(prefix, name).waiters);

  /** A waiter in a process of its own, killed with kill -9 once it is queued. */
  async function deadWaiter(prefix: string, name: string): Promise<void> {
    const before = await queued(prefix, name);
    const doomed = await Holder.start(redis.server.url, prefix);
    defer(() => doomed.kill9());
    doomed.send({ cmd: 'wait', name, ttl: 10_000, wait: 60_000 });
    expect((await doomed.next()).event).toBe('waiting');
    await waitFor(async () => (await queued(prefix, name)) === before + 1, { message: 'the doomed waiter queued' });
    await doomed.kill9();
  }

  /**
   * `count` waiters, each in a process of its own, queued one after another (the processes start
   * together first, so the last queues soon after the first), then all killed with kill -9.
   */
  async function deadWaiters(prefix: string, name: string, count: number): Promise<void> {
    const doomed = await Promise.all(Array.from({ length: count }, () => Holder.start(redis.server.url, prefix)));
    for (const d of doomed) defer(() => d.kill9());
    for (const d of doomed) {
      const before = await queued(prefix, name);
      d.send({ cmd: 'wait', name, ttl: 10_000, wait: 60_000 });
      expect((await d.next()).event).toBe('waiting');
      await waitFor(async () => (await queued(prefix, name)) === before + 1, { message: 'a doomed waiter queued' });
    }
    await Promise.all(doomed.map((d) => d.kill9()));
  }

  /**
   * `name` held by one instance, `dead` waiters killed once queued behind it, and a live waiter of
   * a second instance queued behind them.
   */
  async function liveBehindDead(
    prefix: string,
    name: string,
    dead: number,
  ): Promise<{ held: Lock; live: Promise<Lock> }> {
    const held = await instance(prefix).acquire(name, { ttl: 30_000 });
    await deadWaiters(prefix, name, dead);
    const live = instance(prefix).acquire(name, { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, name)) === dead + 1);
    return { held, live };
  }

  /** Release `held`: `live` holds the lock within one reservation (no dead waiter paid for), then lets it go. */
  async function handedAtOnce(held: Lock, live: Promise<Lock>): Promise<void> {
    await held.release();
    const started = now();
    const lock = await live;
    expect(now() - started).toBeLessThan(DEFAULTS.reservation);
    await lock.release();
  }

  it('a dead waiter handed the lock costs the next waiter one reservation, not its fallback timer', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = instance(prefix);
    const held = await a.acquire('q', { ttl: 30_000 });
    const first = a.acquire('q', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, 'q')) === 1);
    await deadWaiter(prefix, 'q');
    const last = b.acquire('q', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, 'q')) === 3);
    // Let the last waiter settle into its park: its fallback timer is the holder's lease, capped.
    await sleep(300);
    await held.release();
    const firstLock = await first;
    // This release hands the lock to the dead waiter; the last one is next in line and retries
    // once that reservation lapses.
    await firstLock.release();
    const released = now();
    const lastLock = await last;
    const waited = now() - released;
    expect(waited).toBeLessThan(DEFAULTS.reservation + 500);
    await lastLock.release();
  });

  it('two dead waiters in a row cost the live waiter behind them one reservation each, not its fallback timer', async () => {
    const { held, live: last } = await liveBehindDead(randomPrefix(), 'q2', 2);
    await sleep(300);
    // Handed to the first dead waiter; the second is next in line and the live one after it.
    await held.release();
    const released = now();
    const lastLock = await last;
    const waited = now() - released;
    expect(waited).toBeGreaterThanOrEqual(DEFAULTS.reservation);
    expect(waited).toBeLessThan(2 * DEFAULTS.reservation + 500);
    await lastLock.release();
  });

  it('dead waiters skipped once leave the queue: three at the head cost the live waiter behind them three reservations in all, over three releases', async () => {
    const prefix = randomPrefix();
    const holder = instance(prefix);
    const live = instance(prefix);
    let held = await holder.acquire('skip', { ttl: 30_000 });
    await deadWaiters(prefix, 'skip', 3);
    let waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, 'skip')) === 4);
    let extra = 0;
    for (let round = 0; round < 3; round++) {
      // Let the live waiter settle into its park: its fallback timer is the holder's lease, capped.
      await sleep(300);
      await held.release();
      const released = now();
      const lock = await waiting;
      extra += now() - released;
      if (round === 0) {
        // The first release named the dead waiters after the one it woke; none came in its turn,
        // so they are gone: no later release names them again.
        expect(await queued(prefix, 'skip')).toBe(0);
      }
      await lock.release();
      if (round === 2) break;
      held = await holder.acquire('skip', { ttl: 30_000, wait: 0 });
      const before = await queued(prefix, 'skip');
      waiting = live.acquire('skip', { ttl: 30_000, wait: 20_000 });
      await waitFor(async () => (await queued(prefix, 'skip')) === before + 1);
    }
    // Each dead waiter costs one reservation (the live waiter is third after the one woken, so it
    // retries three reservations on), once: paying for them again would add three more.
    expect(extra).toBeGreaterThanOrEqual(3 * DEFAULTS.reservation);
    expect(extra).toBeLessThan(3 * (DEFAULTS.reservation + DEFAULTS.expiryMargin) + 2 * DEFAULTS.reservation);
  });

  it('a dead exclusive waiter keeps new shared requests out two reservations at most after its last try, not its whole liveness, while a reader holds', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = instance(prefix);
    const reader = await a.acquire('rw', { mode: 'shared', ttl: 30_000 });
    await deadWaiter(prefix, 'rw');
    const started = now();
    const late = await b.acquire('rw', { mode: 'shared', ttl: 30_000, wait: 20_000 });
    const waited = now() - started;
    // A writer that tried within the last reservation counts as alive; then it is asked whether it
    // is alive, and has one reservation to answer. The dead one never does: the request is admitted
    // beside the reader two reservations at most after the writer's last try, long before its
    // liveness (DEFAULTS.waiterLease) would run out, and before a fallback timer (maxPark) fires.
    expect(waited).toBeLessThan(DEFAULTS.reservation + DEFAULTS.maxPark / 2);
    expect(await queued(prefix, 'rw')).toBe(0);
    expect(await reader.release()).toBe(true);
    expect(await late.release()).toBe(true);
  });

  it('a live exclusive waiter asked whether it is alive answers each time, and keeps new shared requests out until it has had the lock', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = instance(prefix);
    const c = instance(prefix);
    const reader = await a.acquire('rw', { mode: 'shared', ttl: 30_000 });
    const writing = c.acquire('rw', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, 'rw')) === 1);
    let admitted = false;
    const late = b.acquire('rw', { mode: 'shared', ttl: 30_000, wait: 20_000 }).then((lock) => {
      admitted = true;
      return lock;
    });
    // The request is refused; the writer, once silent for a reservation, is asked whether it is
    // alive (the same question on the same channel, again and again within a second), and each
    // time it answers in time.
    await sleep(6 * (DEFAULTS.reservation + DEFAULTS.expiryMargin));
    expect(admitted).toBe(false);
    expect(await queued(prefix, 'rw')).toBe(2);
    expect(await reader.release()).toBe(true);
    const writer = await writing;
    expect(admitted).toBe(false);
    expect(await writer.release()).toBe(true);
    expect(await (await late).release()).toBe(true);
  });

  it('waiters that stopped trying are dropped: after their liveness, hand-offs skip them, and the queue expires', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const held = await a.acquire('q', { ttl: 30_000 });
    for (let i = 0; i < 3; i++) await deadWaiter(prefix, 'q');
    expect(await queued(prefix, 'q')).toBe(3);
    const pttl = await redis.admin.pttl(lockKeys(prefix, 'q').waiters);
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(DEFAULTS.waiterLease);
    await sleep(DEFAULTS.waiterLease + 200);
    // Nobody renews the queue: its keys are gone.
    expect(await redis.admin.exists(lockKeys(prefix, 'q').waiters, lockKeys(prefix, 'q').alive)).toBe(0);
    const b = instance(prefix);
    const live = b.acquire('q', { ttl: 30_000, wait: 20_000 });
    await waitFor(async () => (await queued(prefix, 'q')) === 1);
    await handedAtOnce(held, live);
  }, 20_000);

  it('waiters past their liveness at the head of a queue a live waiter keeps are skipped: the release hands the lock to the live one at once', async () => {
    const prefix = randomPrefix();
    const { held, live } = await liveBehindDead(prefix, 'q', 2);
    // The dead waiters' liveness passes; the live one, trying at least every maxPark, keeps its own
    // and the queue's keys.
    await sleep(DEFAULTS.waiterLease + 500);
    expect(await queued(prefix, 'q')).toBe(3);
    // No reservation for either dead waiter: the release finds them dead and passes them by.
    await handedAtOnce(held, live);
  }, 20_000);

  it('a waiter that times out has left the queue when its LockTimeoutError arrives; the next caller is not kept out', async () => {
    const prefix = randomPrefix();
    const holder = instance(prefix);
    const held = await holder.acquire('t', { ttl: 30_000 });
    // The waiter's own round trips are slow, so a leave sent in the background would still be on its way.
    const { proxy, client } = await slowPath(redis.server, 40);
    defer(() => proxy.close());
    defer(() => client.disconnect());
    const waiter = new Leasehold(client, { prefix });
    defer(() => waiter.close());
    const error = await waiter.acquire('t', { wait: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(await queued(prefix, 't')).toBe(0);
    await held.release();
    expect(await instance(prefix).tryWithLock('t', () => 'ran')).toEqual({ ran: true, value: 'ran' });
  });

  it('an aborted wait has left the queue when the abort reason arrives', async () => {
    const prefix = randomPrefix();
    const held = await instance(prefix).acquire('t', { ttl: 30_000 });
    const { proxy, client } = await slowPath(redis.server, 40);
    defer(() => proxy.close());
    defer(() => client.disconnect());
    const waiter = new Leasehold(client, { prefix });
    defer(() => waiter.close());
    const controller = new AbortController();
    const waiting = waiter.acquire('t', { wait: 10_000, signal: controller.signal }).catch((e: unknown) => e);
    await waitFor(async () => (await queued(prefix, 't')) === 1);
    controller.abort(new Error('user gave up'));
    expect(((await waiting) as Error).message).toBe('user gave up');
    expect(await queued(prefix, 't')).toBe(0);
    await held.release();
  });

  it('close() rejects every parked acquire with CLOSED at once and resolves after they left the queue', async () => {
    const prefix = randomPrefix();
    const held = await instance(prefix).acquire('c', { ttl: 30_000 });
    const client = ioredis(redis.server.port);
    const locks = new Leasehold(client, { prefix });
    const parked = [1, 2, 3].map(() => locks.acquire('c', { wait: 30_000 }).catch((e: unknown) => e));
    await waitFor(async () => (await queued(prefix, 'c')) === 3);
    const started = now();
    await locks.close();
    expect(now() - started).toBeLessThan(1_000);
    expect(await queued(prefix, 'c')).toBe(0);
    for (const error of await Promise.all(parked)) expect(error).toMatchObject({ code: ErrorCode.CLOSED });
    // Nothing of the instance is left to keep the client busy: quit completes.
    await client.quit();
    await held.release();
  });

  it('releasing a lock that expired still hands it to the first waiter at once', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = instance(prefix);
    const held = await a.acquire('e', { ttl: 30_000, autoExtend: false });
    const next = b.acquire('e', { wait: 10_000 });
    await waitFor(async () => (await queued(prefix, 'e')) === 1);
    await sleep(300);
    // The lease ends behind everyone's back (as an expiry the waiter's timer does not know of).
    await redis.admin.del(lockKeys(prefix, 'e').lock);
    const started = now();
    expect(await held.release()).toBe(false);
    const lock = await next;
    expect(now() - started).toBeLessThan(DEFAULTS.maxPark / 2);
    await lock.release();
  });
});

describe('a release subscription that fails', () => {
  const redis = suiteServer();
  const defer = deferrals();

  it('is retried while the lock has waiters; meanwhile waiters still take turns', async () => {
    const prefix = randomPrefix();
    // A user that may run everything but SUBSCRIBE, until it is allowed.
    await redis.admin.call('ACL', 'SETUSER', 'worker', 'on', 'nopass', '~*', '&*', '+@all', '-subscribe');
    const workers = [0, 1, 2].map(() => {
      const client = ioredis(redis.server.port, { username: 'worker' });
      const locks = new Leasehold(client, { prefix });
      defer(() => client.disconnect());
      defer(() => locks.close());
      return locks;
    });
    const errors: unknown[] = [];
    for (const w of workers) w.on('backendError', ({ error }) => errors.push(error));
    const counts = [0, 0, 0];
    let stop = false;
    const loops = workers.map(async (w, i) => {
      while (!stop) {
        const lock: Lock = await w.acquire('shared', { ttl: 5_000, wait: 20_000 });
        counts[i] = (counts[i] ?? 0) + 1;
        await sleep(10);
        await lock.release();
      }
    });
    await sleep(2_000);
    const unsubscribed = [...counts];
    expect(errors.some((e) => /NOPERM/.test(String(e)))).toBe(true);
    await redis.admin.call('ACL', 'SETUSER', 'worker', '+subscribe');
    const channel = lockKeys(prefix, 'shared').channel;
    await waitFor(async () => Number(((await redis.admin.call('PUBSUB', 'NUMSUB', channel)) as unknown[])[1]) >= 1, {
      timeout: 8_000,
      message: 'the subscription was never retried',
    });
    stop = true;
    await Promise.all(loops);
    // Without the subscription nobody can hear a hand-off, yet every worker got its turns.
    const total = unsubscribed.reduce((x, y) => x + y, 0);
    expect(total).toBeGreaterThan(10);
    for (const n of unsubscribed) expect(n).toBeGreaterThan(total / 3 / 2);
  }, 30_000);
});
