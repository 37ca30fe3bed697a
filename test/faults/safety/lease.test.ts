import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { now, validUntil } from '../../../src/core/clock.js';
import { Leasehold, type Lock, LockLostError, LockTimeoutError, MemoryStore } from '../../../src/index.js';
import { mutex } from '../../../src/primitives/mutex.js';
import { resolveStore } from '../../../src/store/registry.js';
import { storeSettings } from '../../../src/store/settings.js';
import { Single } from '../../../src/topology/single.js';
import { type RedisServer, randomPrefix, startRedis, waitFor } from '../../harness/index.js';
import { blockFor, deferrals, ioredis, singleOptions, slowPath } from './fixture.js';

/**
 * No Lock reaches user code with no validity left. A grant whose reply arrives after its lease's
 * validity (measured from when the acquire was sent) is given back and counts as refused; an
 * extension confirmed too late loses the lease; a run's claim too late does not run the task.
 * The network delay is real: a TCP proxy holds every byte back.
 */
describe('no dead lease is handed out', () => {
  let server: RedisServer;
  const defer = deferrals();
  beforeAll(async () => {
    server = await startRedis();
    return () => server.stop();
  });

  async function slow(prefix: string, latency = 25): Promise<Leasehold> {
    const { proxy, client } = await slowPath(server, latency);
    const locks = new Leasehold(client, { prefix });
    defer(() => proxy.close());
    defer(() => client.disconnect());
    defer(() => locks.close());
    return locks;
  }

  function direct(prefix: string): Leasehold {
    const client = ioredis(server.port);
    const locks = new Leasehold(client, { prefix });
    defer(() => client.disconnect());
    defer(() => locks.close());
    return locks;
  }

  it('a grant that answers after its validity is given back while another holder takes the lock', async () => {
    const prefix = randomPrefix();
    // The acquire reaches the server after 40 ms, its 30 ms lease ends there at 70 ms, the other
    // holder takes the lock then, and the grant's reply arrives at 80 ms: 27.7 ms of validity are
    // long gone by the client's own clock.
    const late = await slow(prefix, 40);
    const other = direct(prefix);
    // Load the scripts first, so the acquire below is one round trip (EVALSHA, no NOSCRIPT retry).
    await (await late.acquire('warm-up')).release();
    await (await other.acquire('warm-up')).release();
    const taking = (async () => {
      await sleep(45);
      const until = now() + 2_000;
      let got: Lock | null = null;
      while (got === null && now() < until) got = await other.tryAcquire('payment', { ttl: 5_000 });
      return got;
    })();
    expect(await late.tryAcquire('payment', { ttl: 30 })).toBeNull();
    const otherLock = await taking;
    expect(otherLock).not.toBeNull();
    let ran = false;
    await expect(
      late.withLock('payment', { ttl: 30, wait: 300 }, () => {
        ran = true;
      }),
    ).rejects.toBeInstanceOf(LockTimeoutError);
    expect(ran).toBe(false);
    await otherLock?.release();
  });

  it('the late grant is given back at once: the next caller need not wait out its ttl', async () => {
    const prefix = randomPrefix();
    const late = await slow(prefix, 60);
    // A lease long on the server (10 s) but short for this client: 120 ms round trip, 125 ms ttl.
    expect(await late.tryAcquire('report', { ttl: 125 })).toBeNull();
    const other = direct(prefix);
    await waitFor(async () => (await other.tryAcquire('report')) !== null, { timeout: 1_000 });
  });

  it('an extension confirmed after the lease ran out rejects with validity-elapsed and aborts the signal', async () => {
    const prefix = randomPrefix();
    const locks = await slow(prefix);
    const lock = await locks.acquire('long-job', { ttl: 10_000 });
    await expect(lock.extend(30)).rejects.toMatchObject({ reason: 'validity-elapsed' });
    expect(lock.signal.aborted).toBe(true);
    expect(lock.signal.reason).toBeInstanceOf(LockLostError);
    expect(lock.expiresIn()).toBe(0);
  });

  it('a job run whose claim answers too late does not run its task and is recorded abandoned', async () => {
    const prefix = randomPrefix();
    const locks = await slow(prefix);
    const skipped: string[] = [];
    locks.on('jobSkipped', (e) => skipped.push(e.reason));
    let ran = false;
    const result = await locks.runOnce(
      'settle',
      () => {
        ran = true;
      },
      { lockAtMostFor: 30 },
    );
    expect(result).toEqual({ ran: false, reason: 'unavailable' });
    expect(ran).toBe(false);
    expect(skipped).toEqual(['unavailable']);
    const [record] = await direct(prefix).jobHistory('settle');
    expect(record?.outcome).toBe('abandoned');
  });

  it('a ttl that leaves no validity after the drift margin is refused at the call, naming the minimum', async () => {
    const locks = direct(randomPrefix());
    await expect(locks.acquire('x', { ttl: 2 })).rejects.toThrow(/`ttl` must be at least 4 ms/);
    await expect(locks.runOnce('x', () => 1, { lockAtMostFor: 3 })).rejects.toThrow(
      /`lockAtMostFor` must be at least 4 ms/,
    );
    const lock = await locks.acquire('x');
    await expect(lock.extend(2)).rejects.toThrow(/`ttl` must be at least 4 ms/);
    expect(() => new Leasehold(new MemoryStore(), { ttl: 1, driftFactor: 0.5 })).toThrow(/at least 6 ms/);
    await lock.release();
  });

  it('negative control: a grant the slow path delivers is already over by its validity; Single refuses it', async () => {
    const prefix = randomPrefix();
    const { proxy, client } = await slowPath(server, 25);
    defer(() => proxy.close());
    defer(() => client.disconnect());
    const options = singleOptions();
    const { store } = resolveStore(client, { ...storeSettings({ prefix }), onError: () => {} });
    const ttl = 30;
    // The store itself, through the same 50 ms round trip: it grants, and the grant's validity,
    // counted from when the request was sent, is over before the reply arrives. An engine that
    // trusted the reply would hand out this dead lease.
    const sentAt = now();
    const reply = await store.acquire('x', { owner: 'owner-a', ttl });
    const arrived = now();
    expect(reply.acquired).toBe(true);
    expect(validUntil(sentAt, ttl, options.driftFactor, options.driftConstant)).toBeLessThan(arrived);
    // Single, on the same path, counts the same grant as refused and gives it back.
    const sound = await new Single(mutex, store, false, options).attempt('y', 'owner-b', ttl, 0);
    expect(sound.acquired).toBe(false);
    expect((await store.inspect('y')).owner).toBeNull();
  });
});

describe('a held lock never shows zero validity with its signal not aborted', () => {
  it('once the validity runs out, expiresIn() is 0 and the signal is aborted, even before any timer ran', async () => {
    const locks = new Leasehold(new MemoryStore());
    const lock = await locks.acquire('busy', { ttl: 60, autoExtend: false });
    const signal = lock.signal;
    expect(signal.aborted).toBe(false);
    // The event loop is blocked past the validity: the lease's timer cannot have fired.
    blockFor(80);
    expect(lock.expiresIn()).toBe(0);
    expect(signal.aborted).toBe(true);
    expect((signal.reason as LockLostError).reason).toBe('validity-elapsed');
    await locks.close();
  });
});
