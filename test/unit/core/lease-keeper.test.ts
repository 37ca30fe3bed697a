import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { type Kept, LeaseKeeper } from '../../../src/core/lease-keeper.js';
import { watchTimers } from '../../harness/leaks.js';

function kept(log: Array<[string, number]>, label: string, onTick?: () => void): Kept {
  return {
    tick: () => {
      log.push([label, now()]);
      onTick?.();
    },
    at: 0,
    slot: -1,
  };
}

describe('LeaseKeeper', () => {
  it('ticks each lease at its own deadline, never before, with leases sharing and not sharing a delay', async () => {
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const start = now();
    const plan: Array<[string, number]> = [
      ['a', 60],
      ['b', 20],
      ['c', 60],
      ['d', 40],
      ['e', 20],
    ];
    const due = new Map<string, number>();
    for (const [label, delay] of plan) {
      due.set(label, start + delay);
      keeper.schedule(kept(log, label), start + delay);
    }
    expect(keeper.size).toBe(5);
    await sleep(120);
    expect(log.map(([l]) => l).sort()).toEqual(['a', 'b', 'c', 'd', 'e']);
    for (const [label, at] of log) expect(at).toBeGreaterThanOrEqual(due.get(label)! - 1);
    expect(keeper.size).toBe(0);
  });

  it('a lease kept after the last one left, before the timer fires, sets and clears no timer; the timer then finds nothing due', async () => {
    const timers = watchTimers();
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const first = kept(log, 'first');
    keeper.schedule(first, now() + 30);
    keeper.cancel(first);
    expect(timers.pending(undefined, { idle: true })).toEqual(['src/core/lease-keeper.ts']);
    const set = vi.spyOn(globalThis, 'setTimeout');
    const clear = vi.spyOn(globalThis, 'clearTimeout');
    const next = kept(log, 'next');
    keeper.schedule(next, now() + 60);
    keeper.cancel(next);
    // Counted before the spies go: restoring a spy clears its calls.
    const calls = { set: set.mock.calls.length, clear: clear.mock.calls.length };
    set.mockRestore();
    clear.mockRestore();
    expect(calls).toEqual({ set: 0, clear: 0 });
    await sleep(50);
    expect(log).toEqual([]);
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });

  it('a cancelled or rescheduled lease does not tick at its old deadline', async () => {
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const a = kept(log, 'a');
    const b = kept(log, 'b');
    keeper.schedule(a, now() + 20);
    keeper.schedule(b, now() + 20);
    keeper.cancel(a);
    keeper.schedule(b, now() + 60);
    await sleep(40);
    expect(log).toEqual([]);
    await sleep(50);
    expect(log.map(([l]) => l)).toEqual(['b']);
  });

  it('a tick that reschedules itself is kept going; stopAll stops everything', async () => {
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const again: Kept = kept(log, 'again', () => keeper.schedule(again, now() + 10));
    keeper.schedule(again, now() + 10);
    await sleep(75);
    expect(log.length).toBeGreaterThanOrEqual(3);
    expect(keeper.stopAll()).toEqual([again]);
    const count = log.length;
    await sleep(40);
    expect(log.length).toBe(count);
    expect(keeper.size).toBe(0);
  });

  it('many leases scheduled, rescheduled and cancelled in random order: each kept one ticks once, at or after its last deadline, and none cancelled ticks', async () => {
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const start = now();
    const leases = Array.from({ length: 300 }, (_, i) => kept(log, String(i)));
    const due = new Map<string, number>();
    // xorshift32, seeded: the same sequence every run.
    let state = 0x9e3779b9;
    const random = (n: number) => {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return (state >>> 0) % n;
    };
    for (let step = 0; step < 1_000; step++) {
      const i = random(leases.length);
      const lease = leases[i] as Kept;
      if (random(4) === 0) {
        keeper.cancel(lease);
        due.delete(String(i));
      } else {
        const at = start + 5 + random(60);
        keeper.schedule(lease, at);
        due.set(String(i), at);
      }
    }
    expect(keeper.size).toBe(due.size);
    await sleep(150);
    expect(log.map(([l]) => l).sort()).toEqual([...due.keys()].sort());
    for (const [label, at] of log) expect(at).toBeGreaterThanOrEqual((due.get(label) as number) - 1);
    // In deadline order: a lease is never kept waiting behind a later one.
    const order = log.map(([label]) => due.get(label) as number);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(keeper.size).toBe(0);
  });

  it('a tick that schedules its lease far ahead does not hold back a lease already waiting for an earlier deadline', async () => {
    const keeper = new LeaseKeeper();
    const log: Array<[string, number]> = [];
    const start = now();
    const far = start + 3_000;
    const first: Kept = kept(log, 'first', () => keeper.schedule(first, far));
    keeper.schedule(first, start + 10);
    keeper.schedule(kept(log, 'waiting'), start + 40);
    while (!log.some(([l]) => l === 'waiting')) await sleep(10);
    const [, at] = log.find(([l]) => l === 'waiting') as [string, number];
    // Not at the far deadline the first lease set in its tick, whenever the timers ran.
    expect(at).toBeLessThan(far - 1);
    keeper.stopAll();
  });

  it('a tick that schedules its lease again at once waits for the next timer, not the same firing', async () => {
    const keeper = new LeaseKeeper();
    const log: string[] = [];
    let ticks = 0;
    const soon: Kept = {
      tick: () => {
        log.push('tick');
        setImmediate(() => log.push('between'));
        if (++ticks < 4) keeper.schedule(soon, now());
      },
      at: 0,
      slot: -1,
    };
    keeper.schedule(soon, now());
    await sleep(60);
    expect(log).toEqual(['tick', 'between', 'tick', 'between', 'tick', 'between', 'tick', 'between']);
    expect(keeper.size).toBe(0);
  });
});
