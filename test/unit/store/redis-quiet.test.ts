import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../../src/index.js';
import type { AcquireRequest, HandOn } from '../../../src/store/port.js';
import type { RedisConnection } from '../../../src/store/redis/connection.js';
import { IORedisConnection, type IORedisLike } from '../../../src/store/redis/ioredis-adapter.js';
import { RedisStore } from '../../../src/store/redis/redis-store.js';
import { ANNOUNCED_HAND_ON } from '../../../src/store/settings.js';
import { ioredis, suiteServer } from '../../faults/safety/fixture.js';
import { randomPrefix } from '../../harness/index.js';
import { watchingScripts } from './script-calls.js';

/**
 * A name whose last release through a Redis store woke nobody is quiet there
 * (src/store/quiet-names.ts): a waiting caller's first attempt goes as one that does not queue (one
 * key), and its release through free.lua (one key, one argument). Anything else falls back to the
 * full script in a second call: a refusal queues the caller as it asked, a waiter flagged behind the
 * lease is handed the lock.
 */

/** The scripts a store ran, as '<script>/<keys sent>'. */
function recording(connection: RedisConnection): { connection: RedisConnection; sent: string[] } {
  const sent: string[] = [];
  const wrapped = watchingScripts(connection, ({ name, keys }) => sent.push(`${name}/${keys.length}`));
  return { connection: wrapped, sent };
}

/** What a waiting caller's first attempt sends. */
const JOIN: Omit<AcquireRequest, 'owner'> = { ttl: 30_000, queue: 'join' };
const handOn = { reservation: DEFAULTS.reservation, announce: false };

