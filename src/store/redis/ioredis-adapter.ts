import type { RedisConnection, Subscriber } from './connection.js';

/** The parts of an ioredis `Redis` or `Cluster` this adapter uses (structural, so ioredis stays optional). */
export interface IORedisLike {
  readonly isCluster: boolean;
  evalsha(sha: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(source: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  info(section: string): Promise<string>;
  duplicate(...args: unknown[]): IORedisLike;
  subscribe(...channels: string[]): Promise<unknown>;
  unsubscribe(...channels: string[]): Promise<unknown>;
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  disconnect(): void;
}

export function isIORedis(client: unknown): client is IORedisLike {
  const c = client as Partial<IORedisLike> | null;
  return typeof c === 'object' && c !== null && typeof c.evalsha === 'function' && typeof c.isCluster === 'boolean';
}

export function majorFromInfo(info: string): number {
  const match = /redis_version:(\d+)/.exec(info);
  return match?.[1] ? Number(match[1]) : 0;
}

export class IORedisConnection implements RedisConnection {
  readonly kind = 'ioredis';
  readonly cluster: boolean;
  readonly #client: IORedisLike;
  readonly #onError: (error: unknown) => void;

  constructor(client: IORedisLike, onError: (error: unknown) => void) {
    this.#client = client;
    this.cluster = client.isCluster;
    this.#onError = onError;
  }

  evalsha(sha: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.#client.evalsha(sha, keys.length, ...keys, ...args);
  }

  eval(source: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return this.#client.eval(source, keys.length, ...keys, ...args);
  }

  async serverMajorVersion(): Promise<number> {
    return majorFromInfo(await this.#client.info('server'));
  }

  openSubscriber(sharded: boolean, onMessage: (channel: string, message: string) => void): Subscriber {
    // A subscribed connection can run nothing else, so waiting gets a connection of its own.
    // On a cluster, sharded subscribers connect to the node that owns each channel's slot.
    const sub =
      this.cluster && sharded
        ? this.#client.duplicate(undefined, { shardedSubscribers: true })
        : this.#client.duplicate();
    sub.on('error', this.#onError);
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
