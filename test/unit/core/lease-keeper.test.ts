import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { type Kept, LeaseKeeper } from '../../../src/core/lease-keeper.js';

function kept(log: Array<[string, number]>, label: string, onTick?: () => void): Kept {
  return {
    tick: () => {
      log.push([label, now()]);
      onTick?.();
    },
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
});
