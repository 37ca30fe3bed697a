import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, type Leadership, type LeadershipEvents, Leasehold } from '../../../src/index.js';
import { lockKeys } from '../../../src/store/index.js';
import { randomPrefix, waitFor } from '../../harness/index.js';
import { deferrals, ioredis, suiteServer } from './fixture.js';

/**
 * Leadership is handed on only once the term's work has settled: stop() releases the lock (and
 * resolves) after the work, and an instance whose term was lost campaigns again only after its
 * old work settled, so two leaders' work never runs at once. Bounded by `stopTimeout`: past it the
 * lock is released all the same and the overrun is reported.
 */
describe('leadership: the next term starts only once the last one’s work has settled', () => {
  const redis = suiteServer();
  const defer = deferrals();

  function instance(prefix: string): Leasehold {
    const client = ioredis(redis.server.port);
    const locks = new Leasehold(client, { prefix });
    defer(() => client.disconnect());
    defer(() => locks.close());
    return locks;
  }

  /** `lead` with the term's options, stopped after the test. */
  function leadWith(
    locks: Leasehold,
    name: string,
    work: (signal: AbortSignal) => unknown,
    o: { ttl: number; stopTimeout: number },
  ): Leadership {
    const leadership = locks.lead(name, work, o);
    defer(() => leadership.stop());
    return leadership;
  }

  /** One term's work: who ran it, from when to when (performance.now()); no end while it runs. */
  interface Term {
    readonly who: string;
    readonly start: number;
    end?: number;
  }

  /**
   * A leader's work that records its interval in `terms` and, in its i-th term, runs on `tails[i]`
   * ms after its signal aborted, ignoring it (Infinity: never settles); 0 for later terms.
   */
  function recorder(terms: Term[], who: string, tails: number[]): (signal: AbortSignal) => Promise<void> {
    let n = 0;
    return async (signal) => {
      const term: Term = { who, start: performance.now() };
      terms.push(term);
      const tail = tails[n++] ?? 0;
      await new Promise((resolve) => {
        if (signal.aborted) resolve(undefined);
        signal.addEventListener('abort', resolve, { once: true });
      });
      if (tail === Number.POSITIVE_INFINITY) await new Promise(() => {});
      await sleep(tail);
      term.end = performance.now();
    };
  }

  /** Terms whose work began before the one before it (by start) had settled. */
  function overlaps(terms: readonly Term[]): string[] {
    const sorted = [...terms].sort((x, y) => x.start - y.start);
    const found: string[] = [];
    for (let i = 1; i < sorted.length; i++) {
      const before = sorted[i - 1] as Term;
      const after = sorted[i] as Term;
      if ((before.end ?? Number.POSITIVE_INFINITY) > after.start) found.push(`${before.who} then ${after.who}`);
    }
    return found;
  }

  const queued = (prefix: string, name: string) => redis.admin.zcard(lockKeys(prefix, name).waiters);

  it('stop() resolves, and the next candidate is elected, only once the work that ignores its signal has settled', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    const ttl = 10_000;
    const tail = 1_000;
    const terms: Term[] = [];
    const first = a.lead('boss', recorder(terms, 'a', [tail]), { ttl });
    defer(() => first.stop());
    const overran: unknown[] = [];
    const deposed: string[] = [];
    first.on('overran', (e) => overran.push(e));
    first.on('deposed', (e) => deposed.push(e.reason));
    await waitFor(() => first.isLeader);
    const second = b.lead('boss', recorder(terms, 'b', []), { ttl });
    defer(() => second.stop());
    const elected: number[] = [];
    second.on('elected', () => elected.push(performance.now()));
    await waitFor(async () => (await queued(prefix, 'boss')) === 1, { message: 'b in line' });

    const stopping = first.stop();
    // The term's signal has aborted: no longer the leader, though the lock is kept meanwhile.
    const leaderOnceStopping = first.isLeader;
    await stopping;
    const stopped = performance.now();
    // Handed on by the release (the watchdog kept the lease meanwhile), not by its end.
    await waitFor(() => second.isLeader, { timeout: ttl / 2 });
    expect(overlaps(terms)).toEqual([]);
    const mine = terms[0] as Term;
    expect(mine.end).toBeDefined();
    expect(mine.end as number).toBeLessThanOrEqual(stopped);
    expect(elected[0] as number).toBeGreaterThanOrEqual(mine.end as number);
    expect(deposed).toEqual(['stopped']);
    expect(overran).toEqual([]);
    expect(leaderOnceStopping).toBe(false);
  });

  it('after a lost term the instance campaigns again only once the old work has settled', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const ttl = 1_500;
    const tail = 1_000;
    const terms: Term[] = [];
    const leadership = a.lead('boss', recorder(terms, 'a', [tail]), { ttl });
    defer(() => leadership.stop());
    const deposed: string[] = [];
    leadership.on('deposed', (e) => deposed.push(e.reason));
    await waitFor(() => leadership.isLeader);
    // Behind the leader's back: its next extension finds the lease gone.
    await redis.admin.del(lockKeys(prefix, 'boss').lock);
    await waitFor(() => terms.length >= 2, { timeout: 2 * ttl + tail + DEFAULTS.commandTimeout });
    expect(overlaps(terms)).toEqual([]);
    expect(deposed[0]).toBe('lost');
  });

  it('a work that never settles: stop() resolves after stopTimeout, the lock is released and the overrun reported', async () => {
    const prefix = randomPrefix();
    const [a, b] = [instance(prefix), instance(prefix)];
    const ttl = 10_000;
    const stopTimeout = 500;
    const terms: Term[] = [];
    const first = leadWith(a, 'boss', recorder(terms, 'a', [Number.POSITIVE_INFINITY]), { ttl, stopTimeout });
    const overran: Array<LeadershipEvents['overran'][0]> = [];
    first.on('overran', (e) => overran.push(e));
    await waitFor(() => first.isLeader);
    const token = first.fencingToken;
    const second = b.lead('boss', recorder(terms, 'b', []), { ttl });
    defer(() => second.stop());
    const elected: number[] = [];
    second.on('elected', () => elected.push(performance.now()));
    await waitFor(async () => (await queued(prefix, 'boss')) === 1, { message: 'b in line' });

    const began = performance.now();
    await first.stop();
    // Timers round to the millisecond.
    expect(performance.now() - began).toBeGreaterThanOrEqual(stopTimeout - 1);
    expect(overran).toEqual([{ name: 'boss', fencingToken: token, reason: 'stopped', stopTimeout }]);
    // Released, not left to its lease (which the watchdog would keep for ever).
    await waitFor(() => second.isLeader, { timeout: ttl / 2 });
    expect((elected[0] as number) - began).toBeGreaterThanOrEqual(stopTimeout - 1);
    // The overlap that was reported: a's work still runs while b leads.
    expect(terms[0]?.end).toBeUndefined();
    expect(overlaps(terms)).toEqual(['a then b']);
  });

  it('after a lost term whose work overran stopTimeout, the instance stays out of the election until that work settles', async () => {
    const prefix = randomPrefix();
    const a = instance(prefix);
    const ttl = 1_500;
    const stopTimeout = 300;
    const tail = 4 * stopTimeout;
    const terms: Term[] = [];
    const leadership = leadWith(a, 'boss', recorder(terms, 'a', [tail]), { ttl, stopTimeout });
    const overran: string[] = [];
    const deposed: string[] = [];
    leadership.on('overran', (e) => overran.push(e.reason));
    leadership.on('deposed', (e) => deposed.push(e.reason));
    await waitFor(() => leadership.isLeader);
    await redis.admin.del(lockKeys(prefix, 'boss').lock);
    await waitFor(() => terms.length >= 2, { timeout: 2 * ttl + tail + DEFAULTS.commandTimeout });
    expect(overlaps(terms)).toEqual([]);
    expect(overran).toEqual(['lost']);
    expect(deposed[0]).toBe('lost');
  });
});
