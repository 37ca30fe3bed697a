import diagnostics from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { now, validUntil } from '../../../src/core/clock.js';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { type AcquireOptions, Leasehold } from '../../../src/index.js';
import { mutex } from '../../../src/primitives/mutex.js';
import { lockKeys } from '../../../src/store/index.js';
import type { HandOn } from '../../../src/store/port.js';
import { IORedisConnection, type IORedisLike } from '../../../src/store/redis/ioredis-adapter.js';
import { RedisStore, type RedisStoreOptions } from '../../../src/store/redis/redis-store.js';
import { boundArgs, SCRIPTS } from '../../../src/store/redis/scripts.js';
import { storeSettings } from '../../../src/store/settings.js';
import { Single } from '../../../src/topology/single.js';
import { commandCalls, lockRecord, randomPrefix, startProxy, waitFor } from '../../harness/index.js';
import { deferrals, ioredis, singleOptions, slowPath, suiteServer } from './fixture.js';

/**
 * A release grants the lock outright to the next waiter when that waiter queued through the same
 * store (this instance's own): the reply carries its token and the waiter holds the lock without a
 * round trip of its own. What must hold: its validity counts from before the release was sent
 * (the grant came after), a grant nobody here takes is given back at once (it must cost no more
 * than a reservation), and a waiter that hears of it by its own attempt instead gets a lease
 * counted from that attempt.
 */
