import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { type RedisServer, startRedis } from '../../harness/index.js';

/** A redis-server for the tests of a file, and ioredis clients on it, all stopped after them. */
export function suiteRedis(): { readonly server: RedisServer; client(): Redis } {
  let server: RedisServer | undefined;
  const clients: Redis[] = [];
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    for (const client of clients.splice(0)) client.disconnect();
    await server?.stop();
  });
  const started = (): RedisServer => {
    if (!server) throw new Error('the redis-server starts in beforeAll: use it in a test');
    return server;
  };
  return {
    get server() {
      return started();
    },
    client() {
      const client = new Redis(started().port, started().host);
      clients.push(client);
      return client;
    },
  };
}
