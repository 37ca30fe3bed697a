import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Leasehold, type LeaseholdOptions, type LockLostError } from '../../src/index.js';
import type { HandOff } from '../../src/store/index.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { channelOf } from '../../src/store/postgres/queries.js';
import type { HolderMessage } from '../faults/child.js';
import { randomPrefix, waitFor } from '../harness/index.js';
import { postgresFixture } from './fixture.js';

/**
 * Real faults against a real PostgreSQL: a holder process frozen with SIGSTOP past its lease, the
 * database backend of a holder's connection frozen, a holder and a queued waiter killed with
 * kill -9, the server restarted (a fast shutdown, and kill -9 of every server process). Then a
 * negative control: a release without the owner check, which the stale-holder check catches.
 */

const HOLDER = fileURLToPath(new URL('./holder.mjs', import.meta.url));

/** A waiter's store settings and attempt as the acquire loop makes them, for the tests that call the store itself. */
const WAITER_SETTINGS = { instance: 'test', fenceRetention: 60_000, waiterLease: 30_000 } as const;
const WAITER = { ttl: 5_000 } as const;

/** A holder process (holder.mjs) driven over IPC; its messages are read in order. */
interface HolderProcess {
  readonly process: ChildProcess;
  send(message: Record<string, unknown>): void;
  next(timeout?: number): Promise<HolderMessage>;
  kill9(): Promise<void>;
}

