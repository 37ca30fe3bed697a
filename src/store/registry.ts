import { invalidArgument } from '../core/errors.js';
import { show } from '../core/validate.js';
import type { BackendEntry, BackendOptions } from './backend.js';
import { type EtcdBackend, etcdBackend } from './etcd/backend.js';
import { storeBackend } from './memory/backend.js';
import type { Store } from './port.js';
import { type PostgresBackend, postgresBackend } from './postgres/backend.js';
import { type IORedisBackend, ioredisBackend, type NodeRedisBackend, nodeRedisBackend } from './redis/backend.js';

export type { BackendEntry, BackendOptions, IORedisBackend, NodeRedisBackend };

/** Every backend `new Leasehold(x)` knows, asked in order. Adding a backend is one line here. */
const BACKENDS: readonly BackendEntry[] = [
  ioredisBackend,
  nodeRedisBackend,
  storeBackend,
  postgresBackend,
  etcdBackend,
];

/**
 * What `Leasehold` accepts as a backend: an ioredis Redis or Cluster, a node-redis client, cluster
 * or Sentinel client, or a Store such as `new MemoryStore()`; an array of these runs Redlock.
 */
export type Backend = Store | IORedisBackend | NodeRedisBackend | PostgresBackend | EtcdBackend;

/** A Store for `input`, from the first backend that recognises it. */
export function resolveStore(input: unknown, options: BackendOptions): { store: Store; owned: boolean } {
  const backend = BACKENDS.find((b) => b.detect(input));
  if (backend) return backend.create(input, options);
  const expected = BACKENDS.map((b) => b.describe);
  const list = `${expected.slice(0, -1).join(', ')}, or ${expected.at(-1)}`;
  throw invalidArgument(`expected ${list}, got ${show(input)}`);
}
