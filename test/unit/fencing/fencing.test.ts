import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { type RedisServer, randomPrefix, startRedis } from '../../harness/index.js';

describe('fencing tokens at scale', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await server.stop();
  });

  it('strictly increase over 2,000 acquisitions by 10 instances, each on its own connection', async () => {
    const prefix = randomPrefix();
    const clients = Array.from({ length: 10 }, () => new Redis(server.port, server.host));
    const pods = clients.map((c) => new Leasehold(c, { prefix }));
    const seen: number[] = [];
    let inside = 0;
    await Promise.all(
      pods.map(async (pod) => {
        for (let i = 0; i < 200; i++) {
          await pod.withLock('ledger', { ttl: 5_000, wait: 60_000 }, async (_signal, lock) => {
            inside++;
            expect(inside).toBe(1);
            seen.push(lock.fencingToken);
            inside--;
          });
        }
      }),
    );
    expect(seen).toHaveLength(2_000);
    // Critical sections never overlap, so their order is the order the tokens were used in.
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1]!);
    // Hybrid tokens: never below the server's clock in µs at the grant.
    expect(seen[0]).toBeGreaterThan((Date.now() - 600_000) * 1000);
    await Promise.all(pods.map((p) => p.close()));
    for (const c of clients) c.disconnect();
  });
});