describe('PostgreSQL faults', () => {
  const db = postgresFixture();
  const later = db.later;

  function leasehold(prefix: string, options: LeaseholdOptions = {}, on: pg.Pool = db.pool): Leasehold {
    return db.leasehold(on, { prefix, ...options });
  }

  async function holder(prefix: string): Promise<HolderProcess> {
    const child = fork(HOLDER, [db.server.url, prefix], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const inbox: HolderMessage[] = [];
    const readers: Array<(m: HolderMessage) => void> = [];
    child.on('message', (m: HolderMessage) => {
      const reader = readers.shift();
      if (reader) reader(m);
      else inbox.push(m);
    });
    const h: HolderProcess = {
      process: child,
      send: (message) => child.send(message),
      next: (timeout = 10_000) => {
        const queued = inbox.shift();
        if (queued) return Promise.resolve(queued);
        return new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`no message from the holder in ${timeout} ms`)), timeout);
          readers.push((m) => {
            clearTimeout(timer);
            resolve(m);
          });
        });
      },
      kill9: async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, 'exit');
        child.kill('SIGKILL');
        await exited;
      },
    };
    later(() => h.kill9());
    expect((await h.next()).event).toBe('ready');
    return h;
  }

  /** Who holds `name` now, read behind every Leasehold's back. */
  async function holderOf(prefix: string, name: string): Promise<string | null> {
    return (await new PostgresStore(db.pool, { prefix }).inspect(name)).owner;
  }

  /** The server process behind each connection whose application_name is `app`. */
  async function backendsOf(app: string): Promise<number[]> {
    const rows = await db.server.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
      [app],
    );
    return rows.map((r) => r.pid);
  }

  it('a holder process frozen past its lease: another acquires with a higher token; the stale holder is told on wake, and cannot release the new lock', async () => {
    const prefix = randomPrefix();
    const stale = await holder(prefix);
    stale.send({ cmd: 'acquire', name: 'payment:7', ttl: 1_000 });
    const acquired = await stale.next();
    expect(acquired.event).toBe('acquired');

    stale.process.kill('SIGSTOP');
    later(() => stale.process.kill('SIGCONT'));
    const fresh = await leasehold(prefix).acquire('payment:7', { ttl: 10_000, wait: 5_000 });
    expect(fresh.fencingToken).toBeGreaterThan(acquired.fencingToken as number);

    stale.process.kill('SIGCONT');
    const lost = await stale.next();
    expect(lost).toMatchObject({ event: 'lost', reason: 'validity-elapsed', expiresIn: 0 });
    stale.send({ cmd: 'release' });
    expect(await stale.next()).toEqual({ event: 'released', released: false });
    expect(await holderOf(prefix, 'payment:7')).toBe(fresh.owner);
    expect(fresh.signal.aborted).toBe(false);
    expect(await fresh.release()).toBe(true);
  });

  it('the database backend of a holder’s connection frozen past the lease: its signal aborts, the next owner gets a higher token, the late extensions find another owner', async () => {
    const prefix = randomPrefix();
    const app = `frozen-${prefix}`;
    const frozen = leasehold(prefix, { commandTimeout: 300 }, db.ownPool({ max: 1, application_name: app }));
    const lock = await frozen.acquire('frozen', { ttl: 1_200 });
    const pids = await backendsOf(app);
    expect(pids).toHaveLength(1);
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    const resume = () => {
      for (const pid of pids) process.kill(pid, 'SIGCONT');
    };
    later(resume);

    const other = leasehold(prefix);
    const next = other.acquire('frozen', { ttl: 10_000, wait: 5_000 });
    await waitFor(() => lock.signal.aborted, { timeout: 3_000 });
    expect((lock.signal.reason as LockLostError).reason).toBe('validity-elapsed');
    const taken = await next;
    expect(taken.fencingToken).toBeGreaterThan(lock.fencingToken);

    // The extensions the watchdog sent into the frozen backend run now: not the owner any more.
    resume();
    expect(await lock.release()).toBe(false);
    expect(await holderOf(prefix, 'frozen')).toBe(taken.owner);
    expect(taken.signal.aborted).toBe(false);
    expect(await taken.release()).toBe(true);
  });

  it('a holder killed with kill -9 while another instance waits: nothing wakes the waiter but the lease ending, then it takes the lock with a higher token', async () => {
    const prefix = randomPrefix();
    const victim = await holder(prefix);
    victim.send({ cmd: 'acquire', name: 'job', ttl: 1_000, autoExtend: false });
    const { fencingToken, owner } = await victim.next();
    await victim.kill9();
    const diedAt = performance.now();
    // The grant outlives its holder: the row still names it, until the lease runs out on the server's clock.
    const state = await new PostgresStore(db.pool, { prefix }).inspect('job');
    expect(state).toMatchObject({ owner, fence: fencingToken, holder: { token: fencingToken } });
    const lock = await leasehold(prefix).acquire('job', { wait: 5_000 });
    expect(performance.now() - diedAt).toBeGreaterThan(state.pttl - 300);
    expect(lock.fencingToken).toBeGreaterThan(fencingToken as number);
    expect(await lock.release()).toBe(true);
  });

  it('a waiter killed with kill -9 while first in line: the release reserves the lock for it, the reservation lapses, and the next waiter gets the lock', async () => {
    const prefix = randomPrefix();
    const held = await leasehold(prefix).acquire('queue', { ttl: 10_000 });
    const doomed = await holder(prefix);
    doomed.send({ cmd: 'wait', name: 'queue', ttl: 10_000, wait: 20_000 });
    expect((await doomed.next()).event).toBe('waiting');
    const store = new PostgresStore(db.pool, { prefix });
    const line = async () => (await store.queued('queue', 5)).first;
    await waitFor(async () => (await line()).length === 1, { timeout: 5_000 });
    const [dead] = await line();
    await doomed.kill9();
    const next = leasehold(prefix).acquire('queue', { wait: 10_000 });
    await waitFor(async () => (await line()).length === 2, { timeout: 5_000 });
    expect(await held.release()).toBe(true);
    const releasedAt = performance.now();
    // Its row lives on for its lease (6 s): the hand-off picks it, and its reservation (250 ms) is all it costs.
    expect((await store.queued('queue', 5)).reserved?.owner).toBe(dead);
    const lock = await next;
    expect(performance.now() - releasedAt).toBeLessThan(3_000);
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await lock.release()).toBe(true);
  });

  it('the server restarted, by a fast shutdown and by kill -9 of every server process: leases are rows and survive, tokens strictly increase, hand-offs reach a new listening session', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix, { commandTimeout: 1_000 });
    const tokens: number[] = [];
    const take = async (name: string) => {
      const lock = await locks.acquire(name, { ttl: 15_000, wait: 10_000 });
      tokens.push(lock.fencingToken);
      return lock;
    };
    const store = new PostgresStore(db.ownPool(), { prefix, ...WAITER_SETTINGS });
    later(() => store.close());
    const handOffs: HandOff[] = [];
    await store.watch('held', (h) => handOffs.push(h));
    for (const hard of [false, true]) {
      const before = await take('restart');
      const held = await take('held');
      const waiter = `waiter-${hard}`;
      const queued = await store.acquire('held', { ...WAITER, owner: waiter, queue: 'join' });
      expect(queued.acquired).toBe(false);
      const postmaster = db.server.pid;
      await db.server.restart({ hard });
      expect(db.server.pid).not.toBe(postmaster);

      // The lease is a committed row on the database's clock: still held after the restart.
      await waitFor(async () => (await locks.tryAcquire('restart').catch(() => 'down')) === null, {
        timeout: 10_000,
        message: 'the server back, the lock still held',
      });
      expect(await before.release()).toBe(true);
      const after = await take('restart');
      expect(await after.release()).toBe(true);

      // The listening session died with the server; a new one LISTENs on the lock's channel again.
      const listen = `LISTEN "${channelOf(prefix, 'held')}"`;
      await waitFor(
        async () => (await db.server.query('SELECT 1 FROM pg_stat_activity WHERE query = $1', [listen])).length === 1,
        { timeout: 10_000, message: 'the channel LISTENed again' },
      );
      expect(await held.release()).toBe(true);
      await waitFor(() => handOffs.some((h) => h.woken === waiter), { timeout: 3_000, message: 'the hand-off heard' });
      const reserved = await store.acquire('held', { ...WAITER, owner: waiter, queue: 'member' });
      expect(reserved.acquired).toBe(true);
      if (reserved.acquired) tokens.push(reserved.fence);
      expect(await store.release('held', waiter)).toBe('released');
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as number);
  }, 60_000);

  /**
   * A holder whose lease ran out releases after another owner took the lock: the later owner must
   * still hold it. Returns whether it does.
   */
  async function laterOwnerSurvives(prefix: string, stale: Leasehold): Promise<boolean> {
    const first = await stale.acquire('nc', { ttl: 200, autoExtend: false });
    await sleep(300);
    const later = await leasehold(prefix).acquire('nc', { ttl: 10_000 });
    await first.release();
    const survived = (await holderOf(prefix, 'nc')) === later.owner;
    await later.release();
    return survived;
  }

  it('negative control: a release without the owner check lets a stale holder delete a later owner’s lock, and the check catches it', async () => {
    const prefix = randomPrefix();
    expect(await laterOwnerSurvives(prefix, leasehold(prefix))).toBe(true);

    // The classic mistake: delete by name, whoever holds the lock.
    class UncheckedRelease extends PostgresStore {
      override async release(name: string): Promise<'released'> {
        await db.pool.query(`UPDATE ${this.names.locks} SET expires_at = '-infinity' WHERE name = $1`, [name]);
        return 'released';
      }
    }
    const broken = new Leasehold(new UncheckedRelease(db.pool, { prefix }), { prefix });
    later(() => broken.close());
    expect(await laterOwnerSurvives(prefix, broken)).toBe(false);
  });
});
