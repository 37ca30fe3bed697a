import type { RedisConnection, Subscriber } from './connection.js';
import { majorFromInfo } from './ioredis-adapter.js';

type Listener = (message: string, channel: string) => void;

/** The parts of a node-redis client (v4 and later) this adapter uses. */
interface NodeRedisCommon {
  readonly isOpen: boolean;
  duplicate(): NodeRedisCommon;
  connect(): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  subscribe(channel: string, listener: Listener): Promise<unknown>;
  unsubscribe(channel: string, listener?: Listener): Promise<unknown>;
  sSubscribe(channel: string, listener: Listener): Promise<unknown>;
  sUnsubscribe(channel: string, listener?: Listener): Promise<unknown>;
  destroy?(): unknown;
  disconnect?(): Promise<unknown>;
}

export interface NodeRedisClientLike extends NodeRedisCommon {
  sendCommand(args: string[]): Promise<unknown>;
}

export interface NodeRedisClusterLike extends NodeRedisCommon {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  getSlotMaster(slot: number): unknown;
}

/** A node-redis Sentinel client (`createSentinel`): commands go to the current master. */
export interface NodeRedisSentinelLike extends Omit<NodeRedisCommon, 'duplicate'> {
  sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
  getMasterNode(): unknown;
}

export type NodeRedisLike = NodeRedisClientLike | NodeRedisClusterLike | NodeRedisSentinelLike;

export function isNodeRedis(client: unknown): client is NodeRedisLike {
  const c = client as Partial<NodeRedisClientLike> | null;
  return typeof c === 'object' && c !== null && typeof c.sendCommand === 'function' && 'isOpen' in c;
}

function isCluster(client: NodeRedisLike): client is NodeRedisClusterLike {
  return typeof (client as Partial<NodeRedisClusterLike>).getSlotMaster === 'function';
}

function isSentinel(client: NodeRedisLike): client is NodeRedisSentinelLike {
  return typeof (client as Partial<NodeRedisSentinelLike>).getMasterNode === 'function';
}

export class NodeRedisConnection implements RedisConnection {
  readonly kind = 'node-redis';
  readonly cluster: boolean;
  readonly #client: NodeRedisLike;
  readonly #onError: (error: unknown) => void;

  constructor(client: NodeRedisLike, onError: (error: unknown) => void) {
    this.#client = client;
    this.cluster = isCluster(client);
    this.#onError = onError;
  }

  #send(firstKey: string | undefined, args: string[]): Promise<unknown> {
    const client = this.#client;
    if (isCluster(client)) return client.sendCommand(firstKey, false, args);
    if (isSentinel(client)) return client.sendCommand(false, args);
    return client.sendCommand(args);
  }

  evalsha(sha: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.#send(keys[0], ['EVALSHA', sha, String(keys.length), ...keys, ...args.map(String)]);
  }

  eval(source: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.#send(keys[0], ['EVAL', source, String(keys.length), ...keys, ...args.map(String)]);
  }

  async serverMajorVersion(): Promise<number> {
    const info = await this.#send(undefined, ['INFO', 'server']);
    return majorFromInfo(String(info));
  }

  openSubscriber(sharded: boolean, onMessage: (channel: string, message: string) => void): Subscriber {
    const client = this.#client;
    const listener: Listener = (message, channel) => onMessage(channel, message);
    if (isSentinel(client)) {
      // A Sentinel client keeps its own pub/sub connection to the current master (and moves it
      // on failover); it is the caller's, so closing only drops our channels.
      const channels = new Set<string>();
      return {
        subscribe: async (channel) => {
          channels.add(channel);
          await client.subscribe(channel, listener);
        },
        unsubscribe: async (channel) => {
          channels.delete(channel);
          await client.unsubscribe(channel, listener);
        },
        close: async () => {
          await Promise.all([...channels].map((c) => client.unsubscribe(c, listener).catch(() => undefined)));
          channels.clear();
        },
      };
    }
    const sub = client.duplicate();
    sub.on('error', this.#onError);
    let connected: Promise<unknown> | undefined;
    const ready = () => {
      connected ??= sub.connect().catch((error: unknown) => {
        connected = undefined;
        throw error;
      });
      return connected;
    };
    return {
      subscribe: async (channel) => {
        await ready();
        await (sharded ? sub.sSubscribe(channel, listener) : sub.subscribe(channel, listener));
      },
      unsubscribe: async (channel) => {
        if (!sub.isOpen) return;
        await (sharded ? sub.sUnsubscribe(channel, listener) : sub.unsubscribe(channel, listener));
      },
      close: async () => {
        if (!connected) return;
        await connected.catch(() => {});
        if (typeof sub.destroy === 'function') sub.destroy();
        else await sub.disconnect?.();
      },
    };
  }
}