describe('a name quiet in a Redis store (its last release there woke nobody)', () => {
  const redis = suiteServer();
  const closing: (() => unknown)[] = [];
  afterEach(async () => {
    for (const close of closing.splice(0)) await close();
  });

  /** A store on a client of its own, on `prefix`, and the scripts it ran after the library was loaded. */
  async function counted(prefix: string, hand: HandOn = handOn): Promise<{ s: RedisStore; sent: string[] }> {
    const client = ioredis(redis.server.port);
    const { connection, sent } = recording(new IORedisConnection(client as unknown as IORedisLike, () => {}));
    const s = new RedisStore(connection, { prefix, instance: 'test', handOn: hand });
    closing.push(
      () => s.close(),
      () => client.disconnect(),
    );
    await s.acquire('warm-up', { ttl: 1_000, owner: 'w' });
    await s.release('warm-up', 'w');
    sent.length = 0;
    return { s, sent };
  }

  /** Two stores on one prefix, lock q quiet in the first (`here`), whose scripts are counted. */
  async function quietHere(): Promise<{ here: RedisStore; there: RedisStore; sent: string[] }> {
    const prefix = randomPrefix();
    const [{ s: here, sent }, { s: there }] = [await counted(prefix), await counted(prefix)];
    await here.acquire('q', { ...JOIN, owner: 'a' });
    await here.release('q', 'a');
    return { here, there, sent };
  }

  it('is taken with one key and freed by free.lua; a name not quiet goes the full way', async () => {
    const { s, sent } = await counted(randomPrefix());
    for (const owner of ['a', 'b', 'c']) {
      expect(await s.acquire('q', { ...JOIN, owner })).toMatchObject({ acquired: true });
      expect(await s.release('q', owner)).toBe('released');
    }
    expect(sent).toEqual(['acquire/3', 'release/3', 'acquire/1', 'free/1', 'acquire/1', 'free/1']);
    expect(await s.inspect('q')).toMatchObject({ owner: null, releasedBy: 'c' });
    // A re-sent free (its reply lost) finds no lease of its owner: release.lua answers it.
    sent.length = 0;
    expect(await s.release('q', 'c')).toBe('released');
    expect(sent).toEqual(['free/1', 'release/3']);
  });

  it('remembers 1,024 quiet names at most: the name noted first is then sent as a name not quiet', async () => {
    const { s, sent } = await counted(randomPrefix());
    for (let i = 0; i <= 1_024; i++) {
      await s.acquire(`n${i}`, { ...JOIN, owner: 'o' });
      await s.release(`n${i}`, 'o');
    }
    sent.length = 0;
    // n0 is noted again, and n1, the oldest now, makes room for it; n2 is still remembered.
    for (const name of ['n0', 'n2']) {
      await s.acquire(name, { ...JOIN, owner: 'o' });
      await s.release(name, 'o');
    }
    expect(sent).toEqual(['acquire/3', 'release/3', 'acquire/1', 'free/1']);
  });

  it('held by another: the one-key attempt is refused, the full one queues the caller; the release hands on to it', async () => {
    const { here, there, sent } = await quietHere();
    expect(await there.acquire('q', { ...JOIN, owner: 'b' })).toMatchObject({ acquired: true });
    sent.length = 0;
    const refused = await here.acquire('q', { ...JOIN, owner: 'w' });
    const asked = [...sent];
    expect(refused).toMatchObject({ acquired: false });
    expect(refused.acquired === false && 'pttl' in refused && refused.pttl).toBeGreaterThan(0);
    expect(await there.queued('q', 1)).toMatchObject({ count: 1, first: ['w'] });
    expect(asked).toEqual(['acquire/1', 'acquire/3']);
    expect(await there.release('q', 'b')).toBe('released');
    expect(await there.acquire('q', { ttl: 30_000, owner: 'barger' })).toMatchObject({ acquired: false });
    expect(await here.acquire('q', { ...JOIN, owner: 'w', queue: 'member' })).toMatchObject({ acquired: true });
    // No longer quiet here: the next release is the full one, which may hand on.
    sent.length = 0;
    expect(await here.release('q', 'w')).toBe('released');
    expect(sent).toEqual(['release/3']);
  });

  it('a waiter flagged behind its holder: free.lua frees nothing, release.lua hands the lock to the waiter', async () => {
    const { here, there, sent } = await quietHere();
    expect(await here.acquire('q', { ...JOIN, owner: 'h' })).toMatchObject({ acquired: true });
    expect(await there.acquire('q', { ...JOIN, owner: 'w' })).toMatchObject({ acquired: false });
    sent.length = 0;
    expect(await here.release('q', 'h')).toBe('released');
    const released = [...sent];
    expect(await here.inspect('q')).toMatchObject({ owner: null, releasedBy: 'h' });
    expect(await here.queued('q', 1)).toMatchObject({ reserved: { owner: 'w' } });
    expect(released).toEqual(['free/1', 'release/3']);
    expect(await here.acquire('q', { ttl: 30_000, owner: 'barger' })).toMatchObject({ acquired: false });
    // A re-sent release of the lease it handed on answers released, until the waiter takes the lock.
    expect(await here.release('q', 'h')).toBe('released');
    expect(await there.acquire('q', { ...JOIN, owner: 'w', queue: 'member' })).toMatchObject({ acquired: true });
    expect(await here.release('q', 'h')).toBe('not-owner');
  });

  it('in a store that announces releases (a Redlock node): a refusal flags the lease, whose release then announces it and leaves the name off the quiet path', async () => {
    const prefix = randomPrefix();
    const [{ s: here, sent }, { s: there }] = [
      await counted(prefix, ANNOUNCED_HAND_ON),
      await counted(prefix, ANNOUNCED_HAND_ON),
    ];
    // A Redlock node's acquire never queues: one key, whether the name is quiet or not.
    const cycle = async (owner: string, refused: boolean) => {
      expect(await here.acquire('q', { ttl: 30_000, owner })).toMatchObject({ acquired: true });
      if (refused) expect(await there.acquire('q', { ttl: 30_000, owner: 'w' })).toMatchObject({ acquired: false });
      expect(await here.release('q', owner)).toBe('released');
    };
    await cycle('a', false);
    await cycle('b', false);
    expect(sent).toEqual(['acquire/1', 'release/3', 'acquire/1', 'free/1']);
    sent.length = 0;
    // Flagged: free.lua frees nothing, release.lua frees it and announces it to the waiter.
    await cycle('c', true);
    // While refusals keep flagging it, the name is released by release.lua alone.
    await cycle('d', true);
    // Unflagged again: release.lua frees it without a word, and the name is quiet once more.
    await cycle('e', false);
    await cycle('f', false);
    expect(sent).toEqual([
      'acquire/1',
      'free/1',
      'release/3',
      'acquire/1',
      'release/3',
      'acquire/1',
      'release/3',
      'acquire/1',
      'free/1',
    ]);
  });
});
