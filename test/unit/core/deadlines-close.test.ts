import { describe, expect, it } from 'vitest';
import { Leasehold, LockTimeoutError, MemoryStore } from '../../../src/index.js';
import { watchTimers } from '../../harness/leaks.js';

/**
 * The calls' deadline timers (core/timeout.ts) as an application sees them: an idle instance keeps
 * at most one unref'd timer per store and duration, which holds no process open, and close() clears
 * it, on one store and on Redlock's nodes (docs/api.md, commandTimeout). The watchdogs' one timer
 * (core/lease-keeper.ts), left set after the last lock, is unref'd and cleared by close() as well.
 */

const DEADLINES = 'src/core/timeout.ts';
const WATCHDOGS = 'src/core/lease-keeper.ts';

describe('the calls’ deadline timers', () => {
  it('one store: idle, the timer holds nothing; close() clears it', async () => {
    const timers = watchTimers();
    const locks = new Leasehold(new MemoryStore());
    await (await locks.acquire('deadlines-one')).release();
    expect(timers.pending()).toEqual([]);
    // The watchdogs' timer too, left set after the last lock (src/core/lease-keeper.ts).
    expect(timers.pending(undefined, { idle: true })).toEqual([WATCHDOGS, DEADLINES]);
    await locks.close();
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });

  it('Redlock: the nodes’ subscribe deadlines are cleared by close() too', async () => {
    const timers = watchTimers();
    const nodes = [new MemoryStore(), new MemoryStore(), new MemoryStore()];
    const holder = new Leasehold(nodes);
    const waiter = new Leasehold(nodes);
    const held = await holder.acquire('deadlines-quorum', { ttl: 5_000 });
    await expect(waiter.acquire('deadlines-quorum', { wait: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(timers.pending(undefined, { idle: true })).toContain(DEADLINES);
    await held.release();
    await waiter.close();
    await holder.close();
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });
});
