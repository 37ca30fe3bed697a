import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { type Backend, DEFAULTS, type LockKeys, MemoryStore } from '../../src/index.js';
import { type RedisCluster, type RedisServer, startCluster, startRedis } from '../harness/index.js';

/**
 * One backend the contract suite runs against: how to make a client for it, and raw access to
 * its keys for the few tests that must tamper with the backend behind a lock's back.
 */
export interface ContractBackend {
  readonly label: string;
  /** A fresh client (or the shared store) for one Leasehold instance. */
  client(): Promise<Backend>;
  /** Delete a key directly in the backend, as an operator or a failover would. */
  deleteKey(key: string): Promise<void>;
  /** Number of channel subscriptions currently open on the backend (PUBSUB NUMSUB / SHARDNUMSUB). */
  subscriptions(channel: string): Promise<number>;
  /** Waiters queued in the backend for a lock (ZCARD of its waiters key). */
  queued(keys: LockKeys): Promise<number>;
  close(): Promise<void>;
}

export function memoryBackend(): ContractBackend {
  const store = new MemoryStore();
  return {
    label: 'MemoryStore',
    client: async () => store,
    deleteKey: async (key) => {
      // Memory has no raw key access: expiring the lease at once is the same fault.
      const keys = {
        lock: key,
        fence: `${key}:fence`,
        channel: `${key}:released`,
        waiters: `${key}:waiters`,
        alive: `${key}:alive`,
      };
      await store.forceRelease(keys, { reservation: DEFAULTS.reservation, announce: false });
    },
    subscriptions: async () => store.subscriptions,
    queued: async (keys) => (await store.queued(keys, 0)).count,
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
    deleteKey: async (key) => {
      await server.command('DEL', key);
    },
    subscriptions: async (channel) => numsub(await server.command('PUBSUB', 'NUMSUB', channel)),
    queued: async (keys) => Number(await server.command('ZCARD', keys.waiters)),
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
    deleteKey: async (key) => {
      await raw.del(key);
    },
    queued: async (keys) => raw.zcard(keys.waiters),
    subscriptions: async (channel) => {
      // Sharded channels live on the node that owns their slot: sum over every node.
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
