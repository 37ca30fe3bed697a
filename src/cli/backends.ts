import { DEFAULTS } from '../core/defaults.js';
import { StoreUnavailableError } from '../core/errors.js';
import { bounded } from '../store/bounded.js';
import { portsOf } from '../store/port.js';
import { resolveStore } from '../store/registry.js';
import { type Operator, operatorSettings } from './operator.js';
import { loadOptional } from './redis.js';

/** A backend the operator commands reach by URL besides Redis. */
export type StoreKind = 'postgres' | 'etcd';

interface PgModule {
  default: { Pool: new (options: { connectionString: string; max?: number }) => PgPool };
}
interface PgPool {
  query(sql: string): Promise<unknown>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: unknown) => void): unknown;
}
interface EtcdModule {
  Etcd3: new (options: { hosts: string | string[]; dialTimeout?: number }) => { close(): void };
}

const PACKAGES: Readonly<Record<StoreKind, string>> = { postgres: 'pg', etcd: 'etcd3' };

/** A client for `kind` at `url`, and how to end it; the package is an optional peer, loaded here. */
export async function openClient(kind: StoreKind, url: string): Promise<{ client: unknown; end(): Promise<void> }> {
  const name = PACKAGES[kind];
  if (kind === 'postgres') {
    const pg = await loadOptional<PgModule>(name);
    if (!pg) throw new Error('the --postgres commands need the pg package: npm install pg');
    const pool = new pg.default.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {});
    return { client: pool, end: () => pool.end() };
  }
  const etcd3 = await loadOptional<EtcdModule>(name);
  if (!etcd3) throw new Error('the --etcd commands need the etcd3 package: npm install etcd3');
  const etcd = new etcd3.Etcd3({ hosts: url.split(','), dialTimeout: DEFAULTS.commandTimeout });
  return { client: etcd, end: async () => etcd.close() };
}

/** The operator commands on a PostgreSQL or etcd store: the same ports as on Redis, by lock name. */
export async function openStoreOperator(kind: StoreKind, url: string, prefix: string): Promise<Operator> {
  const { client, end } = await openClient(kind, url);
  const { store } = resolveStore(
    client,
    operatorSettings(prefix, () => {}),
  );
  const { admin, jobs } = portsOf(store);
  if (!admin || !jobs) {
    await store.close();
    await end();
    throw new Error(`the ${store.kind} store cannot list, force-release or read job history`);
  }
  const ms = DEFAULTS.commandTimeout;
  const bound = <T>(promise: Promise<T>, action: string) => bounded(store, promise, action, ms);
  // The first call tells a server that does not answer from one that does.
  await bound(store.inspect('leasehold-cli-probe'), 'connect').catch(async (error: unknown) => {
    await store.close();
    await end();
    throw error instanceof StoreUnavailableError ? error : new StoreUnavailableError(`${kind} at ${url}: ${error}`);
  });
  return {
    url,
    prefix,
    topology: 'standalone',
    lease: store,
    admin,
    jobs,
    scanned: 1,
    async *scanLocks(match, count) {
      const pages = admin.scanLocks(match, count)[Symbol.asyncIterator]();
      for (;;) {
        const next = await bound(pages.next(), 'scan-locks');
        if (next.done) return;
        yield next.value;
      }
    },
    keyOf: (name) => store.locate?.(name) ?? name,
    bounded: bound,
    onLost: () => () => {},
    close: async () => {
      await store.close();
      await end();
    },
  };
}
