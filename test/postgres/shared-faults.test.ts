import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type AcquireOptions, DEFAULTS, type Leasehold, type LeaseholdOptions, type Lock } from '../../src/index.js';
import type { SharedState } from '../../src/store/index.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { channelOf } from '../../src/store/postgres/queries.js';
import type { HolderMessage } from '../faults/child.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * Real faults against semaphores and read-write locks on PostgreSQL: a holder process killed with
 * kill -9 (its hold reclaimed on the server's clock once its ttl is over, the others keeping
 * theirs), a queued waiter killed with kill -9 (it costs those behind it one reservation, not its
 * liveness), the database backends of a holder and a waiter terminated (pg_terminate_backend), the
 * server restarted (a fast shutdown, and kill -9 of every server process) while holds exist.
 * Each runs on both primitives: `shared` is the kind of hold, `other` what waits beside it.
 */

const HOLDER = fileURLToPath(new URL('./holder.mjs', import.meta.url));

interface Kind {
  readonly label: string;
  /** The holds of the lock. */
  readonly shared: AcquireOptions;
  /** The request that waits for a hold to end: a permit, or the exclusive mode. */
  readonly other: AcquireOptions;
  /** Holds admitted at once, or null for no bound. */
  readonly limit: number | null;
}

const KINDS: readonly Kind[] = [
  { label: 'semaphore', shared: { limit: 2 }, other: { limit: 2 }, limit: 2 },
  { label: 'read-write lock', shared: { mode: 'shared' }, other: { mode: 'exclusive' }, limit: null },
];

/** The lease of the holds a test lets run out; every margin below is derived from it. */
const TTL = 1_500;

