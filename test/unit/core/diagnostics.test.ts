import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { CHANNELS, trace, tracing } from '../../../src/core/diagnostics.js';
import { Leasehold, MemoryStore } from '../../../src/index.js';

/** What leasehold publishes on node:diagnostics_channel, read by a plain subscriber. */
const undo: (() => void)[] = [];
const instances: Leasehold[] = [];
afterEach(async () => {
  for (const u of undo.splice(0)) u();
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

function listen(name: string): unknown[] {
  const seen: unknown[] = [];
  const onMessage = (message: unknown) => seen.push(message);
  subscribe(name, onMessage);
  undo.push(() => unsubscribe(name, onMessage));
  return seen;
}

function traceAll(name: string): { event: string; context: Record<string, unknown> }[] {
  const seen: { event: string; context: Record<string, unknown> }[] = [];
  const tc = tracingChannel(name);
  const record = (event: string) => (context: object) => {
    seen.push({ event, context: { ...(context as Record<string, unknown>) } });
  };
  const handlers = {
    start: record('start'),
    end: record('end'),
    asyncStart: record('asyncStart'),
    asyncEnd: record('asyncEnd'),
    error: record('error'),
  };
  tc.subscribe(handlers);
  undo.push(() => tc.unsubscribe(handlers));
  return seen;
}

function leasehold(store = new MemoryStore()): Leasehold {
  const locks = new Leasehold(store, { instance: 'pod-a' });
  instances.push(locks);
  return locks;
}

describe('diagnostics_channel', () => {
  it('traces an acquisition with its wait, an extension and a release, naming lock, owner, token and instance', async () => {
    const acquire = traceAll(CHANNELS.acquire);
    const extend = traceAll(CHANNELS.extend);
    const release = traceAll(CHANNELS.release);
    const locks = leasehold();
    const lock = await locks.acquire('order:1', { ttl: 5_000 });
    await lock.extend();
    await lock.release();
    const end = acquire.find((e) => e.event === 'asyncEnd')?.context;
    expect(end).toMatchObject({
      name: 'order:1',
      instance: 'pod-a',
      kind: 'mutex',
      owner: lock.owner,
      fencingToken: lock.fencingToken,
      outcome: 'acquired',
    });
    expect(typeof end?.waited).toBe('number');
    expect(extend.find((e) => e.event === 'asyncEnd')?.context).toMatchObject({ outcome: 'extended', ttl: 5_000 });
    expect(release.find((e) => e.event === 'asyncEnd')?.context).toMatchObject({
      name: 'order:1',
      released: true,
      fencingToken: lock.fencingToken,
    });
  });

  it('a refused acquisition ends in error with its outcome; a lost lease and a hand-off are published', async () => {
    const acquire = traceAll(CHANNELS.acquire);
    const lost = listen(CHANNELS.lost);
    const handoffs = listen(CHANNELS.handoff);
    const store = new MemoryStore();
    const [a, b] = [leasehold(store), leasehold(store)];
    const held = await a.acquire('x', { ttl: 5_000, autoExtend: false });
    await expect(b.acquire('x', { wait: 0 })).rejects.toThrow();
    expect(acquire.filter((e) => e.event === 'error').at(-1)?.context).toMatchObject({ outcome: 'LOCK_TIMEOUT' });
    const waiting = b.acquire('x', { wait: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await held.release();
    const next = await waiting;
    expect(handoffs).toContainEqual(expect.objectContaining({ name: 'x', woken: next.owner }));
    await store.forceRelease('x');
    await expect(next.extend()).rejects.toThrow();
    expect(lost).toContainEqual(expect.objectContaining({ name: 'x', reason: 'expired', instance: 'pod-a' }));
  });

  it('a job run and a skip are published', async () => {
    const jobs = listen(CHANNELS.job);
    const store = new MemoryStore();
    const [a, b] = [leasehold(store), leasehold(store)];
    await a.runOnce('report', () => 1, { tick: 1_000 });
    await b.runOnce('report', () => 2, { tick: 1_000 });
    expect(jobs).toEqual([
      expect.objectContaining({ name: 'report', outcome: 'ran', instance: 'pod-a' }),
      expect.objectContaining({ name: 'report', outcome: 'skipped', reason: 'already-ran' }),
    ]);
  });

  it('with nobody subscribed, no context is built and the call runs untraced', async () => {
    let built = 0;
    const value = await trace(
      tracing.acquire,
      () => {
        built += 1;
        return { name: 'n', instance: 'i', wait: 0, ttl: 1, kind: 'mutex' };
      },
      async () => 42,
      () => {},
    );
    expect(value).toBe(42);
    expect(built).toBe(0);
  });
});
