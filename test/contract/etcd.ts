import { Etcd3 } from 'etcd3';
import { KeySpace } from '../../src/store/etcd/keys.js';
import { admitted, readLine } from '../../src/store/etcd/line.js';
import { type EtcdServer, startEtcd } from '../harness/index.js';
import type { ContractBackend } from './backends.js';

/**
 * The contract suite's etcd: one real etcd member, a fresh etcd3 client per Leasehold. Tokens are
 * create revisions from etcd's raft log (`tokens: 'log'`): small numbers, monotonic across restarts
 * by construction.
 */

/** A lock's line of contenders as the store lays it out (the store's own key builder). */
function line(prefix: string, name: string): { start: Buffer; end: Buffer } {
  return new KeySpace(Buffer.alloc(0), prefix).lock(name).queue;
}

/**
 * The watchers a client has registered with etcd (its watch manager's list, behind the client's
 * back, as PUBSUB NUMSUB looks behind a Redis subscriber's): those whose key falls in `range`.
 */
export function watchersIn(client: Etcd3, range: { start: Buffer; end: Buffer }): number {
  const manager = (client as unknown as { watchManager: { watchers: { request: { key?: Buffer } }[] } }).watchManager;
  return manager.watchers.filter(({ request: { key } }) => {
    return key !== undefined && key.compare(range.start) >= 0 && key.compare(range.end) < 0;
  }).length;
}

/** A contract backend over `endpoints`; `server` is stopped by close() when given. */
export function etcdBackendOn(endpoints: readonly string[], server?: { stop(): Promise<void> }): ContractBackend {
  const clients: Etcd3[] = [];
  const raw = new Etcd3({ hosts: [...endpoints] });
  return {
    label: 'etcd3',
    tokens: 'log',
    client: async () => {
      const client = new Etcd3({ hosts: [...endpoints] });
      clients.push(client);
      // Connected before it is handed out, as the Redis adapters' clients are.
      await client.get('leasehold-contract-probe').string();
      return client;
    },
    expire: async (prefix, name) => {
      // Delete the holder's key (the first in line), as an operator or a lost session would.
      const { start, end } = line(prefix, name);
      const first = await raw.kv.range({ key: start, range_end: end, sort_target: 'Create', sort_order: 'Ascend' });
      const holder = first.kvs[0];
      if (holder) await raw.kv.deleteRange({ key: holder.key });
    },
    subscriptions: async (prefix, name) => clients.reduce((n, c) => n + watchersIn(c, line(prefix, name)), 0),
    // Waiters queued: every key in line that holds nothing and may not yet (the first, or a
    // shared waiter with room, is the one handed the lock).
    queued: async (prefix, name) => {
      const { start, end } = line(prefix, name);
      const range = await raw.kv.range({ key: start, range_end: end, sort_target: 'Create', sort_order: 'Ascend' });
      const keys = readLine(range.kvs);
      const ready = admitted(keys);
      return keys.filter((k) => k.member.takenAt === null && !ready.includes(k)).length;
    },
    close: async () => {
      for (const client of clients.splice(0)) client.close();
      raw.close();
      await server?.stop();
    },
  };
}

export async function etcdBackend(): Promise<ContractBackend> {
  const server: EtcdServer = await startEtcd();
  return etcdBackendOn(server.endpoints, server);
}
