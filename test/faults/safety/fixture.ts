import { Redis, type RedisOptions } from 'ioredis';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { EvictionCheck } from '../../../src/store/eviction-check.js';
import type { SingleOptions } from '../../../src/topology/single.js';
import { type RedisServer, startProxy, startRedis, type TcpProxy } from '../../harness/index.js';

/** `defer(fn)`: run `fn` after the current test, newest first, whatever its outcome. */
export function deferrals(): (fn: () => unknown) => void {
  const pending: Array<() => unknown> = [];
  afterEach(async () => {
    for (const fn of pending.splice(0).reverse()) await Promise.resolve(fn()).catch(() => undefined);
  });
  return (fn) => {
    pending.push(fn);
  };
}

/** An ioredis client on `port` that swallows connection errors (a test reads them from the library). */
export function ioredis(port: number, options: RedisOptions = {}): Redis {
  const client = new Redis(port, '127.0.0.1', options);
  client.on('error', () => {});
  return client;
}

/** One redis-server for the tests of a describe block, and an admin client on it for raw reads. */
export interface SuiteServer {
  readonly server: RedisServer;
  readonly admin: Redis;
}

/** Start a redis-server and its admin client before the block's tests; stop both after them. */
export function suiteServer(): SuiteServer {
  let started: SuiteServer | undefined;
  beforeAll(async () => {
    const server = await startRedis();
    started = { server, admin: ioredis(server.port) };
  });
  afterAll(async () => {
    started?.admin.disconnect();
    await started?.server.stop();
  });
  const get = (): SuiteServer => {
    if (!started) throw new Error('the suite’s redis-server is started in beforeAll: read it in a test');
    return started;
  };
  return {
    get server() {
      return get().server;
    },
    get admin() {
      return get().admin;
    },
  };
}

/** A TCP proxy in front of `server` with `latency` ms each way, and an ioredis client through it. */
export async function slowPath(server: RedisServer, latency: number): Promise<{ proxy: TcpProxy; client: Redis }> {
  const proxy = await startProxy({ host: server.host, port: server.port });
  const client = ioredis(proxy.port);
  await client.ping();
  proxy.setLatency(latency);
  return { proxy, client };
}

/** A single-store engine's settings as an instance with the defaults has them (the store's are the store's own). */
export function singleOptions(): SingleOptions {
  return {
    commandTimeout: DEFAULTS.commandTimeout,
    driftFactor: DEFAULTS.driftFactor,
    driftConstant: DEFAULTS.driftConstant,
    eviction: new EvictionCheck([], 'ignore', () => {}),
  };
}

export { blockFor } from '../../harness/index.js';
