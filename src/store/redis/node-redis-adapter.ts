import { ClientConnection, type RedisConnection, type Subscriber } from './connection.js';
import { majorFromInfo } from './info.js';

type Listener = (message: string, channel: string) => void;

/** The parts of a node-redis client (v4 and later) this adapter uses. */
interface NodeRedisCommon {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  readonly options?: unknown;
  duplicate(): NodeRedisCommon;
  connect(): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  off(event: string, listener: (...args: never[]) => void): unknown;
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
  readonly masters: readonly unknown[];
  nodeClient(node: unknown): Promise<NodeRedisClientLike> | NodeRedisClientLike;
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

/** 'host:port' of a client, or the root nodes of a cluster, for messages. */
function addressOf(client: NodeRedisLike): string {
  // A cluster client keeps its options as `_options`.
  const o = (client.options ?? (client as { _options?: unknown })._options ?? {}) as {
    url?: unknown;
    socket?: { host?: unknown; port?: unknown; path?: unknown };
    rootNodes?: readonly { url?: unknown; socket?: { host?: unknown; port?: unknown } }[];
    name?: unknown;
  };
  if (Array.isArray(o.rootNodes)) {
    return o.rootNodes
      .map((n) =>
        typeof n.url === 'string'
          ? n.url
          : `${String(n.socket?.host ?? 'localhost')}:${String(n.socket?.port ?? 6379)}`,
      )
      .join(',');
  }
  if (typeof o.name === 'string' && isSentinel(client)) return `sentinel master ${o.name}`;
  if (typeof o.url === 'string') return o.url.replace(/\/\/[^@/]*@/, '//');
  if (typeof o.socket?.path === 'string') return o.socket.path;
  return `${String(o.socket?.host ?? 'localhost')}:${String(o.socket?.port ?? 6379)}`;
}

export class NodeRedisConnection extends ClientConnection implements RedisConnection {
  readonly kind = 'node-redis';
  readonly #client: NodeRedisLike;

  constructor(client: NodeRedisLike, onError: (error: unknown) => void) {
    // node-redis requires its user to listen for 'error'; ours only remembers the last one.
    super(client, {
      cluster: isCluster(client),
      address: addressOf(client),
      onError,
      // Not open: the client rejects at once (ClientClosedError). A cluster client has no isReady;
      // a Sentinel client emits no 'ready' to send held calls on, so its calls are never held.
      flowing: () =>
        !client.isOpen ||
        isSentinel(client) ||
        client.isReady !== false ||
        (client.options as { disableOfflineQueue?: unknown } | undefined)?.disableOfflineQueue === true,
    });
    this.#client = client;
  }

  down(): Error | undefined {
    const client = this.#client;
    if (!client.isOpen) return new Error(`the node-redis client for ${this.address} is not open (connect() it first)`);
    return client.isReady !== false ? undefined : this.refusal();
  }

  async infoOfMasters(section: string): Promise<string[]> {
    const client = this.#client;
    if (!isCluster(client)) return [String(await this.#send(undefined, ['INFO', section]))];
    return Promise.all(
      client.masters.map(async (node) => String(await (await client.nodeClient(node)).sendCommand(['INFO', section]))),
    );
  }

  alongside(key: string, args: readonly (string | number)[]): Promise<unknown> {
    return this.#send(key, args.map(String));
  }

  #send(firstKey: string | undefined, args: string[]): Promise<unknown> {
    return this.admit(() => this.#sendNow(firstKey, args));
  }

  #sendNow(firstKey: string | undefined, args: string[]): Promise<unknown> {
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

  fcall(fn: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.#send(keys[0], ['FCALL', fn, String(keys.length), ...keys, ...args.map(String)]);
  }

  async loadFunctions(source: string): Promise<void> {
    const client = this.#client;
    const command = ['FUNCTION', 'LOAD', 'REPLACE', source];
    if (!isCluster(client)) {
      await this.#send(undefined, command);
      return;
    }
    if (client.masters.length === 0) throw new Error('the cluster client knows no master yet');
    await Promise.all(client.masters.map(async (node) => (await client.nodeClient(node)).sendCommand(command)));
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
    sub.on('error', this.onError);
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
