import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import {
  ErrorCode,
  Leasehold,
  type LeaseholdOptions,
  LockError,
  type LockLostError,
  StoreUnavailableError,
} from '../../src/index.js';
import { KeySpace } from '../../src/store/etcd/keys.js';
import { freePort, randomPrefix, startEtcd, waitFor } from '../harness/index.js';
import { etcdFixture } from './fixture.js';
import { type EtcdHolder, startHolder } from './holder.js';

/**
 * Real faults against a real etcd: a holder process frozen with SIGSTOP past its session, a holder
 * and a waiter killed with kill -9, a session lease revoked behind its holder's back, the server
 * killed and restarted, nothing listening, a value leasehold did not write. No mocks.
 */

/** The holders' session: short, so a dead holder's locks go within seconds. */
const SESSION_TTL = 2_000;

describe('etcd faults', () => {
  const etcd = etcdFixture(() => startEtcd());
  const leasehold = (prefix: string, options: LeaseholdOptions = {}) => etcd.leasehold(prefix, SESSION_TTL, options);
  const line = (prefix: string, name: string) => etcd.line(prefix, name);

  async function holder(prefix: string): Promise<EtcdHolder> {
    const h = await startHolder(etcd.server().endpoints, prefix, SESSION_TTL);
    etcd.cleanup(() => h.kill9());
    return h;
  }

  /** A holder process that took `name` with `ttl` ms, and the token it got. */
  async function heldElsewhere(prefix: string, name: string, ttl: number): Promise<[EtcdHolder, number]> {
    const child = await holder(prefix);
    child.send({ cmd: 'acquire', name, ttl });
    const report = await child.next();
    if (report.event !== 'acquired') throw new Error(`the holder did not acquire: ${JSON.stringify(report)}`);
    return [child, report.fencingToken as number];
  }

  it('a holder frozen past its session: another acquires with a higher token; on wake the stale holder is told, and cannot release the new lock', async () => {
    const prefix = randomPrefix();
    const [frozen, staleToken] = await heldElsewhere(prefix, 'payment:7', 1_000);
    frozen.process.kill('SIGSTOP');
    etcd.cleanup(() => frozen.process.kill('SIGCONT'));
    // Nothing renews the frozen process's session: etcd ends it, and deletes its key.
    const fresh = await leasehold(prefix).acquire('payment:7', { ttl: 10_000, wait: 10_000 });
    expect(fresh.fencingToken).toBeGreaterThan(staleToken);
    frozen.process.kill('SIGCONT');
    // Woken, its own clock says the lease ran out before any extension was confirmed.
    expect(await frozen.next()).toMatchObject({ event: 'lost', reason: 'validity-elapsed' });
    frozen.send({ cmd: 'release' });
    expect(await frozen.next()).toEqual({ event: 'released', released: false });
    const [first] = await line(prefix, 'payment:7');
    expect(first?.value.toString()).toContain(fresh.owner);
    expect(fresh.signal.aborted).toBe(false);
    expect(await fresh.release()).toBe(true);
  });

  it('a holder killed with kill -9: the lock is held until its session ends, then the next owner gets it with a higher token', async () => {
    const prefix = randomPrefix();
    const [victim, victimToken] = await heldElsewhere(prefix, 'job', 1_000);
    await victim.kill9();
    const killedAt = performance.now();
    const locks = leasehold(prefix);
    expect(await locks.tryAcquire('job')).toBeNull();
    const next = await locks.acquire('job', { wait: 10_000 });
    const waited = performance.now() - killedAt;
    // Nothing deletes it but etcd, when the dead process's session runs out unrenewed.
    expect(waited).toBeGreaterThan(500);
    expect(waited).toBeLessThan(SESSION_TTL + 3_000);
    expect(next.fencingToken).toBeGreaterThan(victimToken);
    await next.release();
  });

  it('a waiter killed with kill -9 while first in line: its key goes with its session, and the next waiter gets the lock', async () => {
    const prefix = randomPrefix();
    const inLine = (n: number) => waitFor(async () => (await line(prefix, 'queue')).length === n);
    const first = await leasehold(prefix).acquire('queue', { ttl: 10_000 });
    const dead = await holder(prefix);
    dead.send({ cmd: 'acquire', name: 'queue', ttl: 10_000, wait: 20_000 });
    await inLine(2);
    await dead.kill9();
    const third = leasehold(prefix).acquire('queue', { wait: 10_000 });
    await inLine(3);
    // Released, the lock is the dead waiter's until etcd ends its session (no reservation to lapse).
    await first.release();
    const releasedAt = performance.now();
    const lock = await third;
    expect(performance.now() - releasedAt).toBeLessThan(SESSION_TTL + 3_000);
    expect(lock.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await lock.release()).toBe(true);
  });

  it('a session revoked behind its holder’s back: the next extension answers expired and the signal aborts; its key is gone at once', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const lock = await locks.acquire('revoked', { ttl: 1_500 });
    const [key] = await line(prefix, 'revoked');
    await etcd.raw().leaseClient.leaseRevoke({ ID: key?.lease ?? '' });
    expect(await line(prefix, 'revoked')).toHaveLength(0);
    // Within a third of the ttl (the watchdog's rhythm), and before validity could run out.
    await waitFor(() => lock.signal.aborted, { timeout: 1_400 });
    expect((lock.signal.reason as LockLostError).reason).toBe('expired');
    const next = await leasehold(prefix).acquire('revoked', { wait: 0 });
    expect(next.fencingToken).toBeGreaterThan(lock.fencingToken);
    await next.release();
  });

  it('etcd killed and restarted: a lock held across it stays held, and tokens strictly increase across the restart', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const before = await locks.acquire('restart', { ttl: 5_000 });
    expect(await before.release()).toBe(true);
    const held = await locks.acquire('held', { ttl: 15_000 });

    await etcd.server().restart({ hard: true });
    // The lease and the key came back with etcd's data; the watchdog's extensions reach it again.
    await waitFor(
      async () => {
        await held.extend();
        return true;
      },
      { timeout: 12_000, interval: 200 },
    );
    expect(held.signal.aborted).toBe(false);
    const after = await locks.acquire('restart', { ttl: 5_000 });
    expect(after.fencingToken).toBeGreaterThan(before.fencingToken);
    expect(after.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await after.release()).toBe(true);
    expect(await held.release()).toBe(true);
  });

  it('nothing listening: acquire and the scheduler fail with StoreUnavailableError in bounded time', async () => {
    const nowhere = new Etcd3({ hosts: `http://127.0.0.1:${await freePort()}` });
    const locks = new Leasehold(nowhere, { commandTimeout: 300 });
    etcd.cleanup(
      () => nowhere.close(),
      () => locks.close(),
    );
    const started = performance.now();
    await expect(locks.acquire('x')).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(locks.withLock('x', () => 1)).rejects.toBeInstanceOf(StoreUnavailableError);
    // Fail closed: a tick is skipped as unavailable, never run unlocked unless asked to.
    expect(await locks.runOnce('nightly', () => 1)).toEqual({ ran: false, reason: 'unavailable' });
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('a value under the prefix that leasehold did not write is a store error, never “unavailable”', async () => {
    const prefix = randomPrefix();
    const { member } = new KeySpace(Buffer.alloc(0), prefix).lock('odd');
    await etcd.raw().put(member('someone')).value('not json');
    const error = await leasehold(prefix)
      .tryAcquire('odd')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect(error).not.toBeInstanceOf(StoreUnavailableError);
    expect((error as LockError).code).toBe(ErrorCode.STORE_ERROR);
    expect((error as Error).message).toMatch(/is not one leasehold wrote/);
  });
});
