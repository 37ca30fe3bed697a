import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, Leasehold, type Lock } from '../../../src/index.js';
import { lockKeys } from '../../../src/store/index.js';
import {
  counterToken,
  lockRecord,
  randomPrefix,
  startRedis,
  startSentinelGroup,
  waitFor,
} from '../../harness/index.js';
import { deferrals, ioredis } from './fixture.js';

/**
 * Fencing tokens never repeat or go back for a lock name, even when the counter is lost: tokens
 * are max(stored + 1, the server's clock in µs). Each case loses the counter a real way (a
 * restart without persistence, a deleted or expired key, a failover that loses the last write)
 * and shows that the old counter, a plain INCR, would have issued a token again.
 */

/** What a plain INCR counter (the old acquire step) issues after the same loss. */
async function plainIncr(client: Redis, key: string): Promise<number> {
  return Number(await client.eval("return redis.call('INCR', KEYS[1])", 1, `${key}:plain-incr`));
}

describe('fencing tokens survive a lost counter', () => {
  const defer = deferrals();

  /** A redis-server of its own, a client and a Leasehold on it under a fresh prefix, all undone after the test. */
  async function ownServer(args?: string[], options?: Parameters<typeof ioredis>[1]) {
    const server = await startRedis(args ? { args } : {});
    defer(() => server.stop());
    const client = ioredis(server.port, options);
    defer(() => client.disconnect());
    const prefix = randomPrefix();
    const locks = new Leasehold(client, { prefix });
    defer(() => locks.close());
    return { server, client, prefix, locks };
  }

  it('a restart without persistence: the next token is above every token issued before', async () => {
    const { server, client, prefix, locks } = await ownServer(['--save', '', '--appendonly', 'no'], {
      maxRetriesPerRequest: null,
    });
    let last = 0;
    for (let i = 0; i < 5; i++) {
      const lock = await locks.acquire('invoice');
      expect(lock.fencingToken).toBeGreaterThan(last);
      last = lock.fencingToken;
      await lock.release();
    }
    const key = lockKeys(prefix, 'invoice').lock;
    const plain = `${key}:plain`;
    const plainBefore = await Promise.all([1, 2, 3, 4, 5].map(() => plainIncr(client, plain)));
    expect(plainBefore.at(-1)).toBe(5);

    await server.restart();
    await waitFor(async () => (await client.ping().catch(() => '')) === 'PONG', { timeout: 10_000 });
    expect(await client.exists(key, plain)).toBe(0);
    const after = await locks.acquire('invoice');
    expect(after.fencingToken).toBeGreaterThan(last);
    await after.release();
    // Negative control: the plain counter starts over and repeats a token a resource has seen.
    expect(await plainIncr(client, plain)).toBe(1);
  });

  it('a counter deleted (evicted, expired, flushed): the next token is still above the last', async () => {
    const { client, prefix, locks } = await ownServer();
    const first = await locks.acquire('stock:42');
    await first.release();
    const key = lockKeys(prefix, 'stock:42').lock;
    expect(counterToken(await client.get(key))).toBe(first.fencingToken);
    await client.del(key);
    const second = await locks.acquire('stock:42');
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await second.release();
  });

  it('the counter keeps a retention (default 7 days) instead of living for ever', async () => {
    const { client, prefix, locks } = await ownServer();
    const short = new Leasehold(client, { prefix, fenceRetention: 200 });
    defer(() => short.close());
    await (await locks.acquire('order:1')).release();
    const pttl = await client.pttl(lockKeys(prefix, 'order:1').lock);
    expect(pttl).toBeGreaterThan(DEFAULTS.fenceRetention - 60_000);
    expect(pttl).toBeLessThanOrEqual(DEFAULTS.fenceRetention);
    // The key lasts for the retention or to the end of the lease, whichever is later.
    const first = await short.acquire('order:2', { ttl: 200 });
    await first.release();
    await waitFor(async () => (await client.exists(lockKeys(prefix, 'order:2').lock)) === 0, { timeout: 2_000 });
    const second = await short.acquire('order:2');
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await second.release();
  });

  it('a failover that loses the last grant: the promoted replica issues a higher token, so a fenced write of the lost holder is refused', async () => {
    const group = await startSentinelGroup();
    defer(() => group.stop());
    const client = new Redis({
      sentinels: [{ host: group.sentinel.host, port: group.sentinel.port }],
      name: group.name,
    });
    client.on('error', () => {});
    defer(() => client.disconnect());
    const prefix = randomPrefix();
    const locks = new Leasehold(client, { prefix, commandTimeout: 1_000 });
    defer(() => locks.close());
    const keys = lockKeys(prefix, 'ledger');
    // A resource that keeps the highest token it has seen and refuses older ones.
    let seen = 0;
    const fencedWrite = (token: number) => {
      if (token <= seen) return false;
      seen = token;
      return true;
    };
    const warm = await locks.acquire('ledger', { ttl: 30_000 });
    expect(fencedWrite(warm.fencingToken)).toBe(true);
    await warm.release();
    const plain = `${keys.lock}:plain`;
    expect(await plainIncr(client, plain)).toBe(1);
    await waitFor(async () => lockRecord(await group.replica.get(keys.lock)).state === null);
    // Replication is cut (the replica frozen, its link closed by the master), a grant lands on
    // the master only, the master dies; then the replica wakes and is promoted without the grant.
    group.replica.pause();
    await group.master.command('CLIENT', 'KILL', 'TYPE', 'replica');
    const lost = await locks.acquire('ledger', { ttl: 30_000, autoExtend: false });
    expect(fencedWrite(lost.fencingToken)).toBe(true);
    expect(await plainIncr(client, plain)).toBe(2);
    await group.master.kill9();
    group.replica.resume();
    await waitFor(async () => (await group.masterPort()) === group.replica.port, {
      timeout: 20_000,
      message: 'sentinel did not promote the replica',
    });
    // The documented hazard: the promoted replica never saw the lock, so another owner takes it.
    const taken: { lock: Lock | null } = { lock: null };
    await waitFor(
      async () => {
        taken.lock = await locks.tryAcquire('ledger').catch(() => null);
        return taken.lock !== null;
      },
      { timeout: 15_000, message: 'the lock was never free on the promoted replica' },
    );
    const token = taken.lock?.fencingToken ?? 0;
    expect(token).toBeGreaterThan(lost.fencingToken);
    // The new holder's write lands; the lost holder's late write is refused.
    expect(fencedWrite(token)).toBe(true);
    expect(fencedWrite(lost.fencingToken)).toBe(false);
    // Negative control: the plain counter lost its last INCR with the master and issues 2 again.
    expect(await plainIncr(client, plain)).toBe(2);
    await taken.lock?.release();
  }, 60_000);
});
