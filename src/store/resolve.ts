import { invalidArgument } from '../core/errors.js';
import { show } from '../core/validate.js';
import { isStore, type Store } from './port.js';
import { IORedisConnection, isIORedis } from './redis/ioredis-adapter.js';
import { isNodeRedis, NodeRedisConnection } from './redis/node-redis-adapter.js';
import { RedisStore } from './redis/redis-store.js';

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

/**
 * What `Leasehold` accepts as a backend: an ioredis Redis or Cluster, a node-redis client, cluster
 * or Sentinel client, or a Store such as `new MemoryStore()`; an array of these runs Redlock.
 */
export type Backend = Store | IORedisBackend | NodeRedisBackend;

/** A Store for the backend, and whether we opened it (so `close()` closes only what is ours). */
export function resolveStore(backend: unknown, onError: (error: unknown) => void): { store: Store; owned: boolean } {
  if (isStore(backend)) return { store: backend, owned: false };
  if (isIORedis(backend))
    return { store: new RedisStore(new IORedisConnection(backend, onError), onError), owned: true };
  if (isNodeRedis(backend))
    return { store: new RedisStore(new NodeRedisConnection(backend, onError), onError), owned: true };
  throw invalidArgument(
    `expected an ioredis client or cluster, a node-redis client or cluster, or a Store such as new MemoryStore(), got ${show(backend)}`,
  );
}