describe.each(KINDS)('PostgreSQL faults: $label', (kind) => {
  const db = postgresFixture();

  function leasehold(prefix: string, options: LeaseholdOptions = {}, on = db.pool): Leasehold {
    return db.leasehold(on, { prefix, ...options });
  }

  /** A holder process (holder.mjs), its messages read in order. */
  async function start(prefix: string) {
    const child: ChildProcess = fork(HOLDER, [db.server.url, prefix], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const kill9 = async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    };
    db.later(kill9);
    const inbox: HolderMessage[] = [];
    const readers: Array<(m: HolderMessage) => void> = [];
    child.on('message', (m: HolderMessage) => (readers.shift() ?? ((x) => inbox.push(x)))(m));
    const next = () => {
      const queued = inbox.shift();
      return queued ? Promise.resolve(queued) : new Promise<HolderMessage>((resolve) => readers.push(resolve));
    };
    expect((await next()).event).toBe('ready');
    return { send: (message: Record<string, unknown>) => child.send(message), next, kill9 };
  }

  /** The backend of the listening session of application `app`, once it LISTENs on `name`'s channel. */
  async function listener(app: string, prefix: string, name: string): Promise<number | undefined> {
    const rows = await db.server.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query = $2',
      [app, `LISTEN "${channelOf(prefix, name)}"`],
    );
    return rows[0]?.pid;
  }

  function inspect(prefix: string, name: string): Promise<SharedState> {
    return new PostgresStore(db.pool, { prefix }).inspectShared(name);
  }

  /** The holds as the server sees them, and how long the read took (a bound on its staleness). */
  async function timedInspect(prefix: string, name: string): Promise<{ state: SharedState; rtt: number; at: number }> {
    const sent = performance.now();
    const state = await inspect(prefix, name);
    const at = performance.now();
    return { state, rtt: at - sent, at };
  }

  /** No more holds than permits, and no exclusive holder beside a shared one. */
  function expectSafe(state: SharedState): void {
    if (kind.limit !== null) expect(state.holds.length).toBeLessThanOrEqual(kind.limit);
    if (state.holds.length > 0) expect(state.mode).toBe(kind.limit === null ? 'shared' : 'semaphore');
  }

  it('a holder process killed with kill -9: its hold is reclaimed once its ttl is over on the server’s clock, the other holder keeps its own, a waiter gets in with a higher token', async () => {
    const prefix = randomPrefix();
    const victim = await start(prefix);
    victim.send({ cmd: 'acquire', name: 'k9', ttl: TTL, autoExtend: false, ...kind.shared });
    const killed = await victim.next();
    expect(killed.event).toBe('acquired');
    const keeper = await leasehold(prefix).acquire('k9', { ...kind.shared, ttl: 30_000 });
    await victim.kill9();
    const { state, rtt, at } = await timedInspect(prefix, 'k9');
    const dead = state.holds.find((h) => h.owner === killed.owner);
    expect(dead?.token).toBe(killed.fencingToken);
    const waiter = leasehold(prefix);
    const waiting = waiter.acquire('k9', { ...kind.other, ttl: 30_000, wait: 20 * TTL });
    // The dead hold counts until the server's clock passes its end; then only the keeper's is left.
    await waitFor(async () => !(await inspect(prefix, 'k9')).holds.some((h) => h.owner === killed.owner), {
      timeout: 10 * TTL,
      message: 'the dead hold reclaimed',
    });
    expect(performance.now() - at).toBeGreaterThanOrEqual((dead?.pttl ?? 0) - rtt);
    expect(keeper.signal.aborted).toBe(false);
    await keeper.extend();
    if (kind.limit === null) {
      // A writer waits for the live reader too: the keeper's release hands it the lock.
      expect((await inspect(prefix, 'k9')).holds.map((h) => h.owner)).toEqual([keeper.owner]);
      expect(await keeper.release()).toBe(true);
    }
    const lock = await waiting;
    expect(performance.now() - at).toBeGreaterThanOrEqual((dead?.pttl ?? 0) - rtt);
    expect(lock.fencingToken).toBeGreaterThan(Math.max(keeper.fencingToken, killed.fencingToken as number));
    const after = await inspect(prefix, 'k9');
    expectSafe(after);
    if (kind.limit !== null) {
      expect(after.holds.map((h) => h.owner).sort()).toEqual([keeper.owner, lock.owner].sort());
      expect(await keeper.release()).toBe(true);
    } else {
      expect(after.mode).toBe('exclusive');
    }
    expect(await lock.release()).toBe(true);
  });

  it.runIf(kind.limit === null)(
    'a writer killed with kill -9 while queued behind a reader: later readers are kept out for a reservation or two, not for its liveness',
    async () => {
      const prefix = randomPrefix();
      const reader = await leasehold(prefix).acquire('dw', { mode: 'shared', ttl: 30_000 });
      const doomed = await start(prefix);
      doomed.send({ cmd: 'wait', name: 'dw', ttl: 30_000, wait: 60_000 });
      expect((await doomed.next()).event).toBe('waiting');
      const store = new PostgresStore(db.pool, { prefix });
      await waitFor(async () => (await store.queued('dw', 1)).count === 1, { timeout: 10 * TTL });
      await doomed.kill9();
      const died = performance.now();
      const late = await leasehold(prefix).acquire('dw', {
        mode: 'shared',
        ttl: 30_000,
        wait: 2 * DEFAULTS.waiterLease,
      });
      // Asked whether it is alive, the dead writer has one reservation to answer (docs/waiting.md).
      expect(performance.now() - died).toBeLessThan(DEFAULTS.waiterLease / 2);
      for (const lock of [late, reader]) expect(await lock.release()).toBe(true);
    },
  );

  it('a waiter killed with kill -9 at the head of the queue (a permit, or a reader ahead of a writer): the live waiter behind it waits out one reservation, not the dead one’s liveness', async () => {
    const prefix = randomPrefix();
    const app = `l-${prefix}`;
    const holder = leasehold(prefix);
    const live = leasehold(prefix, {}, db.ownPool({ max: 2, application_name: app }));
    // Full: both permits held, or the lock held exclusively, so a permit or a reader has to queue.
    const holds: Lock[] = [];
    for (let i = 0; i < (kind.limit ?? 1); i++) {
      holds.push(await holder.acquire('dh', { ...(kind.limit === null ? kind.other : kind.shared), ttl: 30_000 }));
    }
    const store = new PostgresStore(db.pool, { prefix });
    const doomed = await start(prefix);
    doomed.send({ cmd: 'wait', name: 'dh', ttl: 30_000, wait: 60_000, ...kind.shared });
    expect((await doomed.next()).event).toBe('waiting');
    await waitFor(async () => (await store.queued('dh', 1)).count === 1, { timeout: 10 * TTL });
    await doomed.kill9();
    const waiting = live.acquire('dh', { ...kind.other, ttl: 30_000, wait: 2 * DEFAULTS.waiterLease });
    await waitFor(async () => (await store.queued('dh', 2)).count === 2, { timeout: 10 * TTL });
    await waitFor(async () => (await listener(app, prefix, 'dh')) !== undefined, { timeout: 10 * TTL });
    // Let the live waiter make its retry once it listens, and park: its fallback timer is then
    // the holds' lease, capped at maxPark, so only the hand-off can bring it in sooner.
    await sleep(DEFAULTS.reservation);
    const [first, ...rest] = holds as [Lock, ...Lock[]];
    const sent = performance.now();
    expect(await first.release()).toBe(true);
    const released = performance.now();
    const lock = await waiting;
    const granted = performance.now();
    // The release reserved the lock (or the permit) for the dead waiter at the head and named the
    // live one next: it tried again once that reservation lapsed, with one reservation more for the
    // round trips. The dead waiter's liveness (waiterLease) played no part.
    expect(granted - sent).toBeGreaterThanOrEqual(DEFAULTS.reservation);
    expect(granted - released).toBeLessThan(2 * DEFAULTS.reservation + DEFAULTS.expiryMargin);
    // Admitted by the hand-off, the dead waiter left the queue: no later release reserves anything for it.
    expect(await store.queued('dh', 1)).toMatchObject({ count: 0, reserved: null });
    expectSafe(await store.inspectShared('dh'));
    for (const l of [lock, ...rest]) expect(await l.release()).toBe(true);
  });

  it('the database backends of a holder and a waiter terminated: the hold is a row and stays its holder’s (extended over a new connection), the waiter listens again and is handed the lock by the release', async () => {
    const prefix = randomPrefix();
    const [holderApp, waiterApp] = [`h-${prefix}`, `w-${prefix}`];
    const long = 20 * TTL;
    const holder = leasehold(prefix, {}, db.ownPool({ max: 2, application_name: holderApp }));
    const waiter = leasehold(prefix, {}, db.ownPool({ max: 2, application_name: waiterApp }));
    // Full: a semaphore's two permits (one held by a second holder), or one reader before a writer.
    const held: Lock[] = [await holder.acquire('term', { ...kind.shared, ttl: long })];
    if (kind.limit !== null) held.push(await leasehold(prefix).acquire('term', { ...kind.shared, ttl: long }));
    const waiting = waiter.acquire('term', { ...kind.other, ttl: long, wait: 2 * long });
    const store = new PostgresStore(db.pool, { prefix });
    await waitFor(async () => (await store.queued('term', 1)).count === 1, { timeout: 10 * TTL });
    await waitFor(async () => (await listener(waiterApp, prefix, 'term')) !== undefined, { timeout: 10 * TTL });
    const before = await listener(waiterApp, prefix, 'term');
    const terminated = await db.server.query<{ done: boolean }>(
      'SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity WHERE application_name IN ($1, $2)',
      [holderApp, waiterApp],
    );
    expect(terminated.length).toBeGreaterThanOrEqual(2);
    await waitFor(async () => ![undefined, before].includes(await listener(waiterApp, prefix, 'term')), {
      timeout: 10 * TTL,
      message: 'the channel LISTENed again on a new session',
    });
    const [first] = held as [Lock];
    await first.extend();
    expect(first.signal.aborted).toBe(false);
    const state = await store.inspectShared('term');
    expectSafe(state);
    expect(state.holds.map((h) => h.token).sort()).toEqual(held.map((l) => l.fencingToken).sort());
    const released = performance.now();
    expect(await first.release()).toBe(true);
    const lock = await waiting;
    // Woken by the hand-off: the holds it was refused by had most of `long` left.
    expect(performance.now() - released).toBeLessThan(long / 2);
    expect(lock.fencingToken).toBeGreaterThan(Math.max(...held.map((l) => l.fencingToken)));
    expectSafe(await store.inspectShared('term'));
    for (const l of [lock, ...held.slice(1)]) expect(await l.release()).toBe(true);
  });

  it('the server restarted (a fast shutdown, then kill -9 of every server process) while holds exist: they survive as rows, no more holders than permits and no writer beside a reader, tokens still increase', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix, { commandTimeout: 1_000 });
    const tokens: number[] = [];
    for (const hard of [false, true]) {
      const name = `restart-${hard}`;
      const holds = [await locks.acquire(name, { ...kind.shared, ttl: 15_000 })];
      if (kind.limit !== null) holds.push(await locks.acquire(name, { ...kind.shared, ttl: 15_000 }));
      tokens.push(...holds.map((l) => l.fencingToken));
      const postmaster = db.server.pid;
      await db.server.restart({ hard });
      expect(db.server.pid).not.toBe(postmaster);
      // Full after the restart: the request that waits beside the holds is refused.
      await waitFor(async () => (await locks.tryAcquire(name, kind.other).catch(() => 'down')) === null, {
        timeout: 10_000,
        message: 'the server back, the holds still there',
      });
      const state = await inspect(prefix, name);
      expectSafe(state);
      expect(state.holds.map((h) => h.token).sort()).toEqual(holds.map((l) => l.fencingToken).sort());
      const waiting = locks.acquire(name, { ...kind.other, ttl: 15_000, wait: 10_000 });
      for (const l of kind.limit === null ? holds : holds.slice(0, 1)) expect(await l.release()).toBe(true);
      const next = await waiting;
      tokens.push(next.fencingToken);
      if (kind.limit === null) expect(await locks.tryAcquire(name, kind.shared)).toBeNull();
      expectSafe(await inspect(prefix, name));
      for (const l of [next, ...holds.slice(1)]) if (!l.signal.aborted) expect(await l.release()).toBe(true);
    }
    // Every grant's token above the ones before it, across both restarts.
    const order = [...tokens];
    expect(order).toEqual([...tokens].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(order.length);
  }, 60_000);
});
