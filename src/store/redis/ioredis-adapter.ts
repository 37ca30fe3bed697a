import { ClientConnection, type RedisConnection, type Subscriber } from './connection.js';
import { majorFromInfo } from './info.js';

/** The parts of an ioredis `Redis` or `Cluster` this adapter uses (structural, so ioredis stays optional). */
export interface IORedisLike {
  readonly isCluster: boolean;
  /** 'wait', 'connecting', 'connect', 'ready', 'reconnecting', 'close' or 'end'. */
  readonly status: string;
  readonly options?: unknown;
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(source: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  fcall(fn: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  info(section: string): Promise<string>;
  duplicate(...args: unknown[]): IORedisLike;
  subscribe(...channels: string[]): Promise<unknown>;
  unsubscribe(...channels: string[]): Promise<unknown>;
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
  listenerCount(event: string): number;
  disconnect(): void;
  connect?(): Promise<unknown>;
}

/** The socket of a standalone or Sentinel ioredis client (a `net.Socket` or `tls.TLSSocket`). */
interface CorkableStream {
  readonly writable: boolean;
  cork(): void;
  uncork(): void;
}

/** An ioredis `Cluster`: its masters can be asked one by one. */
/** A pipeline: on a Cluster, sent whole to the node of its keys, in order. */
interface IORedisPipelineLike {
  exists(key: string): IORedisPipelineLike;
  call(command: string, ...args: (string | number)[]): IORedisPipelineLike;
  exec(): Promise<[Error | null, unknown][] | null>;
}

interface IORedisClusterLike extends IORedisLike {
  nodes(role: 'master'): IORedisLike[];
  pipeline(): IORedisPipelineLike;
  readonly startupNodes?: readonly unknown[];
}

export function isIORedis(client: unknown): client is IORedisLike {
  const c = client as Partial<IORedisLike> | null;
  return typeof c === 'object' && c !== null && typeof c.evalsha === 'function' && typeof c.isCluster === 'boolean';
}

/** 'host:port' of a client, its Sentinel master name, or a cluster's startup nodes, for messages. */
function addressOf(client: IORedisLike): string {
  const o = (client.options ?? {}) as {
    host?: unknown;
    port?: unknown;
    path?: unknown;
    name?: unknown;
    sentinels?: unknown;
  };
  if (client.isCluster) {
    const nodes = (client as IORedisClusterLike).startupNodes ?? [];
    return nodes
      .map((n) => {
        const node = n as { host?: unknown; port?: unknown } | string | number;
        return typeof node === 'object'
          ? `${String(node.host ?? '127.0.0.1')}:${String(node.port ?? 6379)}`
          : String(node);
      })
      .join(',');
  }
  if (Array.isArray(o.sentinels) && typeof o.name === 'string') return `sentinel master ${o.name}`;
  if (typeof o.path === 'string') return o.path;
  return `${String(o.host ?? '127.0.0.1')}:${String(o.port ?? 6379)}`;
}

/**
 * Calls held on the socket at most before they are written (see #batch). Holding a whole tick's
 * calls for one write made 64 loops half as fast with node and redis-server on CPUs apart, the
 * server idle while the tick's calls were made (bench/README.md, "Placement").
 */
const BATCH = 16;

export class IORedisConnection extends ClientConnection implements RedisConnection {
  readonly kind = 'ioredis';
  readonly #client: IORedisLike;
  /** This tick so far (see #batch): no call yet, one written, or later ones held on `#corked`. */
  #tick: 'quiet' | 'written' | 'corked' = 'quiet';
  #corked: CorkableStream | undefined;
  /** Calls held on `#corked` since its last write. */
  #held = 0;

  constructor(client: IORedisLike, onError: (error: unknown) => void) {
    super(client, {
      cluster: client.isCluster,
      address: addressOf(client),
      onError,
      onConnectionError: (error) => {
        // ioredis prints an error event nobody listens to; our listener must not silence that.
        if (client.listenerCount('error') === 1) {
          console.error('[ioredis] Unhandled error event:', error instanceof Error ? error.stack : error);
        }
      },
      flowing: () => {
        const status = client.status;
        if (status === 'ready' || status === 'end') return true;
        return (client.options as { enableOfflineQueue?: unknown } | undefined)?.enableOfflineQueue === false;
      },
      start: () => {
        if (client.status === 'wait') client.connect?.().catch(() => undefined);
      },
    });
    this.#client = client;
  }

  evalsha(sha: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.admit(() => {
      this.#batch();
      return this.#client.evalsha(sha, keys.length, ...keys, ...args);
    });
  }

  eval(source: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.admit(() => this.#client.eval(source, keys.length, ...keys, ...args));
  }

  fcall(fn: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.admit(() => {
      this.#batch();
      return this.#client.fcall(fn, keys.length, ...keys, ...args);
    });
  }

  /**
   * Hold this tick's writes on the client's socket once a second call is made in it, and send them
   * BATCH calls to a write (the rest at the tick's end): calls of many locks made in the same tick
   * (one per released or woken lock) then cost one system call on each side per batch rather than
   * one each, while a lone call goes out at once, and a server on a CPU of its own works through a
   * batch while the next is made. What ioredis's `enableAutoPipelining` does, without changing the
   * caller's client; commands reach the connection in the order they were made.
   */
  #batch(): void {
    if (this.cluster) return;
    if (this.#tick === 'corked') {
      if (this.#held < BATCH) {
        this.#held++;
        return;
      }
      const stream = this.#corked as CorkableStream;
      stream.uncork();
      stream.cork();
      this.#held = 1;
      return;
    }
    if (this.#tick === 'quiet') {
      this.#tick = 'written';
      process.nextTick(this.#endTick);
      return;
    }
    const stream = (this.#client as { stream?: CorkableStream }).stream;
    if (stream === undefined || typeof stream.cork !== 'function' || !stream.writable) return;
    stream.cork();
    this.#corked = stream;
    this.#held = 1;
    this.#tick = 'corked';
  }

  readonly #endTick = (): void => {
    const stream = this.#corked;
    this.#corked = undefined;
    this.#tick = 'quiet';
    stream?.uncork();
  };

  refreshTopology(): void {
    if (!this.cluster) return;
    // ioredis joins a refresh already under way; a failure only leaves the old map in place.
    (this.#client as { refreshSlotsCache?(callback?: (error?: unknown) => void): void }).refreshSlotsCache?.(() => {});
  }

  alongside(key: string, args: readonly (string | number)[]): Promise<unknown> {
    return this.admit(() => this.#alongside(key, args));
  }

  async #alongside(key: string, args: readonly (string | number)[]): Promise<unknown> {
    const [command, ...rest] = args.map(String) as [string, ...string[]];
    if (!this.cluster) return this.#client.call(command, ...rest);
    // A keyless command goes to a random node of a cluster; in a pipeline with a read of `key` it
    // goes to the node that owns the key's slot, on the connection the write went over.
    const replies = await (this.#client as IORedisClusterLike)
      .pipeline()
      .exists(key)
      .call(command, ...rest)
      .exec();
    const [error, reply] = replies?.[1] ?? [new Error(`${command}: no reply`), undefined];
    if (error) throw error;
    return reply;
  }

  async loadFunctions(source: string): Promise<void> {
    const load = (node: IORedisLike) => node.call('FUNCTION', 'LOAD', 'REPLACE', source);
    if (!this.cluster) {
      await this.admit(() => load(this.#client));
      return;
    }
    const masters = (this.#client as IORedisClusterLike).nodes('master');
    if (masters.length === 0) throw new Error('the cluster client knows no master yet');
    await Promise.all(masters.map(load));
  }

  async serverMajorVersion(): Promise<number> {
    return majorFromInfo(await this.admit(() => this.#client.info('server')));
  }

  async infoOfMasters(section: string): Promise<string[]> {
    if (!this.cluster) return [await this.admit(() => this.#client.info(section))];
    const cluster = this.#client as IORedisClusterLike;
    // A cluster client knows its masters once it has loaded the slots: one command waits for that.
    const first = cluster.nodes('master').length === 0 ? await this.admit(() => cluster.info(section)) : undefined;
    const masters = cluster.nodes('master');
    if (masters.length === 0 && first !== undefined) return [first];
    return Promise.all(masters.map((node) => node.info(section)));
  }

  down(): Error | undefined {
    const status = this.#client.status;
    if (status === 'end') return new Error(`the ioredis client for ${this.address} was closed (quit or disconnect)`);
    return status === 'ready' ? undefined : this.refusal();
  }

  openSubscriber(sharded: boolean, onMessage: (channel: string, message: string) => void): Subscriber {
    // A subscribed connection can run nothing else, so waiting gets a connection of its own.
    // On a cluster, sharded subscribers connect to the node that owns each channel's slot.
    const sub =
      this.cluster && sharded
        ? this.#client.duplicate(undefined, { shardedSubscribers: true })
        : this.#client.duplicate();
    sub.on('error', this.onError);
    sub.on(sharded ? 'smessage' : 'message', ((channel: string, message: string) => onMessage(channel, message)) as (
      ...args: never[]
    ) => void);
    return {
      subscribe: async (channel) => {
        await (sharded ? sub.ssubscribe(channel) : sub.subscribe(channel));
      },
      unsubscribe: async (channel) => {
        await (sharded ? sub.sunsubscribe(channel) : sub.unsubscribe(channel));
      },
      close: async () => {
        sub.disconnect();
      },
    };
  }
}
