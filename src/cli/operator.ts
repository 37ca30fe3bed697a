import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { DEFAULTS } from '../core/defaults.js';
import { StoreUnavailableError } from '../core/errors.js';
import { withTimeout } from '../core/timeout.js';
import { bounded } from '../store/bounded.js';
import { type AdminStore, type JobStore, type LeaseStore, portsOf, type Store } from '../store/port.js';
import { resolveStore } from '../store/registry.js';
import { loadOptional } from './redis.js';

/** How long the first connection may take before the command gives up (a black-holed host). */
const CONNECT_TIMEOUT = 2_000;

/** One command's connection to Redis: the store's ports on it, every call bounded by `commandTimeout`. */
export interface Operator {
  readonly url: string;
  readonly prefix: string;
  /** A Redis Cluster (found from the node the URL names) or one server (standalone, or a Sentinel-managed master). */
  readonly topology: 'standalone' | 'cluster';
  /** Leases by lock name: on a cluster a call goes to the master of the lock's slot. */
  readonly lease: LeaseStore;
  /** Forced releases and queue reads by lock name, routed as `lease` is. */
  readonly admin: AdminStore;
  /** Job state and run history by job name, routed as `lease` is. */
  readonly jobs: JobStore;
  /**
   * The names of the locks under the prefix that match the glob, each once: on a cluster, from
   * every master, one after the other. Each page is bounded by `commandTimeout`.
   */
  scanLocks(match: string, count: number): AsyncIterable<string>;
  /** Servers the last scan read: 1, or the cluster's masters. */
  readonly scanned: number;
  /** The Redis key of lock `name`, shown to an operator who reaches for redis-cli. */
  keyOf(name: string): string;
  /** Settle with `promise`, or fail with StoreUnavailableError after `commandTimeout`. */
  bounded<T>(promise: Promise<T>, action: string): Promise<T>;
  /** Calls `listener` once if the connection to Redis ends before `close()`. Returns a remover. */
  onLost(listener: (error: Error) => void): () => void;
  close(): Promise<void>;
}

interface IORedisModule {
  default: new (url: string, options: RedisOptions) => Redis;
  Cluster: new (nodes: { host: string; port: number }[], options: ClusterOptions) => Cluster;
}

function detail(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return detail(error.errors[0]);
  return error instanceof Error && error.message !== '' ? error.message : String(error);
}

/** Whether the server is a node of a Redis Cluster (INFO cluster: cluster_enabled:1). */
async function isClusterNode(client: Redis): Promise<boolean> {
  return /^cluster_enabled:1\s*$/m.test(await client.info('cluster'));
}

type Client = Redis | Cluster;

/**
 * Connect within CONNECT_TIMEOUT, or fail with StoreUnavailableError naming the URL and the
 * client's last connection error (ECONNREFUSED, ENOTFOUND, …).
 */
async function connect(client: Client, url: string, lastError: () => unknown): Promise<void> {
  const connecting = client.connect();
  try {
    await withTimeout(connecting, CONNECT_TIMEOUT, () => new Error(`no answer within ${CONNECT_TIMEOUT} ms`));
  } catch (error) {
    connecting.catch(() => undefined);
    client.disconnect();
    const why = lastError() ?? error;
    throw new StoreUnavailableError(`cannot connect to Redis at ${url}: ${detail(why)}`, { cause: why });
  }
}

