import { describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { lockKeys } from '../../../src/store/redis/keys.js';
import { lockRecord, randomPrefix, startRedis, waitFor } from '../../harness/index.js';
import { deferrals, ioredis } from './fixture.js';

/**
 * One key per lock (lua/lib/lease.lua): the lease's end is kept in the key's value and compared
 * with the server's clock, while the key itself lives for the fencing record's retention. These
 * are the promises that layout adds: a lease ends at its end though its key lives on, the key lives
 * at least as long as the lease however short the retention, a lease of the layout before (the
 * owner alone, ended by the key's PX) is honoured, and a held lock is one key.
 */
describe('one key per lock', () => {
  const defer = deferrals();

  async function server() {
    const redis = await startRedis();
    defer(() => redis.stop());
    const client = ioredis(redis.port);
    defer(() => client.disconnect());
    const prefix = randomPrefix();
    const open = (options: ConstructorParameters<typeof Leasehold>[1] = {}) => {
      const locks = new Leasehold(ioredis(redis.port), { prefix, ...options });
      defer(() => locks.close());
      return locks;
    };
    return { client, prefix, open };
  }

  it('a lease ends at its end though its key lives on with the record, and the next grant is fenced above it', async () => {
    const { client, prefix, open } = await server();
    const [a, b] = [open(), open()];
    const ttl = 300;
    const first = await a.acquire('pay', { ttl, autoExtend: false });
    const key = lockKeys(prefix, 'pay').lock;
    expect(lockRecord(await client.get(key)).state).toBe(first.owner);
    expect(await b.tryAcquire('pay')).toBeNull();
    // The lease's end passes: the key stays (it keeps the record for the retention), the lock is free.
    await waitFor(async () => lockRecord(await client.get(key)).state === null, { timeout: ttl * 10 });
    expect(await client.exists(key)).toBe(1);
    const second = await b.tryAcquire('pay');
    expect(second?.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await first.release()).toBe(false);
    expect(await second?.release()).toBe(true);
  });

  it('the key outlives a lease extended past the record’s retention, so the lock is not lost with it', async () => {
    const { client, prefix, open } = await server();
    const retention = 300;
    const [a, b] = [open({ fenceRetention: retention }), open({ fenceRetention: retention })];
    const held = await a.acquire('ledger', { ttl: retention, autoExtend: false });
    await held.extend(retention * 10);
    const key = lockKeys(prefix, 'ledger').lock;
    // Well past the retention and the first lease: still held, and the key's PX covers the lease.
    await new Promise((resolve) => setTimeout(resolve, retention * 3));
    expect(await b.tryAcquire('ledger')).toBeNull();
    const { pttl } = lockRecord(await client.get(key));
    expect(await client.pttl(key)).toBeGreaterThanOrEqual(pttl);
    expect(await held.release()).toBe(true);
    // Released, the key lives for the longer of the retention and the lease it was written for.
    await waitFor(async () => (await client.exists(key)) === 0, { timeout: retention * 20 });
  });

  it('a lease of the layout before (the owner alone, ended by the key’s PX) is held until that PX ends', async () => {
    const { client, prefix, open } = await server();
    const locks = open();
    const key = lockKeys(prefix, 'old').lock;
    const ttl = 400;
    await client.set(key, 'an-owner-of-the-layout-before', 'PX', ttl);
    expect(await locks.tryAcquire('old')).toBeNull();
    const refused = await locks.acquire('old', { wait: 0 }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'LOCK_TIMEOUT' });
    const taken = await locks.acquire('old', { wait: ttl * 10 });
    expect(lockRecord(await client.get(key)).state).toBe(taken.owner);
    expect(await taken.release()).toBe(true);
  });

  it('a held lock is one key, and a released one keeps only that key', async () => {
    const { client, prefix, open } = await server();
    const locks = open();
    const held = await locks.acquire('one');
    const keys = async () => (await client.keys(`${prefix}:*`)).sort();
    expect(await keys()).toEqual([lockKeys(prefix, 'one').lock]);
    expect(await held.release()).toBe(true);
    expect(await keys()).toEqual([lockKeys(prefix, 'one').lock]);
    const record = lockRecord(await client.get(lockKeys(prefix, 'one').lock));
    expect(record).toMatchObject({ state: null, fence: expect.stringContaining(`|${held.owner}`) });
  });
});