describe('direct grant to a waiter of the releasing instance', () => {
  const redis = suiteServer();
  const defer = deferrals();

  function instance(prefix: string, port = redis.server.port, commandTimeout?: number): Leasehold {
    // Commands lost to a fault stay lost (none is re-sent after reconnecting).
    const client = ioredis(port, { autoResendUnfulfilledCommands: false });
    const locks = new Leasehold(client, { prefix, ...(commandTimeout ? { commandTimeout } : {}) });
    defer(() => client.disconnect());
    defer(() => locks.close());
    return locks;
  }

  /** A Redis store of its own on the suite's server (what an instance's engine runs on), with `settings`. */
  function storeOf(prefix: string, settings: Omit<RedisStoreOptions, 'prefix'> = {}): RedisStore {
    const client = ioredis(redis.server.port);
    defer(() => client.disconnect());
    const connection = new IORedisConnection(client as unknown as IORedisLike, () => {});
    const store = new RedisStore(connection, { prefix, ...settings });
    defer(() => store.close());
    return store;
  }

  const queued = (prefix: string, name: string) => redis.admin.zcard(lockKeys(prefix, name).waiters);

  /** FCALLs the server ran since its stats were reset. */
  const fcalls = () => commandCalls(redis.admin, 'fcall');

  /**
   * `holder` takes `name`, and an acquisition of it through `waiter` (30 s ttl, 10 s wait unless
   * `options` say otherwise) queues behind it and settles into its park (its subscription went live
   * after its first attempt, so it tries once more first): both. The caller settles the wait.
   */
  async function queueBehind(
    prefix: string,
    name: string,
    holder: Leasehold,
    waiter: Leasehold,
    options: AcquireOptions = {},
  ) {
    const held = await holder.acquire(name, { ttl: 30_000 });
    const waiting = waiter.acquire(name, { ttl: 30_000, wait: 10_000, ...options });
    waiting.catch(() => undefined);
    await waitFor(async () => (await queued(prefix, name)) === 1);
    await sleep(200);
    return { held, waiting };
  }

  /** `releaser` holds `name`, `waiter` queues behind it; then the release, counted. */
  async function handOff(prefix: string, name: string, releaser: Leasehold, waiter: Leasehold) {
    const { held, waiting } = await queueBehind(prefix, name, releaser, waiter);
    await redis.admin.config('RESETSTAT');
    expect(await held.release()).toBe(true);
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    return { next, calls: await fcalls() };
  }

  it('the waiter holds the lock from the release’s reply: one call for the whole hand-off', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const { next, calls } = await handOff(prefix, 'd', a, a);
    // The release was the only call: the waiter made no attempt of its own.
    expect(calls).toBe(1);
    const keys = lockKeys(prefix, 'd');
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBe(next.owner);
    // Its lease is the waiter's own ttl, not a reservation.
    expect(lockRecord(await redis.admin.get(keys.lock)).pttl).toBeGreaterThan(29_000);
    await next.extend();
    expect(await next.release()).toBe(true);
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBeNull();
  });

  it('the release answers once the waiter it woke here holds the lock, not before', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const { held, waiting } = await queueBehind(prefix, 'r', a, a);
    const order: string[] = [];
    const took = waiting.then((lock) => {
      order.push('waiter holds');
      return lock;
    });
    await held.release().then(() => order.push('release answered'));
    expect(order).toEqual(['waiter holds', 'release answered']);
    expect(await (await took).release()).toBe(true);
  });

  it('a waiter of another instance is reserved for, as before, and takes the lock itself', async () => {
    const prefix = randomPrefix();
    const { next, calls } = await handOff(prefix, 'o', instance(prefix), instance(prefix));
    // The release, and the waiter's own attempt.
    expect(calls).toBe(2);
    expect(await next.release()).toBe(true);
  });

  /** PUBLISH commands the server ran since its stats were reset. */
  const publishes = () => commandCalls(redis.admin, 'publish');

  // Behind a waiter here, the next waiter of this instance is told from the reply alone (nothing
  // published); one of another instance hears the published message. Either way it sleeps on the
  // grant's lease: unpublished, the other instance's would sleep on the 30 s lease before.
  it.each([
    { behind: 'here', published: 0 },
    { behind: 'in another instance', published: 1 },
  ])(
    'the waiters behind ($behind) are told the grant’s lease, not asked to try again; one whose holder dies is let in once it runs out',
    async ({ behind, published }) => {
      const prefix = randomPrefix();
      // A short commandTimeout bounds the one attempt the second waiter makes, far inside its park.
      const commandTimeout = 400;
      const a = instance(prefix, redis.server.port, commandTimeout);
      const b = behind === 'here' ? a : instance(prefix, redis.server.port, commandTimeout);
      const ttl = 600;
      const held = await a.acquire('t', { ttl: 30_000 });
      // The first waiter takes a short lease it never releases (its holder dies holding it).
      const first = a.acquire('t', { ttl, autoExtend: false, wait: 10_000 });
      await waitFor(async () => (await queued(prefix, 't')) === 1);
      const second = b.acquire('t', { ttl: 30_000, wait: 10_000 });
      second.catch(() => undefined);
      await waitFor(async () => (await queued(prefix, 't')) === 2);
      await sleep(200);
      await redis.admin.config('RESETSTAT');
      const releasedAt = now();
      expect(await held.release()).toBe(true);
      const dying = await first;
      expect(await publishes()).toBe(published);
      // The release was the only call while the lease lasts: nobody behind asked again.
      await sleep(ttl / 2);
      expect(await fcalls()).toBe(1);
      const next = await second;
      const after = now() - releasedAt;
      expect(next.fencingToken).toBeGreaterThan(dying.fencingToken);
      expect(after).toBeGreaterThanOrEqual(ttl - (ttl * 0.01 + 2));
      // Let in once the lease could have run out (plus one attempt), not when its park, bounded by
      // the 30 s lease it was refused by, would end (maxPark after its last try).
      expect(after).toBeLessThan(ttl + DEFAULTS.expiryMargin + commandTimeout);
      expect(ttl + DEFAULTS.expiryMargin + commandTimeout).toBeLessThan(DEFAULTS.maxPark);
      await next.release();
    },
  );

  it('its validity counts from before the release was sent, so it never outlasts the server’s lease', async () => {
    const prefix = randomPrefix();
    const latency = 40;
    const { proxy, client } = await slowPath(redis.server, latency);
    defer(() => proxy.close());
    defer(() => client.disconnect());
    const a = new Leasehold(client, { prefix });
    defer(() => a.close());
    const ttl = 1_000;
    const { held, waiting } = await queueBehind(prefix, 'v', a, a, { ttl, autoExtend: false });
    await held.release();
    const next = await waiting;
    const heardAt = now();
    // Read the server's remaining lease (directly, without the latency), then ours.
    const pttl = lockRecord(await redis.admin.get(lockKeys(prefix, 'v').lock)).pttl;
    const ours = next.expiresIn();
    expect(ours).toBeGreaterThan(0);
    expect(ours).toBeLessThanOrEqual(pttl);
    // The check can fail: validity counted from when the reply arrived would outlast the lease.
    const fromReply = Math.floor(heardAt + ttl - (ttl * 0.01 + 2) - now());
    expect(fromReply).toBeGreaterThan(pttl);
    await next.release();
  });

  it('a grant to a waiter that gave up here (its leave lost) is given back at once, not held for its ttl', async () => {
    const prefix = randomPrefix();
    const proxy = await startProxy({ host: redis.server.host, port: redis.server.port });
    defer(() => proxy.close());
    const a = instance(prefix, proxy.port, 300);
    const b = instance(prefix);
    const { held, waiting } = await queueBehind(prefix, 'g', a, a, { wait: 600 });
    const gaveUp = waiting.catch((error: unknown) => error);
    // Its wait ends while the server is unreachable: its leave never arrives, it stays queued.
    proxy.blackhole(true);
    expect(await gaveUp).toBeInstanceOf(Error);
    proxy.blackhole(false);
    await waitFor(
      () =>
        held.extend().then(
          () => true,
          () => false,
        ),
      { timeout: 5_000 },
    );
    expect(await queued(prefix, 'g')).toBe(1);
    const released = now();
    expect(await held.release()).toBe(true);
    // The release granted it to the waiter that left; nobody here took it, so it was given back.
    const next = await b.acquire('g', { ttl: 5_000, wait: 5_000 });
    expect(now() - released).toBeLessThan(1_000);
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    await next.release();
  });

  it('a waiter that gives up as its grant arrives gives the lock back on leaving', async () => {
    // The waiter's signal aborts the instant the hand-off naming it reaches this instance (the
    // diagnostics channel hears it just before the waiter does): a grant is kept for it that it
    // will not use.
    const prefix = randomPrefix();
    const a = instance(prefix);
    const b = instance(prefix);
    const controller = new AbortController();
    const { held, waiting } = await queueBehind(prefix, 'x', a, a, { signal: controller.signal });
    const gaveUp = waiting.catch((error: unknown) => error);
    let granted = false;
    const onHandOff = (message: unknown) => {
      if ((message as { woken?: unknown }).woken === null) return;
      granted = true;
      controller.abort(new Error('gave up'));
    };
    diagnostics.subscribe('leasehold:handoff', onHandOff);
    defer(() => diagnostics.unsubscribe('leasehold:handoff', onHandOff));
    await held.release();
    expect(((await gaveUp) as Error).message).toBe('gave up');
    expect(granted).toBe(true);
    // Its leave released the grant: the lock is free for anyone at once, not held for its ttl.
    const next = await b.tryAcquire('x', { ttl: 5_000 });
    expect(next).not.toBeNull();
    expect(next?.fencingToken).toBeGreaterThan(held.fencingToken);
    await next?.release();
  });

  it('the store keeps the grant for the waiter that waits here: its next acquire answers with no call, counted from before the release was sent; its leave gives it back', async () => {
    const prefix = randomPrefix();
    const handOn: HandOn = { reservation: 1_000, announce: false, direct: true };
    const store = storeOf(prefix, { instance: 'test', fenceRetention: 60_000, handOn });
    const lease = { ttl: 30_000 };
    const keys = lockKeys(prefix, 'k');
    const queueBehind = async (holder: string, waiter: string) => {
      expect(await store.acquire('k', { owner: holder, ...lease })).toMatchObject({ acquired: true });
      expect(await store.acquire('k', { owner: waiter, queue: 'join', ...lease })).toMatchObject({ acquired: false });
    };
    // Only W and V wait here (the waiting code answers for its own waiters).
    const stop = await store.watch('k', (handOff) => handOff.woken === 'W' || handOff.woken === 'V');
    defer(stop);

    await queueBehind('A', 'W');
    const sentBefore = now();
    expect(await store.release('k', 'A')).toBe('released');
    const heardBy = now();
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBe('W');
    await redis.admin.config('RESETSTAT');
    const reply = await store.acquire('k', { owner: 'W', queue: 'member', ...lease });
    expect(await fcalls()).toBe(0);
    expect(reply).toMatchObject({ acquired: true });
    const since = (reply as { since?: number }).since as number;
    expect(since).toBeGreaterThanOrEqual(sentBefore);
    expect(since).toBeLessThanOrEqual(heardBy);
    // Taken once: W's next acquire asks the server, which answers with the same grant.
    const again = await store.acquire('k', { owner: 'W', queue: 'member', ...lease });
    expect(again).toEqual({ acquired: true, fence: (reply as { fence: number }).fence });
    expect(await fcalls()).toBe(1);

    // V is granted the lock the same way, and leaves instead: the grant goes back on the server.
    expect(await store.acquire('k', { owner: 'V', queue: 'join', ...lease })).toMatchObject({ acquired: false });
    expect(await store.release('k', 'W')).toBe('released');
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBe('V');
    await store.leave('k', 'V');
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBeNull();
    // And nothing is kept for V: an acquire of its token asks the server, and takes the free lock.
    await redis.admin.config('RESETSTAT');
    expect(await store.acquire('k', { owner: 'V', queue: 'member', ...lease })).toMatchObject({ acquired: true });
    expect(await fcalls()).toBe(1);
    await store.release('k', 'V');

    // A waiter that does not wait here (none of this store's answered for X): given back at once.
    await queueBehind('B', 'X');
    expect(await store.release('k', 'B')).toBe('released');
    await waitFor(async () => lockRecord(await redis.admin.get(keys.lock)).state === null);
  });

  it('the engine counts a kept grant’s validity from before the release was sent, however late the waiter takes it', async () => {
    const store = storeOf(randomPrefix(), {
      instance: 'test',
      handOn: { reservation: 1_000, announce: false, direct: true },
    });
    const options = singleOptions();
    const engine = new Single(mutex, store, false, options);
    const ttl = 10_000;
    expect(await engine.attempt('k', 'A', ttl, 0, true)).toMatchObject({ acquired: true });
    expect(await engine.attempt('k', 'W', ttl, 0, true)).toMatchObject({ acquired: false });
    const stop = await store.watch('k', (handOff) => handOff.woken === 'W');
    defer(stop);
    expect(await engine.release('k', 'A')).toBe(true);
    const heardBy = now();
    // The waiter takes its grant a while later: its validity is no longer for that.
    await sleep(200);
    const taken = await engine.attempt('k', 'W', ttl, 1, true);
    if (!taken.acquired) throw new Error('not acquired');
    expect(taken.validUntil).toBeLessThanOrEqual(validUntil(heardBy, ttl, options.driftFactor, options.driftConstant));
    expect(await engine.release('k', 'W')).toBe(true);
  });

  it('a waiter granted the lock that hears of it by its own attempt gets a lease counted from that attempt', async () => {
    // The grant's message lost, the waiter retries: its attempt finds the lock already its own,
    // and the lease runs its ttl from that attempt (not from the grant).
    const prefix = randomPrefix();
    const a = instance(prefix);
    const lock = await a.acquire('r', { ttl: 10_000 });
    const keys = lockKeys(prefix, 'r');
    await redis.admin.pexpire(keys.lock, 100);
    const request = { owner: lock.owner, ttl: 10_000, queue: 'member' as const };
    const bound = boundArgs(storeSettings({ instance: 'test', fenceRetention: 60_000 }));
    const { keys: k, args } = SCRIPTS.acquire.input(prefix, 'r', request, 'PUBLISH', bound);
    const reply = await redis.admin.eval(SCRIPTS.acquire.source, k.length, ...k, ...args);
    expect(Number(reply)).toBe(lock.fencingToken);
    expect(lockRecord(await redis.admin.get(keys.lock)).pttl).toBeGreaterThan(9_000);
    await lock.release();
  });
});
