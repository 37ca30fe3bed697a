import { DEFAULTS } from '../../core/defaults.js';
import { duration } from '../../core/validate.js';
import type { BackendEntry } from '../backend.js';
import { type EtcdBackend, type EtcdClient, type EtcdSetup, isEtcd3, isEtcdSetup } from './client.js';
import { EtcdStore } from './etcd-store.js';

export type { EtcdBackend, EtcdSetup };

/** The client and the session's TTL of what was passed. */
function setupOf(input: unknown): { client: EtcdClient; sessionTtl: number } {
  // Structurally checked here; EtcdClientFits checks the rest at compile time.
  if (isEtcd3(input)) return { client: input as unknown as EtcdClient, sessionTtl: DEFAULTS.ttl };
  if (!isEtcdSetup(input)) throw new TypeError('not an etcd3 client');
  const sessionTtl = input.sessionTtl === undefined ? DEFAULTS.ttl : duration(input.sessionTtl, 'sessionTtl', 1);
  return { client: input.etcd as unknown as EtcdClient, sessionTtl };
}

/** An etcd3 client (or a namespace of one), or `{ etcd, sessionTtl }`: a store over it, with the Leasehold's settings. */
export const etcdBackend: BackendEntry = {
  describe: 'an etcd3 client',
  detect: (input) => isEtcd3(input) || isEtcdSetup(input),
  create: (input, options) => {
    const { client, sessionTtl } = setupOf(input);
    return { store: new EtcdStore(client, { ...options, sessionTtl }), owned: true };
  },
};
