import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode, Leasehold, LockError, type LockLostError, RedisUnavailableError } from '../../src/index.js';
import { KeySpace } from '../../src/store/etcd/keys.js';
import { type EtcdServer, freePort, randomPrefix, startEtcd, waitFor } from '../harness/index.js';
import { type EtcdHolder, startHolder } from './holder.js';

/**
 * Real faults against a real etcd: a holder process frozen with SIGSTOP past its session, a holder
 * and a waiter killed with kill -9, a session lease revoked behind its holder's back, the server
 * killed and restarted, nothing listening, a value leasehold did not write. No mocks.
 */

/** The holders' session: short, so a dead holder's locks go within seconds. */
const SESSION_TTL = 2_000;

describe('etcd faults', () => {
  let server: EtcdServer;
  let raw: Etcd3;
  const cleanups: Array<() => unknown> = [];

  beforeAll(async () => {
    server = await startEtcd();
    raw = new Etcd3({ hosts: server.endpoints });
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    raw?.close();
    await server?.stop();
  });

  function leasehold(prefix: string, options: ConstructorParameters<typeof Leasehold>[1] = {}): Leasehold {
    const client = new Etcd3({ hosts: server.endpoints });
    const locks = new Leasehold({ etcd: client, sessionTtl: SESSION_TTL }, { prefix, ...options });
    cleanups.push(
      () => client.close(),
      () => locks.close(),
    );
    return locks;
  }

  async function holder(prefix: string): Promise<EtcdHolder> {
    const h = await startHolder(server.endpoints, prefix, SESSION_TTL);
    cleanups.push(() => h.kill9());
    return h;
  }

  /** The keys in line for `name`, first (the holder's) first. */
  async function line(prefix: string, name: string) {
    const { start, end } = new KeySpace(Buffer.alloc(0), prefix).lock(name).queue;
    const range = await raw.kv.range({ key: start, range_end: end, sort_target: 'Create', sort_order: 'Ascend' });
    return range.kvs;
  }

  it('a holder frozen past its session: another acquires with a higher token; on wake the stale holder is told, and cannot release the new lock', async () => {
    const prefix = randomPrefix();
    const stale = await holder(prefix);
    stale.send({ cmd: 'acquire', name: 'payment:7', ttl: 1_000 });
    const acquired = await stale.next();
    expect(acquired.event).toBe('acquired');

    stale.process.kill('SIGSTOP');
    cleanups.push(() => stale.process.kill('SIGCONT'));
    const locks = leasehold(prefix);
    // Nothing renews the frozen process's session: etcd ends it, and deletes its key.
    const fresh = await locks.acquire('payment:7', { ttl: 10_000, wait: 10_000 });
    expect(fresh.fencingToken).toBeGreaterThan(acquired.fencingToken as number);

    stale.process.kill('SIGCONT');
    const lost = await stale.next();
    expect(lost.event).toBe('lost');
    expect(lost.reason).toBe('validity-elapsed');
    stale.send({ cmd: 'release' });
    expect(await stale.next()).toEqual({ event: 'released', released: false });
    const [first] = await line(prefix, 'payment:7');
    expect(first?.value.toString()).toContain(fresh.owner);
    expect(fresh.signal.aborted).toBe(false);
    expect(await fresh.release()).toBe(true);
  });

  it('a holder killed with kill -9: the lock is held until its session ends, then the next owner gets it with a higher token', async () => {
    const prefix = randomPrefix();
    const victim = await holder(prefix);
    victim.send({ cmd: 'acquire', name: 'job', ttl: 1_000 });
    const acquired = await victim.next();
    await victim.kill9();
    const killedAt = performance.now();
    const locks = leasehold(prefix);
    expect(await locks.tryAcquire('job')).toBeNull();
    const next = await locks.acquire('job', { wait: 10_000 });
    const waited = performance.now() - killedAt;
    // Nothing deletes it but etcd, when the dead process's session runs out unrenewed.
    expect(waited).toBeGreaterThan(500);
    expect(waited).toBeLessThan(SESSION_TTL + 3_000);
    expect(next.fencingToken).toBeGreaterThan(acquired.fencingToken as number);
    await next.release();
  });

  it('a waiter killed with kill -9 while first in line: its key goes with its session, and the next waiter gets the lock', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const held = await locks.acquire('queue', { ttl: 10_000 });
    const doomed = await holder(prefix);
    doomed.send({ cmd: 'acquire', name: 'queue', ttl: 10_000, wait: 20_000 });
    expect((await doomed.next()).event).toBe('waiting');
    await waitFor(async () => (await line(prefix, 'queue')).length === 2);
    await doomed.kill9();
    const next = leasehold(prefix).acquire('queue', { wait: 10_000 });
    await waitFor(async () => (await line(prefix, 'queue')).length === 3);
    await held.release();
    const started = performance.now();
    const lock = await next;
    expect(performance.now() - started).toBeLessThan(SESSION_TTL + 3_000);
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await lock.release()).toBe(true);
  });

  it('a session revoked behind its holder’s back: the next extension answers expired and the signal aborts; its key is gone at once', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const lock = await locks.acquire('revoked', { ttl: 1_500 });
    const [key] = await line(prefix, 'revoked');
    await raw.leaseClient.leaseRevoke({ ID: key?.lease ?? '' });
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

    await server.restart({ hard: true });
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

  it('nothing listening: acquire fails with RedisUnavailableError in bounded time', async () => {
    const port = await freePort();
    const dead = new Etcd3({ hosts: `http://127.0.0.1:${port}` });
    cleanups.push(() => dead.close());
    const locks = new Leasehold(dead, { commandTimeout: 300 });
    cleanups.push(() => locks.close());
    const started = performance.now();
    const error = await locks.acquire('x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('a value under the prefix that leasehold did not write is a store error, never “unavailable”', async () => {
    const prefix = randomPrefix();
    const { member } = new KeySpace(Buffer.alloc(0), prefix).lock('odd');
    await raw.put(member('someone')).value('not json');
    const error = await leasehold(prefix)
      .tryAcquire('odd')
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect(error).not.toBeInstanceOf(RedisUnavailableError);
    expect((error as LockError).code).toBe(ErrorCode.STORE);
    expect((error as Error).message).toMatch(/is not one leasehold wrote/);
  });
});
