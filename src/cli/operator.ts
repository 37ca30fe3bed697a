import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { DEFAULTS } from '../core/defaults.js';
import { StoreUnavailableError } from '../core/errors.js';
import { withTimeout } from '../core/timeout.js';
import { bounded } from '../store/bounded.js';
import { type AdminStore, type JobStore, type LeaseStore, portsOf, type Store } from '../store/port.js';
import { type BackendOptions, resolveStore } from '../store/registry.js';
import { ANNOUNCED_HAND_ON, storeSettings } from '../store/settings.js';
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

/**
 * An operator's store settings: those of any instance under `prefix`, and a forced release heard by
 * every waiter, those that do not queue (Redlock's) too.
 */
export function operatorSettings(prefix: string, onError: (error: unknown) => void): BackendOptions {
  return { ...storeSettings({ prefix, handOn: ANNOUNCED_HAND_ON }), onError };
}

/** The store on one client under the prefix, and the ports the operator commands call on it. */
interface Ports {
  readonly store: Store;
  readonly admin: AdminStore;
  readonly jobs: JobStore;
}

/** The ports on `client`; a store without them (never a Redis one) drops the connection and fails. */
function portsOn(client: Client, prefix: string, onError: (error: unknown) => void): Ports {
  const { store } = resolveStore(client, operatorSettings(prefix, onError));
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
  const errors = new LastError();
  const standalone = new ioredis.default(url, {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT,
    // One attempt and no reconnection: a command run by hand should fail at once, not retry
    // behind the operator's back; a watch whose connection ends says so and exits.
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  standalone.on('error', errors.remember);
  await connect(standalone, url, () => errors.last);
  const ports = portsOn(standalone, prefix, errors.remember);
  // A cluster node answers only for its own slots (MOVED for the others): talk to the whole
  // cluster instead, so a lock is read where its slot lives and a listing covers every master.
  const found = await bounded(ports.store, isClusterNode(standalone), 'INFO cluster', DEFAULTS.commandTimeout).catch(
    async (error: unknown) => {
      await ports.store.close();
      standalone.disconnect();
      throw error;
    },
  );
  if (!found) return new RedisOperator({ url, prefix, client: standalone, cluster: undefined, ports, errors });
  await ports.store.close();
  standalone.disconnect();
  errors.last = undefined;
  const cluster = clusterClient(ioredis, url);
  cluster.on('error', errors.remember);
  await connect(cluster, url, () => errors.last);
  const clusterPorts = portsOn(cluster, prefix, errors.remember);
  return new RedisOperator({ url, prefix, client: cluster, cluster, ports: clusterPorts, errors });
}

/** The client's last connection error: what a failed connect or a lost connection reports. */
class LastError {
  last: unknown;
  readonly remember = (error: unknown): void => {
    this.last = error;
  };
}

/** Every name one store's scan yields, each page bounded. */
async function* scanPages(one: Ports, match: string, count: number): AsyncGenerator<string> {
  const pages = one.admin.scanLocks(match, count)[Symbol.asyncIterator]();
  for (;;) {
    const next = await bounded(one.store, pages.next(), 'scan-locks', DEFAULTS.commandTimeout);
    if (next.done) return;
    yield next.value;
  }
}

interface Connected {
  readonly url: string;
  readonly prefix: string;
  readonly client: Client;
  /** The client, when it is a Cluster one. */
  readonly cluster: Cluster | undefined;
  readonly ports: Ports;
  readonly errors: LastError;
}

/** The operator on one connected client: one server, or a whole cluster. */
class RedisOperator implements Operator {
  readonly url: string;
  readonly prefix: string;
  readonly topology: 'standalone' | 'cluster';
  readonly lease: LeaseStore;
  readonly admin: AdminStore;
  readonly jobs: JobStore;
  readonly #store: Store;
  readonly #client: Client;
  readonly #cluster: Cluster | undefined;
  readonly #ports: Ports;
  readonly #errors: LastError;
  #closing = false;
  #scanned = 0;

  constructor({ url, prefix, client, cluster, ports, errors }: Connected) {
    this.url = url;
    this.prefix = prefix;
    this.topology = cluster ? 'cluster' : 'standalone';
    this.#store = ports.store;
    this.lease = ports.store;
    this.admin = ports.admin;
    this.jobs = ports.jobs;
    this.#client = client;
    this.#cluster = cluster;
    this.#ports = ports;
    this.#errors = errors;
  }

  get scanned(): number {
    return this.#scanned;
  }

  async *scanLocks(match: string, count: number): AsyncGenerator<string> {
    if (!this.#cluster) {
      this.#scanned = 1;
      yield* scanPages(this.#ports, match, count);
      return;
    }
    yield* this.#scanMasters(this.#cluster, match, count);
  }

  /** A keyless scan runs on one node only: scan each master through a store of its own. */
  async *#scanMasters(cluster: Cluster, match: string, count: number): AsyncGenerator<string> {
    const masters = cluster.nodes('master');
    if (masters.length === 0) throw new StoreUnavailableError(`the cluster at ${this.url} reported no masters`);
    const seen = new Set<string>();
    this.#scanned = 0;
    for (const node of masters) {
      const one = portsOn(node, this.prefix, this.#errors.remember);
      try {
        for await (const name of scanPages(one, match, count)) {
          if (seen.has(name)) continue;
          seen.add(name);
          yield name;
        }
        this.#scanned += 1;
      } finally {
        await one.store.close();
      }
    }
  }

  keyOf(name: string): string {
    return this.#store.locate?.(name) ?? name;
  }

  bounded<T>(promise: Promise<T>, action: string): Promise<T> {
    return bounded(this.#store, promise, action, DEFAULTS.commandTimeout);
  }

  onLost(listener: (error: Error) => void): () => void {
    const onEnd = () => {
      if (this.#closing) return;
      const lastError = this.#errors.last;
      const why = lastError === undefined ? 'the server closed it' : detail(lastError);
      listener(new StoreUnavailableError(`lost the connection to Redis at ${this.url}: ${why}`, { cause: lastError }));
    };
    this.#client.once('end', onEnd);
    return () => this.#client.off('end', onEnd);
  }

  async close(): Promise<void> {
    this.#closing = true;
    await this.#store.close();
    // Nothing is left to send: dropping the socket cannot hang on a server that stopped answering.
    this.#client.disconnect();
  }
}
