import { describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import { randomPrefix, startRedis, waitFor } from '../../harness/index.js';
import { deferrals, ioredis } from './fixture.js';

/**
 * Memory stays bounded: every key leasehold writes has a TTL, except a job's tick marker and its
 * capped run history (one of each per job name). 500 one-off locks, a contended lock with a queue
 * and hand-offs, and a scheduled job leave nothing behind that lives for ever.
 */
describe('every key has a TTL', () => {
  const defer = deferrals();

  it('after one-off locks, hand-offs and job runs, only tick markers and histories have none', async () => {
    const server = await startRedis();
    defer(() => server.stop());
    const client = ioredis(server.port);
    defer(() => client.disconnect());
    const prefix = randomPrefix();
    const a = new Leasehold(client, { prefix });
    const b = new Leasehold(ioredis(server.port), { prefix });
    defer(() => a.close());
    defer(() => b.close());
    for (let i = 0; i < 500; i++) await (await a.acquire(`order:${i}`)).release();
    const held = await a.acquire('busy');
    const waiting = [b.acquire('busy'), b.acquire('busy')];
    await waitFor(async () => (await client.zcard(`${prefix}:{busy}:waiters`)) === 2);
    await held.release();
    for (const w of waiting) await (await w).release();
    await a.runOnce('nightly', () => 'ok', { tick: Date.now() });

    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, page] = await client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1_000);
      cursor = next;
      keys.push(...page);
    } while (cursor !== '0');
    expect(keys.length).toBeGreaterThan(500);
    const forever: string[] = [];
    for (const key of keys) if ((await client.pttl(key)) === -1) forever.push(key);
    expect(forever.sort()).toEqual([`${prefix}:{nightly}:runs`, `${prefix}:{nightly}:tick`]);
  });
});
