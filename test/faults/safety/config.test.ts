import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import type { Backend } from '../../../src/index.js';
import { ErrorCode, Leasehold, LockError, StoreUnavailableError } from '../../../src/index.js';
import { isReplyError } from '../../../src/store/redis/connection.js';
import { lockKeys } from '../../../src/store/redis/keys.js';
import { freePort, lockRecord, type RedisServer, randomPrefix, startRedis, waitFor } from '../../harness/index.js';
import { deferrals, ioredis } from './fixture.js';

/**
 * What the deployment can do to a lock: an eviction policy that drops lock keys, a server at its
 * memory limit answering OOM, a server that went away. Each is a real redis-server so configured.
 */

type Connect = (server: RedisServer) => Promise<{ client: Backend; close(): Promise<void> }>;

const clients: [string, Connect][] = [
  [
    'ioredis',
    async (server) => {
      const client = ioredis(server.port);
      await client.ping();
      return { client, close: async () => client.disconnect() };
    },
  ],
  [
    'node-redis',
    async (server) => {
      const client = createClient({ url: server.url, socket: { reconnectStrategy: () => 50 } });
      client.on('error', () => {});
      await client.connect();
      return { client, close: async () => void client.destroy() };
    },
  ],
];

function warnings(): { codes: string[]; stop(): void } {
  const codes: string[] = [];
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code) codes.push(warning.code);
  };
  process.on('warning', listener);
  return { codes, stop: () => process.off('warning', listener) };
}

describe('the eviction policy is checked on first use', () => {
  const defer = deferrals();

  async function withPolicy(policy: string): Promise<Redis> {
    const server = await startRedis({ args: ['--maxmemory', '64mb', '--maxmemory-policy', policy] });
    defer(() => server.stop());
    const client = ioredis(server.port);
    defer(() => client.disconnect());
    return client;
  }

  it('volatile-lru: one process warning (LEASEHOLD_EVICTION_POLICY) per instance, acquisitions go on', async () => {
    const client = await withPolicy('volatile-lru');
    const seen = warnings();
    defer(() => seen.stop());
    const locks = new Leasehold(client, { prefix: randomPrefix() });
    defer(() => locks.close());
    await (await locks.acquire('a')).release();
    await (await locks.acquire('b')).release();
    await waitFor(() => seen.codes.includes('LEASEHOLD_EVICTION_POLICY'));
    expect(seen.codes.filter((c) => c === 'LEASEHOLD_EVICTION_POLICY')).toHaveLength(1);
  });

  it("unsafeConfig 'refuse': acquisitions and job runs reject with UNSAFE_CONFIG naming the policy", async () => {
    const client = await withPolicy('allkeys-lru');
    const locks = new Leasehold(client, { prefix: randomPrefix(), unsafeConfig: 'refuse' });
    defer(() => locks.close());
    const error = await locks.acquire('a').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect(error).not.toBeInstanceOf(StoreUnavailableError);
    expect((error as LockError).code).toBe(ErrorCode.UNSAFE_CONFIG);
    expect((error as Error).message).toMatch(/maxmemory-policy allkeys-lru.*noeviction/);
    await expect(locks.tryWithLock('a', { whenUnavailable: 'run' }, () => 1)).rejects.toMatchObject({
      code: ErrorCode.UNSAFE_CONFIG,
    });
    await expect(locks.runOnce('job', () => 1)).rejects.toMatchObject({ code: ErrorCode.UNSAFE_CONFIG });
  });

  it("unsafeConfig 'ignore' and a noeviction server: no warning", async () => {
    const seen = warnings();
    defer(() => seen.stop());
    const unsafe = new Leasehold(await withPolicy('volatile-ttl'), { prefix: randomPrefix(), unsafeConfig: 'ignore' });
    const safe = new Leasehold(await withPolicy('noeviction'), { prefix: randomPrefix(), unsafeConfig: 'refuse' });
    defer(() => unsafe.close());
    defer(() => safe.close());
    await (await unsafe.acquire('a')).release();
    await (await safe.acquire('a')).release();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(seen.codes).not.toContain('LEASEHOLD_EVICTION_POLICY');
  });
});

