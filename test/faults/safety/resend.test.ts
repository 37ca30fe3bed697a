import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { jobKeys, lockKeys } from '../../../src/store/index.js';
import { boundArgs, SCRIPTS } from '../../../src/store/redis/scripts.js';
import { storeSettings } from '../../../src/store/settings.js';
import { counterToken, lockRecord, randomPrefix, startProxy, type TcpProxy, waitFor } from '../../harness/index.js';
import { deferrals, ioredis, suiteServer } from './fixture.js';

/**
 * A command whose reply is lost runs again: ioredis re-sends in-flight commands after it
 * reconnects. Our proxy lets the command reach the server, drops its reply and resets the
 * connection; the client reconnects and re-sends. Each state change is idempotent per owner token,
 * so the re-sent command answers as the first one did.
 */
describe('re-sent commands', () => {
  const redis = suiteServer();
  const defer = deferrals();

  async function throughProxy(prefix: string): Promise<{ proxy: TcpProxy; locks: Leasehold }> {
    const proxy = await startProxy({ host: redis.server.host, port: redis.server.port });
    defer(() => proxy.close());
    const client = ioredis(proxy.port, { retryStrategy: () => 20 });
    defer(() => client.disconnect());
    await client.ping();
    const locks = new Leasehold(client, { prefix });
    defer(() => locks.close());
    // Load every script, so the faulted call below is one FCALL.
    await (await locks.acquire('warm-up')).release();
    await locks.runOnce('warm-up', () => undefined);
    return { proxy, locks };
  }

  it('acquire: the re-sent command finds the lock its own and returns that grant', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const cut = proxy.cutAfter(SCRIPTS.acquire.fn);
    const lock = await locks.acquire('order:7', { wait: 2_000 });
    await cut;
    expect(lockRecord(await redis.admin.get(lockKeys(prefix, 'order:7').lock)).state).toBe(lock.owner);
    expect(counterToken(await redis.admin.get(lockKeys(prefix, 'order:7').lock))).toBe(lock.fencingToken);
    expect(await redis.admin.zcard(lockKeys(prefix, 'order:7').waiters)).toBe(0);
    expect(await lock.release()).toBe(true);
  });

  it('release: the re-sent command still answers released', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const lock = await locks.acquire('order:8');
    const cut = proxy.cutAfter(SCRIPTS.release.fn);
    expect(await lock.release()).toBe(true);
    await cut;
    expect(lockRecord(await redis.admin.get(lockKeys(prefix, 'order:8').lock)).state).toBeNull();
  });

  it('release that granted the lock outright to a waiter here: the re-sent command still answers released, and the waiter holds the lock', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const keys = lockKeys(prefix, 'order:10');
    const lock = await locks.acquire('order:10', { ttl: 30_000 });
    const waiting = locks.acquire('order:10', { ttl: 30_000, wait: 5_000 });
    waiting.catch(() => undefined);
    await waitFor(async () => (await redis.admin.zcard(keys.waiters)) === 1);
    await sleep(200);
    const cut = proxy.cutAfter(SCRIPTS.release.fn);
    expect(await lock.release()).toBe(true);
    await cut;
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(lock.fencingToken);
    expect(lockRecord(await redis.admin.get(keys.lock)).state).toBe(next.owner);
    // An operator sees the waiter holding it (the grant the counter records) and who released.
    const inspect = SCRIPTS.inspect.input(
      prefix,
      'order:10',
      undefined,
      'PUBLISH',
      boundArgs(storeSettings({ prefix })),
    );
    const raw = await redis.admin.eval(SCRIPTS.inspect.source, inspect.keys.length, ...inspect.keys, ...inspect.args);
    expect(SCRIPTS.inspect.reply.decode(raw)).toMatchObject({
      owner: next.owner,
      holder: { token: next.fencingToken },
      releasedBy: lock.owner,
    });
    expect(await next.release()).toBe(true);
  });

  it('extend: the re-sent command extends again', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const lock = await locks.acquire('order:9', { ttl: 5_000, autoExtend: false });
    const cut = proxy.cutAfter(SCRIPTS.extend.fn);
    await lock.extend(20_000);
    await cut;
    expect(lockRecord(await redis.admin.get(lockKeys(prefix, 'order:9').lock)).pttl).toBeGreaterThan(15_000);
    expect(await lock.release()).toBe(true);
  });

  it('claim-tick: the re-sent claim returns the claim, so the tick runs (and only here)', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const cut = proxy.cutAfter(SCRIPTS.claimTick.fn);
    const tick = Date.UTC(2026, 11, 3);
    expect(await locks.runOnce('nightly', () => 'ran', { tick })).toEqual({ ran: true, value: 'ran' });
    await cut;
    const runs = await locks.jobHistory('nightly');
    expect(runs.map((r) => r.outcome)).toEqual(['ok']);
    expect(await redis.admin.get(jobKeys(prefix, 'nightly').tick)).toBe(String(tick));
  });

  it('finish-tick: the re-sent finish still answers released', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix);
    const released: boolean[] = [];
    locks.on('released', (e) => released.push(e.released));
    const cut = proxy.cutAfter(SCRIPTS.finishTick.fn);
    expect(await locks.runOnce('hourly', () => 'ran')).toEqual({ ran: true, value: 'ran' });
    await cut;
    expect(released).toEqual([true]);
    expect((await locks.jobHistory('hourly')).map((r) => r.outcome)).toEqual(['ok']);
  });
});
