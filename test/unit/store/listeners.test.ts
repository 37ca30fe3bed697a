import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { ioredis } from '../../faults/safety/fixture.js';
import { type RedisServer, randomPrefix, startRedis } from '../../harness/index.js';

/**
 * A Leasehold puts listeners on the caller's client (to remember its connection errors) and takes
 * them off when it is closed: an application that makes a Leasehold per request, or a test suite
 * that makes hundreds, leaks none and sees no MaxListenersExceededWarning.
 */
describe('listeners on the caller’s client', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(() => server.stop());

  const count = (client: { listenerCount(event: string): number }) =>
    ['error', 'ready'].map((event) => client.listenerCount(event));

  it('ioredis: 30 Leaseholds opened, used and closed leave the client as it was', async () => {
    const client = ioredis(server.port);
    try {
      await client.ping();
      const before = count(client);
      for (let i = 0; i < 30; i++) {
        const locks = new Leasehold(client, { prefix: randomPrefix() });
        await (await locks.acquire('x')).release();
        await locks.close();
      }
      expect(count(client)).toEqual(before);
    } finally {
      client.disconnect();
    }
  });

  it('node-redis: 30 Leaseholds opened, used and closed leave the client as it was', async () => {
    const client = createClient({ url: server.url });
    client.on('error', () => {});
    await client.connect();
    try {
      const before = count(client);
      for (let i = 0; i < 30; i++) {
        const locks = new Leasehold(client, { prefix: randomPrefix() });
        await (await locks.acquire('x')).release();
        await locks.close();
      }
      expect(count(client)).toEqual(before);
    } finally {
      await client.quit();
    }
  });
});
