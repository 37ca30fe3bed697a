import { Etcd3, type IKeyValue } from 'etcd3';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { Leasehold, type LeaseholdOptions } from '../../src/index.js';
import { KeySpace } from '../../src/store/etcd/keys.js';

/** What every etcd test file starts: a server (or cluster), a raw client on it, Leaseholds closed after each case. */
export interface EtcdFixture<S> {
  /** The server or cluster, once started. */
  server(): S;
  /** A client of the test's own, for looking behind the locks' backs. */
  raw(): Etcd3;
  /** A Leasehold on a fresh client, with the session given; closed (with its client) after the case. */
  leasehold(prefix: string, sessionTtl: number, options?: LeaseholdOptions): Leasehold;
  /** Run after the case, last registered first. */
  cleanup(...steps: Array<() => unknown>): void;
  /** The keys in line for lock `name` of `prefix`, oldest (the holder's) first. */
  line(prefix: string, name: string): Promise<IKeyValue[]>;
}

/** Hooks for one describe block: `start` once before all cases, `stop` after them; `between` after each. */
export function etcdFixture<S extends { readonly endpoints: readonly string[]; stop(): Promise<void> }>(
  start: () => Promise<S>,
  between: (server: S) => Promise<void> = async () => {},
): EtcdFixture<S> {
  let server: S | undefined;
  let raw: Etcd3 | undefined;
  const cleanups: Array<() => unknown> = [];
  beforeAll(async () => {
    server = await start();
    raw = new Etcd3({ hosts: [...server.endpoints] });
  });
  afterEach(async () => {
    for (const step of cleanups.splice(0).reverse()) await step();
    if (server) await between(server);
  });
  afterAll(async () => {
    raw?.close();
    await server?.stop();
  });
  const started = (): S => {
    if (!server) throw new Error('the etcd fixture has not started');
    return server;
  };
  return {
    server: started,
    raw: () => raw as Etcd3,
    leasehold: (prefix, sessionTtl, options = {}) => {
      const client = new Etcd3({ hosts: [...started().endpoints] });
      const locks = new Leasehold({ etcd: client, sessionTtl }, { prefix, ...options });
      cleanups.push(() => client.close());
      cleanups.push(() => locks.close());
      return locks;
    },
    cleanup: (...steps) => {
      cleanups.push(...steps);
    },
    line: async (prefix, name) => {
      const { start: key, end } = new KeySpace(Buffer.alloc(0), prefix).lock(name).queue;
      const range = await (raw as Etcd3).kv.range({ key, range_end: end, sort_target: 'Create', sort_order: 'Ascend' });
      return range.kvs;
    },
  };
}
