import { Cluster, Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fencedWrite } from '../../src/fencing/index.js';
import { ErrorCode, Leasehold, type LeaseholdOptions, MemoryStore, NotReplicatedError } from '../../src/index.js';
import { lockKeys } from '../../src/store/index.js';
import {
  lockRecord,
  type RedisCluster,
  type RedisServer,
  randomPrefix,
  type SentinelGroup,
  startCluster,
  startRedis,
  startSentinelGroup,
  waitFor,
} from '../harness/index.js';

/**
 * Replica acknowledgement (`replicas`): what it refuses, and what it buys through a failover that
 * loses the last write. Real servers: a standalone master, a Cluster, and a Sentinel group of one
 * master, two replicas (reached through a TCP proxy, so replication alone can be cut) and three
 * Sentinels.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** An ioredis client that follows the group's master through its Sentinels, closed after the test. */
function sentinelClientOf(group: SentinelGroup): Redis {
  const client = new Redis({
    sentinels: group.sentinels.map((s) => ({ host: s.host, port: s.port })),
    name: group.name,
    maxRetriesPerRequest: 3,
  });
  client.on('error', () => {});
  cleanups.push(async () => client.disconnect());
  return client;
}

function leasehold(client: ConstructorParameters<typeof Leasehold>[0], options: LeaseholdOptions): Leasehold {
  const locks = new Leasehold(client, options);
  cleanups.push(() => locks.close());
  return locks;
}

describe('replicas: what is refused', () => {
  it('the memory store and Redlock refuse it at construction, naming why', () => {
    expect(() => new Leasehold(new MemoryStore(), { replicas: 1 })).toThrow(/memory store has no replicas/);
    expect(() => new Leasehold([new MemoryStore(), new MemoryStore(), new MemoryStore()], { replicas: 1 })).toThrow(
      /independent masters/,
    );
    expect(() => new Leasehold(new MemoryStore(), { replicas: -1 })).toThrow(/`replicas` must be an integer/);
    expect(() => new Leasehold(new MemoryStore(), { durability: 'disk' as never })).toThrow(/`durability`/);
  });
});

describe('replicas on a master with no replica', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it.each(['ioredis', 'node-redis'])(
    '%s: a grant nobody confirms is given back and rejects with NOT_REPLICATED; keep flags it',
    async (kind) => {
      const client =
        kind === 'ioredis' ? new Redis(server.port, server.host) : await createClient({ url: server.url }).connect();
      cleanups.push(async () => (client instanceof Redis ? client.disconnect() : client.destroy()));
      const prefix = randomPrefix();
      const strict = leasehold(client, { prefix, replicas: 1, replicaTimeout: 50 });
      const error = await strict.acquire('pay', { wait: 0 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(NotReplicatedError);
      expect(error).toMatchObject({ code: ErrorCode.NOT_REPLICATED, confirmed: 0, wanted: 1 });
      // Given back: nothing is left held on the master.
      expect(lockRecord(await server.get(lockKeys(prefix, 'pay').lock)).state).toBeNull();
      const lenient = leasehold(client, { prefix, replicas: 1, replicaTimeout: 50, whenNotReplicated: 'keep' });
      const kept = await lenient.acquire('pay');
      expect(kept.replicas).toBe(0);
      await kept.release();
      const plain = await leasehold(client, { prefix }).acquire('pay');
      expect(plain.replicas).toBeUndefined();
      await plain.release();
    },
  );
});

describe('replicas per call', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('a call asks for replicas (or turns them off) over the instance, on the same lock', async () => {
    const client = new Redis(server.port, server.host);
    cleanups.push(async () => client.disconnect());
    const prefix = randomPrefix();
    const plain = leasehold(client, { prefix });
    await expect(plain.acquire('pay', { replicas: 1, replicaTimeout: 30, wait: 0 })).rejects.toBeInstanceOf(
      NotReplicatedError,
    );
    const kept = await plain.acquire('pay', { replicas: 1, replicaTimeout: 30, whenNotReplicated: 'keep' });
    expect(kept.replicas).toBe(0);
    // The call's lock extends with the call's settings: kept, so the short extension passes.
    await kept.extend();
    await kept.release();
    const strict = leasehold(client, { prefix, replicas: 1, replicaTimeout: 30 });
    const off = await strict.acquire('pay', { replicas: 0 });
    expect(off.replicas).toBeUndefined();
    await off.release();
    await expect(strict.acquire('pay', { wait: 0 })).rejects.toBeInstanceOf(NotReplicatedError);
    await expect(new Leasehold(new MemoryStore()).acquire('x', { replicas: 1 })).rejects.toThrow(/no replicas/);
  });
});

