import { Cluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../../src/index.js';
import { ErrorCode, Leasehold } from '../../../src/index.js';
import { type RedisCluster, randomPrefix, startCluster } from '../../harness/index.js';
import { deferrals } from './fixture.js';

/**
 * Every name a lock accepts works on a real 3-master Cluster: all of a lock's keys share the hash
 * slot of its name. A name starting with '}' would make an empty hash tag (each key hashed whole,
 * on different slots): it is refused at the call. The eviction policy of every master is checked.
 */
const ODD_NAMES = ['{order}', 'a}b', 'a{b', '{', 'x{}y', 'café ☕', 'with space', 'tab\tnew\nline', '*?[glob]\\'];

describe('lock names on a Cluster', () => {
  let cluster: RedisCluster;
  const defer = deferrals();
  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  const clients: [string, () => Promise<Backend>][] = [
    [
      'ioredis',
      async () => {
        const client = new Cluster(cluster.startupNodes);
        defer(() => client.disconnect());
        return client;
      },
    ],
    [
      'node-redis',
      async () => {
        const client = createCluster({
          rootNodes: cluster.startupNodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
        });
        client.on('error', () => {});
        await client.connect();
        defer(() => client.destroy());
        return client;
      },
    ],
  ];

  it.each(clients)('%s: odd names lock, queue, hand off and release without CROSSSLOT', async (_label, connect) => {
    const prefix = randomPrefix();
    const a = new Leasehold(await connect(), { prefix });
    const b = new Leasehold(await connect(), { prefix });
    defer(() => a.close());
    defer(() => b.close());
    for (const name of ODD_NAMES) {
      const held = await a.acquire(name, { ttl: 10_000 });
      const waiting = b.acquire(name, { wait: 5_000 });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await held.release()).toBe(true);
      const next = await waiting;
      expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
      expect(await next.release()).toBe(true);
      expect(await a.runOnce(name, () => 'ran', { tick: Date.now() })).toEqual({ ran: true, value: 'ran' });
    }
  });

  it("a name starting with '}' is refused; negative control: its keys would hash to different slots", async () => {
    const client = new Cluster(cluster.startupNodes);
    defer(() => client.disconnect());
    const locks = new Leasehold(client, { prefix: 'p' });
    defer(() => locks.close());
    await expect(locks.acquire('}x')).rejects.toMatchObject({ code: ErrorCode.INVALID_ARGUMENT });
    // The key layout an empty hash tag would give: the lock and its counter on different slots.
    const slot = async (key: string) => Number(await client.call('CLUSTER', 'KEYSLOT', key));
    expect(await slot('p:{}x}')).not.toBe(await slot('p:{}x}:fence'));
    await expect(client.eval("return redis.call('GET', KEYS[2])", 2, 'p:{}x}', 'p:{}x}:fence')).rejects.toThrow(
      /CROSSSLOT|MOVED|ASK/,
    );
  });

  it.each(clients)(
    '%s: the eviction policy of every master is read: one unsafe master is enough',
    async (_label, connect) => {
      const node = cluster.nodes[2];
      await node?.command('CONFIG', 'SET', 'maxmemory-policy', 'volatile-lru');
      defer(() => node?.command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction'));
      const locks = new Leasehold(await connect(), { prefix: randomPrefix(), unsafeConfig: 'refuse' });
      defer(() => locks.close());
      await expect(locks.acquire('x')).rejects.toMatchObject({ code: ErrorCode.UNSAFE_CONFIG });
    },
  );
});
