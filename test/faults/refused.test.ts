import { Cluster, Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode, Leasehold, StoreUnavailableError } from '../../src/index.js';
import { lockKeys } from '../../src/store/index.js';
import { freePort, randomPrefix, startProxy, startRedis, waitFor } from '../harness/index.js';

/**
 * A client pointing at a port nobody listens on learns of ECONNREFUSED within a millisecond; the
 * first call made on it must fail then, with that error as its cause, not after the whole
 * commandTimeout it would spend in the client's offline queue. A client that recovers (the server
 * starts, a connection is reset) keeps working.
 */

/** Long enough that a call which waits for it stands apart from one that fails on the refusal. */
const COMMAND_TIMEOUT = 5_000;
/** A call that fails on the refusal returns within a fifth of commandTimeout. */
const PROMPT = COMMAND_TIMEOUT / 5;
/** The most either client's default reconnection strategy waits between attempts (node-redis adds up to 200 ms of jitter). */
const MAX_RECONNECT_DELAY = 2_200;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Client = Redis | Cluster | ReturnType<typeof createClient>;

/** A fresh client of `kind` pointing at `port`, disconnected after the test. */
function clientOf(kind: string, port: number): Client {
  if (kind === 'node-redis') {
    const client = createClient({ socket: { host: '127.0.0.1', port } });
    client.on('error', () => {});
    // As an application does at startup, without waiting: connect() retries until a server answers.
    client.connect().catch(() => undefined);
    cleanups.push(() => client.destroy());
    return client;
  }
  let client: Redis | Cluster;
  if (kind === 'ioredis Cluster') client = new Cluster([{ host: '127.0.0.1', port }]);
  else if (kind === 'ioredis Sentinel') client = new Redis({ sentinels: [{ host: '127.0.0.1', port }], name: 'main' });
  else client = new Redis({ host: '127.0.0.1', port, lazyConnect: kind === 'ioredis lazyConnect' });
  client.on('error', () => {});
  cleanups.push(() => client.disconnect());
  return client;
}

function leasehold(client: Client, prefix = randomPrefix()): Leasehold {
  const locks = new Leasehold(client as Redis, { prefix, commandTimeout: COMMAND_TIMEOUT });
  cleanups.push(() => locks.close());
  return locks;
}

/** Calls succeed again: a lock taken and given back (calls fail fast until the client's next reconnection attempt). */
function answering(locks: Leasehold, message: string): Promise<void> {
  return waitFor(
    async () => {
      const probe = await locks.tryAcquire('probe');
      return probe !== null && (await probe.release());
    },
    { timeout: COMMAND_TIMEOUT + 2 * MAX_RECONNECT_DELAY, message },
  );
}

/** What the client reported: its refused connection (standalone), or that it reached no node or Sentinel. */
const CAUSES: Record<string, (cause: unknown) => void> = {
  ioredis: (cause) => expect(cause).toMatchObject({ code: 'ECONNREFUSED' }),
  'ioredis lazyConnect': (cause) => expect(cause).toMatchObject({ code: 'ECONNREFUSED' }),
  'node-redis': (cause) => expect(cause).toMatchObject({ code: 'ECONNREFUSED' }),
  // ioredis's Cluster and Sentinel clients keep no code: their own error says every node failed.
  'ioredis Cluster': (cause) =>
    expect(cause).toMatchObject({ name: 'ClusterAllFailedError', lastNodeError: { message: 'Connection is closed.' } }),
  'ioredis Sentinel': (cause) =>
    expect((cause as Error).message).toMatch(/^All sentinels are unreachable\b.*Last error: Connection is closed\./),
};

describe('a refused connection fails the first call at once', () => {
  for (const kind of Object.keys(CAUSES)) {
    it(`${kind}: acquire rejects with STORE_UNAVAILABLE, the client's error as cause, well before commandTimeout`, async () => {
      const locks = leasehold(clientOf(kind, await freePort()));
      const started = performance.now();
      const error = await locks.acquire('refused').catch((e: unknown) => e);
      const took = performance.now() - started;
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as StoreUnavailableError).code).toBe(ErrorCode.STORE_UNAVAILABLE);
      CAUSES[kind]?.((error as StoreUnavailableError).cause);
      expect(took).toBeLessThan(PROMPT);
    });

    it(`${kind}: withLock with whenUnavailable 'skip' skips at once`, async () => {
      const locks = leasehold(clientOf(kind, await freePort()));
      let ran = false;
      const started = performance.now();
      const value = await locks.withLock('refused', { whenUnavailable: 'skip' }, async () => {
        ran = true;
      });
      const took = performance.now() - started;
      expect(value).toBeUndefined();
      expect(ran).toBe(false);
      expect(took).toBeLessThan(PROMPT);
    });
  }
});

describe('a client that recovers keeps working', () => {
  for (const kind of ['ioredis', 'node-redis']) {
    it(`${kind}: refused while the server is down; once one starts on the port, acquire succeeds, and the refused call never ran`, async () => {
      const port = await freePort();
      const prefix = randomPrefix();
      const locks = leasehold(clientOf(kind, port), prefix);
      await expect(locks.acquire('later')).rejects.toBeInstanceOf(StoreUnavailableError);

      const server = await startRedis({ port });
      cleanups.push(() => server.stop());
      await answering(locks, 'a call after the server started');
      // Sent on the same connection before the probe, the refused acquire would have left its lock key.
      const keys = lockKeys(prefix, 'later');
      expect(await server.command('EXISTS', keys.lock)).toBe('0');
      const lock = await locks.acquire('later', { ttl: 10_000 });
      expect(await lock.release()).toBe(true);
    });

    it(`${kind}: a connection reset under a healthy client is a blip: it reconnects and the next calls succeed`, async () => {
      const server = await startRedis();
      cleanups.push(() => server.stop());
      const proxy = await startProxy({ host: server.host, port: server.port });
      cleanups.push(() => proxy.close());
      const locks = leasehold(clientOf(kind, proxy.port));
      const first = await locks.acquire('blip', { ttl: 10_000 });
      proxy.resetAll();
      await answering(locks, 'a call after the reset');
      expect(await first.release()).toBe(true);
      const second = await locks.acquire('blip');
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
      expect(await second.release()).toBe(true);
    });
  }
});