/** A Cluster client for the cluster the node at `url` belongs to, with the URL's credentials and TLS. */
function clusterClient(ioredis: IORedisModule, url: string): Cluster {
  const parsed = new URL(url);
  const redisOptions: NonNullable<ClusterOptions['redisOptions']> = {
    connectTimeout: CONNECT_TIMEOUT,
    maxRetriesPerRequest: 0,
    ...(parsed.username === '' ? {} : { username: decodeURIComponent(parsed.username) }),
    ...(parsed.password === '' ? {} : { password: decodeURIComponent(parsed.password) }),
    ...(parsed.protocol === 'rediss:' ? { tls: { servername: parsed.hostname } } : {}),
  };
  // The node the URL names is where the cluster's slot map is first read; every other master is
  // found there. As for one server: no reconnection behind the operator's back.
  return new ioredis.Cluster(
    [{ host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'), port: parsed.port === '' ? 6379 : Number(parsed.port) }],
    {
      lazyConnect: true,
      redisOptions,
      clusterRetryStrategy: () => null,
      slotsRefreshTimeout: CONNECT_TIMEOUT,
    },
  );
}

/** The store on one client under the prefix, and the ports the operator commands call on it. */
interface Ports {
  readonly store: Store;
  readonly admin: AdminStore;
  readonly jobs: JobStore;
}

/** The ports on `client`; a store without them (never a Redis one) drops the connection and fails. */
function portsOn(client: Client, prefix: string, onError: (error: unknown) => void): Ports {
  const { store } = resolveStore(client, { prefix, onError });
  const { admin, jobs } = portsOf(store);
  if (!admin || !jobs) {
    void store.close();
    client.disconnect();
    const cannot = admin ? 'read job history' : 'list, queue-read or force-release locks';
    throw new Error(`the ${store.kind} store cannot ${cannot}`);
  }
  return { store, admin, jobs };
}

export async function openOperator(url: string, prefix: string): Promise<Operator> {
  const ioredis = await loadOptional<IORedisModule>('ioredis');
  if (!ioredis) throw new Error('the operator commands need the ioredis package: npm install ioredis');
  let lastError: unknown;
  const remember = (error: unknown) => {
    lastError = error;
  };
  const ms = DEFAULTS.commandTimeout;
  const standalone = new ioredis.default(url, {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT,
    // One attempt and no reconnection: a command run by hand should fail at once, not retry
    // behind the operator's back; a watch whose connection ends says so and exits.
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  standalone.on('error', remember);
  await connect(standalone, url, () => lastError);
  let client: Client = standalone;
  let ports = portsOn(standalone, prefix, remember);
  // A cluster node answers only for its own slots (MOVED for the others): talk to the whole
  // cluster instead, so a lock is read where its slot lives and a listing covers every master.
  let cluster: Cluster | undefined;
  const found = await bounded(ports.store, isClusterNode(standalone), 'INFO cluster', ms).catch(
    async (error: unknown) => {
      await ports.store.close();
      standalone.disconnect();
      throw error;
    },
  );
  if (found) {
    await ports.store.close();
    standalone.disconnect();
    lastError = undefined;
    cluster = clusterClient(ioredis, url);
    cluster.on('error', remember);
    await connect(cluster, url, () => lastError);
    client = cluster;
    ports = portsOn(cluster, prefix, remember);
  }
  const { store, admin, jobs } = ports;
  let closing = false;
  let scanned = 0;
  /** Every name one store's scan yields, each page bounded. */
  async function* scanOne(one: Ports, match: string, count: number): AsyncGenerator<string> {
    const pages = one.admin.scanLocks(match, count)[Symbol.asyncIterator]();
    for (;;) {
      const next = await bounded(one.store, pages.next(), 'scan-locks', ms);
      if (next.done) return;
      yield next.value;
    }
  }
  return {
    url,
    prefix,
    topology: cluster ? 'cluster' : 'standalone',
    lease: store,
    admin,
    jobs,
    get scanned() {
      return scanned;
    },
    async *scanLocks(match, count) {
      if (!cluster) {
        scanned = 1;
        yield* scanOne(ports, match, count);
        return;
      }
      // A keyless scan runs on one node only: scan each master through a store of its own.
      const masters = cluster.nodes('master');
      if (masters.length === 0) throw new StoreUnavailableError(`the cluster at ${url} reported no masters`);
      const seen = new Set<string>();
      scanned = 0;
      for (const node of masters) {
        const one = portsOn(node, prefix, remember);
        try {
          for await (const name of scanOne(one, match, count)) {
            if (seen.has(name)) continue;
            seen.add(name);
            yield name;
          }
          scanned += 1;
        } finally {
          await one.store.close();
        }
      }
    },
    keyOf: (name) => store.locate?.(name) ?? name,
    bounded: (promise, action) => bounded(store, promise, action, ms),
    onLost: (listener) => {
      const onEnd = () => {
        if (closing) return;
        const why = lastError === undefined ? 'the server closed it' : detail(lastError);
        listener(new StoreUnavailableError(`lost the connection to Redis at ${url}: ${why}`, { cause: lastError }));
      };
      client.once('end', onEnd);
      return () => client.off('end', onEnd);
    },
    close: async () => {
      closing = true;
      await store.close();
      // Nothing is left to send: dropping the socket cannot hang on a server that stopped answering.
      client.disconnect();
    },
  };
}
