import type { BackendEntry } from '../backend.js';
import { IORedisConnection, isIORedis } from './ioredis-adapter.js';
import { isNodeRedis, NodeRedisConnection } from './node-redis-adapter.js';
import { RedisStore } from './redis-store.js';

/**
 * An ioredis `Redis` (standalone or Sentinel) or `Cluster`. Structural, so ioredis stays an
 * optional peer: these are the members `new Leasehold(…)` recognises an ioredis client by.
 */
export interface IORedisBackend {
  readonly isCluster: boolean;
  evalsha(...args: never[]): unknown;
}

/**
 * A node-redis (v4.6 and later) client, cluster or Sentinel client: what `createClient()`,
 * `createCluster()` and `createSentinel()` return. Structural, so redis stays an optional peer:
 * these are the members `new Leasehold(…)` recognises a node-redis client by.
 */
export interface NodeRedisBackend {
  readonly isOpen: boolean;
  sendCommand(...args: never[]): unknown;
}

export const ioredisBackend: BackendEntry = {
  describe: 'an ioredis client or cluster',
  detect: isIORedis,
  create: (input, options) => {
    if (!isIORedis(input)) throw new TypeError('not an ioredis client');
    return { store: new RedisStore(new IORedisConnection(input, options.onError), options), owned: true };
  },
};

export const nodeRedisBackend: BackendEntry = {
  describe: 'a node-redis client or cluster',
  detect: isNodeRedis,
  create: (input, options) => {
    if (!isNodeRedis(input)) throw new TypeError('not a node-redis client');
    return { store: new RedisStore(new NodeRedisConnection(input, options.onError), options), owned: true };
  },
};