describe.each(clients)('%s: an error reply from a live server is never "unavailable"', (_label, connect) => {
  const defer = deferrals();

  it('OOM at maxmemory with noeviction: a store error; whenUnavailable run does not run the work', async () => {
    const server = await startRedis({ args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] });
    defer(() => server.stop());
    const admin = ioredis(server.port);
    defer(() => admin.disconnect());
    const filler = 'x'.repeat(64 * 1024);
    for (let i = 0; ; i++) {
      const full = await admin.set(`fill:${i}`, filler).then(
        () => false,
        () => true,
      );
      if (full) break;
    }
    const { client, close } = await connect(server);
    defer(close);
    const locks = new Leasehold(client, { prefix: randomPrefix() });
    defer(() => locks.close());
    const error = await locks.acquire('order:1').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect(error).not.toBeInstanceOf(StoreUnavailableError);
    expect((error as LockError).code).toBe(ErrorCode.STORE_ERROR);
    expect((error as Error).message).toMatch(/OOM/);
    let ran = false;
    await expect(
      locks.withLock('order:1', { whenUnavailable: 'run' }, () => {
        ran = true;
      }),
    ).rejects.toMatchObject({ code: ErrorCode.STORE_ERROR });
    expect(ran).toBe(false);
  });

  it('a lock held when memory fills is still extended and released (an OOM reply to a write never turns functions off)', async () => {
    const server = await startRedis({ args: ['--maxmemory', '3mb', '--maxmemory-policy', 'noeviction'] });
    defer(() => server.stop());
    const admin = ioredis(server.port);
    defer(() => admin.disconnect());
    const { client, close } = await connect(server);
    defer(close);
    const prefix = randomPrefix();
    const locks = new Leasehold(client, { prefix });
    defer(() => locks.close());
    const held = await locks.acquire('order:2', { ttl: 30_000, autoExtend: false });
    // Filled until even a small write is refused: over the limit without any request's buffer.
    for (const size of [64 * 1024, 1024, 16]) {
      const filler = 'x'.repeat(size);
      for (let i = 0; ; i++) {
        const full = await admin.set(`fill:${size}:${i}`, filler).then(
          () => false,
          () => true,
        );
        if (full) break;
      }
    }
    // At the limit: taking a lock is refused, while the calls that only end or move a lease run
    // (their functions are flagged allow-oom), though each rewrites the lock's key.
    await expect(locks.tryAcquire('order:3')).rejects.toMatchObject({ code: ErrorCode.STORE_ERROR });
    await held.extend(60_000);
    expect(held.expiresIn()).toBeGreaterThan(30_000);
    expect(await held.release()).toBe(true);
    // Released on the server: no lease left, the record marked by its owner.
    const record = lockRecord(await admin.get(lockKeys(prefix, 'order:2').lock));
    expect(record).toMatchObject({ state: null, fence: expect.stringContaining(`|${held.owner}`) });
  });
});

describe('node-redis error replies, classified by their class', () => {
  it("a node-redis error reply keeps name 'Error': told apart by its prototype chain (negative control: by name it is not)", async () => {
    const server = await startRedis();
    const client = createClient({ url: server.url });
    client.on('error', () => {});
    await client.connect();
    try {
      await client.sendCommand(['SET', 'k', 'v']);
      const error = await client.sendCommand(['LPUSH', 'k', 'x']).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/^WRONGTYPE/);
      // The old test, by name, would have called this a connection failure.
      expect((error as Error).name).toBe('Error');
      expect(isReplyError(error)).toBe(true);
      expect(isReplyError(new Error('Socket closed unexpectedly'))).toBe(false);
    } finally {
      client.destroy();
      await server.stop();
    }
  });
});

describe.each(clients)('%s: a server that went away', (_label, connect) => {
  const defer = deferrals();

  it('fails fast with the connection error as the cause and the address in the message', async () => {
    const server = await startRedis();
    const { client, close } = await connect(server);
    defer(close);
    const locks = new Leasehold(client, { prefix: randomPrefix(), commandTimeout: 5_000 });
    defer(() => locks.close());
    await (await locks.acquire('x')).release();
    await server.stop();
    // Let the client see the refused reconnection.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = now();
    const error = await locks.acquire('x').catch((e: unknown) => e);
    expect(now() - started).toBeLessThan(2_000);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toContain(`127.0.0.1:${server.port}`);
    expect((error as Error).message).toMatch(/ECONNREFUSED/);
    const cause = (error as Error).cause as { code?: string; errors?: { code?: string }[] } | undefined;
    expect(cause?.code ?? cause?.errors?.[0]?.code).toBe('ECONNREFUSED');
  });
});

describe('a port nobody listens on', () => {
  it('ioredis: the error names the address and carries the refusal', async () => {
    const port = await freePort();
    const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: null });
    client.on('error', () => {});
    void client.connect().catch(() => undefined);
    const locks = new Leasehold(client, { commandTimeout: 3_000 });
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const error = await locks.acquire('x').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toContain(`127.0.0.1:${port}`);
      expect((error as Error).cause).toBeDefined();
    } finally {
      await locks.close();
      client.disconnect();
    }
  });
});
