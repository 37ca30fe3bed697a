import type { Etcd3 } from 'etcd3';

/**
 * What the etcd store needs from an `etcd3` client (an `Etcd3`, or a `Namespace` of one): its raw
 * KV and Lease RPC clients and its watch builder. Structural, so etcd3 stays an optional peer and
 * nothing of it is loaded at run time beyond the object the caller passes. Every int64 travels as
 * a decimal string, as etcd3 decodes them (`longs: String`).
 */

/** A key as etcd stores it; revisions and the lease ID are int64 decimal strings. */
export interface EtcdKeyValue {
  readonly key: Buffer;
  readonly create_revision: string;
  readonly mod_revision: string;
  readonly value: Buffer;
  readonly lease: string;
}

export interface EtcdHeader {
  readonly revision: string;
}

export interface RangeRequest {
  key: Buffer;
  range_end?: Buffer;
  limit?: number;
  sort_order?: 'Ascend' | 'Descend';
  sort_target?: 'Key' | 'Create';
  keys_only?: boolean;
  count_only?: boolean;
  max_create_revision?: string;
}

export interface RangeResponse {
  readonly header: EtcdHeader;
  readonly kvs: readonly EtcdKeyValue[];
  readonly more: boolean;
  readonly count: string;
}

export interface Compare {
  key: Buffer;
  range_end?: Buffer;
  target: 'Create' | 'Value' | 'Lease' | 'Version';
  result: 'Equal' | 'Greater' | 'Less' | 'NotEqual';
  create_revision?: string;
  value?: Buffer;
  lease?: string;
  version?: string;
}

export interface RequestOp {
  request_range?: RangeRequest;
  request_put?: { key: Buffer; value: Buffer; lease?: string };
  request_delete_range?: { key: Buffer; range_end?: Buffer };
  request_txn?: TxnRequest;
}

export interface TxnRequest {
  compare: Compare[];
  success: RequestOp[];
  failure: RequestOp[];
}

export interface ResponseOp {
  readonly response_range?: RangeResponse | null;
  readonly response_put?: unknown;
  readonly response_delete_range?: { readonly deleted: string } | null;
  readonly response_txn?: TxnResponse | null;
}

export interface TxnResponse {
  readonly header: EtcdHeader;
  readonly succeeded: boolean;
  readonly responses: readonly ResponseOp[];
}

export interface KeepAliveStream {
  write(item: { ID: string }): void;
  end(): void;
  cancel(): void;
  on(event: 'data', fn: (response: { readonly ID: string; readonly TTL: string }) => void): this;
  on(event: 'error', fn: (error: Error) => void): this;
  on(event: 'end', fn: () => void): this;
}

/** A watcher (an EventEmitter): 'delete' for each deletion it sees, 'error' when etcd cancels it. */
export interface Watcher {
  addListener(event: 'delete' | 'error', fn: (...args: unknown[]) => void): unknown;
  removeListener(event: 'delete' | 'error', fn: (...args: unknown[]) => void): unknown;
  cancel(): Promise<void>;
}

export interface WatchBuilder {
  /** A key relative to the client's namespace. */
  key(key: Buffer): this;
  /** Every key that starts with `key` (relative to the client's namespace). */
  prefix(key: Buffer): this;
  startRevision(revision: string): this;
  only(...operations: 'delete'[]): this;
  create(): Promise<Watcher>;
}

export interface EtcdClient {
  readonly kv: {
    range(request: RangeRequest): Promise<RangeResponse>;
    txn(request: TxnRequest): Promise<TxnResponse>;
  };
  readonly leaseClient: {
    leaseGrant(request: { TTL: number }): Promise<{ readonly ID: string; readonly TTL: string }>;
    leaseRevoke(request: { ID: string }): Promise<unknown>;
    leaseKeepAlive(): Promise<KeepAliveStream>;
    leaseTimeToLive(request: { ID: string }): Promise<{ readonly TTL: string }>;
  };
  watch(): WatchBuilder;
  /** The namespace's key prefix (empty for the client itself); the raw RPC clients do not add it. */
  readonly prefix?: Buffer;
}

/**
 * An `etcd3` client (`new Etcd3(…)`) or a namespace of one (`client.namespace('app/')`, whose
 * prefix comes before every key). Structural, so etcd3 stays an optional peer: these are the
 * members `new Leasehold(…)` recognises it by.
 */
export interface EtcdClientBackend {
  readonly kv: { txn(...args: never[]): unknown };
  readonly leaseClient: { leaseGrant(...args: never[]): unknown };
  watch(): unknown;
}

/** etcd with settings: `new Leasehold({ etcd: client, sessionTtl: 10_000 })`. */
export interface EtcdSetup {
  readonly etcd: EtcdClientBackend;
  /**
   * ms the store's session lease lives unrenewed, in whole seconds (rounded up; etcd may raise it
   * to its minimum, 1.5 election timeouts): how long a crashed or frozen process keeps its locks
   * and its places in line. Locks with a longer ttl live on a lease of their own length. Default 30_000.
   */
  readonly sessionTtl?: number | undefined;
}

/** What `new Leasehold(…)` takes for etcd: an etcd3 client (or namespace), or one with settings. */
export type EtcdBackend = EtcdClientBackend | EtcdSetup;

export function isEtcd3(input: unknown): input is EtcdClientBackend {
  if (typeof input !== 'object' || input === null) return false;
  const c = input as { kv?: { txn?: unknown }; leaseClient?: { leaseGrant?: unknown }; watch?: unknown };
  return (
    typeof c.watch === 'function' && typeof c.kv?.txn === 'function' && typeof c.leaseClient?.leaseGrant === 'function'
  );
}

export function isEtcdSetup(input: unknown): input is EtcdSetup {
  return typeof input === 'object' && input !== null && isEtcd3((input as { etcd?: unknown }).etcd);
}

/** Where the client connects, for messages (its `hosts` option), when it can be read. */
export function addressOf(input: unknown): string {
  const hosts = (input as { options?: { hosts?: unknown } }).options?.hosts;
  if (typeof hosts === 'string') return hosts;
  if (Array.isArray(hosts)) return hosts.join(',');
  return 'etcd';
}

/** A compile-time check that the etcd3 client fits both views of it (type-only: nothing is loaded). */
type Assert<T extends true> = T;
export type EtcdClientFits = Assert<Etcd3 extends EtcdClient & EtcdClientBackend ? true : false>;
