import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { type Backend, MemoryStore } from '../../src/index.js';
import { lockKeys } from '../../src/store/redis/keys.js';
import { storeSettings } from '../../src/store/settings.js';
import { type RedisCluster, type RedisServer, startCluster, startRedis } from '../harness/index.js';

/**
 * One backend the contract suite runs against: how to make a client for it, and what the few
 * tests that look behind a lock's back need, in lock names (each adapter knows its own layout).
 */
export interface ContractBackend {
  readonly label: string;
  /**
   * How the backend's fencing tokens keep increasing across a lost counter: `clock` — never below
   * the server's clock in µs (Redis, memory); `log` — a counter that survives restarts by
   * construction (a PostgreSQL sequence, an etcd revision), so tokens may be small.
   */
  readonly tokens?: 'clock' | 'log';
  /** A fresh client (or the shared store) for one Leasehold instance. */
  client(): Promise<Backend>;
  /** End lock `name`'s lease of `prefix` at once, behind its holder's back, as an operator or a failover would. */
  expire(prefix: string, name: string): Promise<void>;
  /** Listeners the backend has for hand-offs of lock `name` (on Redis, PUBSUB NUMSUB / SHARDNUMSUB of its channel). */
  subscriptions(prefix: string, name: string): Promise<number>;
  /** Waiters queued in the backend for lock `name`. */
  queued(prefix: string, name: string): Promise<number>;
  close(): Promise<void>;
}

export function memoryBackend(): ContractBackend {
  const store = new MemoryStore();
  return {
    label: 'MemoryStore',
    client: async () => store,
    expire: async (prefix, name) => {
      // Memory has no raw access to a lease: deleting it at once is the same fault.
      await store.bind(storeSettings({ prefix })).forceRelease(name);
    },
    subscriptions: async (prefix, name) => store.bind(storeSettings({ prefix })).watching(name),
    queued: async (prefix, name) => (await store.bind(storeSettings({ prefix })).queued(name, 0)).count,
    close: async () => {},
  };
}

function numsub(reply: string): number {
  const lines = reply.split('\n').map((l) => l.trim());
  return Number(lines[1] ?? 0);
}

async function standalone(
  label: string,
  connect: (server: RedisServer) => Promise<{ client: Backend; quit(): Promise<void> }>,
): Promise<ContractBackend> {
  const server = await startRedis();
  const opened: Array<() => Promise<void>> = [];
  return {
    label,
    client: async () => {
      const { client, quit } = await connect(server);
      opened.push(quit);
      return client;
    },
    expire: async (prefix, name) => {
      await server.command('DEL', lockKeys(prefix, name).lock);
    },
    subscriptions: async (prefix, name) =>
      numsub(await server.command('PUBSUB', 'NUMSUB', lockKeys(prefix, name).channel)),
    queued: async (prefix, name) => Number(await server.command('ZCARD', lockKeys(prefix, name).waiters)),
    close: async () => {
      await Promise.all(opened.map((quit) => quit().catch(() => undefined)));
      await server.stop();
    },
  };
}

export function ioredisBackend(): Promise<ContractBackend> {
  return standalone('ioredis', async (server) => {
    const client = new Redis(server.port, server.host, { lazyConnect: false });
    return { client, quit: async () => void (await client.quit()) };
  });
}

export function nodeRedisBackend(): Promise<ContractBackend> {
  return standalone('node-redis', async (server) => {
    const client = createClient({ url: server.url });
    client.on('error', () => {});
    await client.connect();
    return { client, quit: async () => void client.destroy() };
  });
}

async function clustered(
  label: string,
  connect: (cluster: RedisCluster) => Promise<{ client: Backend; quit(): Promise<void> }>,
): Promise<ContractBackend> {
  const cluster = await startCluster({ masters: 3 });
  const opened: Array<() => Promise<void>> = [];
  const raw = new Cluster(cluster.startupNodes);
  return {
    label,
    client: async () => {
      const { client, quit } = await connect(cluster);
      opened.push(quit);
      return client;
    },
    expire: async (prefix, name) => {
      await raw.del(lockKeys(prefix, name).lock);
    },
    queued: async (prefix, name) => raw.zcard(lockKeys(prefix, name).waiters),
    subscriptions: async (prefix, name) => {
      // Sharded channels live on the node that owns their slot: sum over every node.
      const { channel } = lockKeys(prefix, name);
      let total = 0;
      for (const node of cluster.nodes) total += numsub(await node.command('PUBSUB', 'SHARDNUMSUB', channel));
      return total;
    },
    close: async () => {
      await Promise.all(opened.map((quit) => quit().catch(() => undefined)));
      raw.disconnect();
      await cluster.stop();
    },
  };
}

export function ioredisClusterBackend(): Promise<ContractBackend> {
  return clustered('ioredis Cluster', async (cluster) => {
    const client = new Cluster(cluster.startupNodes);
    return { client, quit: async () => void client.disconnect() };
  });
}

export function nodeRedisClusterBackend(): Promise<ContractBackend> {
  return clustered('node-redis cluster', async (cluster) => {
    const client = createCluster({
      rootNodes: cluster.startupNodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })),
    });
    client.on('error', () => {});
    await client.connect();
    return { client, quit: async () => void client.destroy() };
  });
}
