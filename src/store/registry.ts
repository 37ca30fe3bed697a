import { invalidArgument } from '../core/errors.js';
import { show } from '../core/validate.js';
import { storeBackend } from './memory/backend.js';
import type { Store } from './port.js';
import { type IORedisBackend, ioredisBackend, type NodeRedisBackend, nodeRedisBackend } from './redis/backend.js';

export type { IORedisBackend, NodeRedisBackend };

/** What a backend is built with: the Leasehold's prefix and where background failures go. */
export interface BackendOptions {
  readonly prefix: string;
  readonly onError: (error: unknown) => void;
}

/** One kind of backend: how to recognise its client, and how to build a Store over it. */
export interface BackendEntry {
  /** What the backend is, for the message when nothing matches. */
  readonly describe: string;
  detect(input: unknown): boolean;
  /** The store, and whether we opened it (so `close()` closes only what is ours). */
  create(input: unknown, options: BackendOptions): { readonly store: Store; readonly owned: boolean };
}

/** Every backend `new Leasehold(x)` knows, asked in order. Adding a backend is one line here. */
const BACKENDS: readonly BackendEntry[] = [ioredisBackend, nodeRedisBackend, storeBackend];

/**
 * What `Leasehold` accepts as a backend: an ioredis Redis or Cluster, a node-redis client, cluster
 * or Sentinel client, or a Store such as `new MemoryStore()`; an array of these runs Redlock.
 */
export type Backend = Store | IORedisBackend | NodeRedisBackend;

/** A Store for `input`, from the first backend that recognises it. */
export function resolveStore(input: unknown, options: BackendOptions): { store: Store; owned: boolean } {
  const backend = BACKENDS.find((b) => b.detect(input));
  if (backend) return backend.create(input, options);
  const expected = BACKENDS.map((b) => b.describe);
  const list = `${expected.slice(0, -1).join(', ')}, or ${expected.at(-1)}`;
  throw invalidArgument(`expected ${list}, got ${show(input)}`);
}