describe('replicas on a Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('the WAIT goes to the node that owns the lock: names on every master answer, none confirmed', async () => {
    const client = new Cluster(cluster.startupNodes);
    cleanups.push(async () => client.disconnect());
    const locks = leasehold(client, {
      prefix: randomPrefix(),
      replicas: 1,
      replicaTimeout: 30,
      whenNotReplicated: 'keep',
    });
    for (const name of ['a', 'b', 'c', 'd', 'e', 'f']) {
      const lock = await locks.acquire(name);
      expect(lock.replicas).toBe(0);
      await lock.release();
    }
  });
});

describe('replicas through a Sentinel failover that loses the last write', () => {
  let group: SentinelGroup;
  beforeAll(async () => {
    group = await startSentinelGroup({ replicas: 2, sentinels: 3, cuttable: true });
  });
  afterAll(async () => {
    await group?.stop();
  });

  const sentinelClient = () => sentinelClientOf(group);

  it('cut replication: replicas: 1 refuses the grant; without it the grant dies with the master, and the next token is higher', async () => {
    const prefix = randomPrefix();
    const client = sentinelClient();
    group.link?.refuse(true);
    await waitFor(async () => /connected_slaves:0/.test(await group.master.command('INFO', 'replication')));
    const strict = leasehold(client, { prefix, replicas: 1, replicaTimeout: 100 });
    await expect(strict.acquire('invoice', { wait: 0 })).rejects.toBeInstanceOf(NotReplicatedError);

    // Without acknowledgement the grant lives on the master alone.
    const careless = leasehold(client, { prefix, commandTimeout: 1_000 });
    const first = await careless.acquire('invoice', { ttl: 60_000 });
    const before = await group.masterPort();
    group.master.kill9();
    await waitFor(async () => (await group.masterPort()) !== before, { timeout: 20_000, message: 'no failover' });
    // The documented hazard: the new master never saw the grant, so a second owner takes the lock.
    const other = leasehold(sentinelClient(), { prefix, commandTimeout: 2_000 });
    let second: Awaited<ReturnType<Leasehold['tryAcquire']>> = null;
    await waitFor(
      async () => {
        second = await other.tryAcquire('invoice').catch(() => null);
        return second !== null;
      },
      { timeout: 10_000 },
    );
    // Its token is higher, so a fenced resource refuses the first holder's late write.
    expect(second!.fencingToken).toBeGreaterThan(first.fencingToken);
    const resource = sentinelClient();
    expect(await fencedWrite(resource, `${prefix}:resource`, second!.fencingToken, 'second')).toEqual({
      written: true,
    });
    expect(await fencedWrite(resource, `${prefix}:resource`, first.fencingToken, 'first')).toMatchObject({
      written: false,
    });
    await second!.release();
  });
});

describe('replicas: 1 through a Sentinel failover', () => {
  let group: SentinelGroup;
  beforeAll(async () => {
    group = await startSentinelGroup({ replicas: 2, sentinels: 3 });
  });
  afterAll(async () => {
    await group?.stop();
  });

  it('a grant confirmed by a replica survives the death of the master: the new master holds it, its owner releases it', async () => {
    const prefix = randomPrefix();
    const connect = () => sentinelClientOf(group);
    const client = connect();
    const locks = leasehold(client, { prefix, replicas: 1, replicaTimeout: 500, commandTimeout: 2_000 });
    const held = await locks.acquire('invoice', { ttl: 60_000 });
    expect(held.replicas).toBeGreaterThanOrEqual(1);
    const before = await group.masterPort();
    group.master.kill9();
    await waitFor(async () => (await group.masterPort()) !== before, { timeout: 20_000, message: 'no failover' });
    const other = leasehold(connect(), { prefix });
    // The promoted replica has the lease: nobody else gets the lock.
    await waitFor(
      async () =>
        (await other.tryAcquire('invoice').then(
          () => 'refused',
          () => 'down',
        )) === 'refused',
      {
        timeout: 10_000,
      },
    );
    expect(await other.tryAcquire('invoice')).toBeNull();
    // Locks work after the failover: the owner still releases it, and the next owner gets a higher token.
    await waitFor(async () => (await client.ping()) === 'PONG', { timeout: 10_000 });
    expect(await held.release()).toBe(true);
    const next = await other.acquire('invoice', { wait: 2_000 });
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    await next.release();
  });
});
