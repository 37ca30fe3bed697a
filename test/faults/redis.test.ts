import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../src/core/defaults.js';
import { Leasehold, type LockLostError, StoreUnavailableError } from '../../src/index.js';
import { lockKeys } from '../../src/store/index.js';
import {
  counterToken,
  freePort,
  lockRecord,
  type RedisServer,
  randomPrefix,
  startProxy,
  startRedis,
  type TcpProxy,
  waitFor,
} from '../harness/index.js';
import { Holder } from './child.js';

/**
 * Real faults against a real redis-server: a holder process frozen with SIGSTOP past its lease,
 * a holder killed with kill -9, a restarted server (script cache gone), an unreachable or
 * black-holed server, a paused server. No mocks: every fault is a process or network fault.
 */
describe('faults', () => {
  let server: RedisServer;
  let client: Redis;
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  beforeAll(async () => {
    server = await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
    client = new Redis(server.port, server.host);
    // A test restarts the server: the refused reconnects are expected, not news for the log.
    client.on('error', () => {});
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    client.disconnect();
    await server.stop();
  });

  function leasehold(prefix: string, options: ConstructorParameters<typeof Leasehold>[1] = {}): Leasehold {
    const locks = new Leasehold(client, { prefix, ...options });
    cleanups.push(() => locks.close());
    return locks;
  }

  /** A Leasehold whose connection runs through our TCP proxy, so a test can degrade the network. */
  async function throughProxy(prefix: string, commandTimeout: number): Promise<{ proxy: TcpProxy; locks: Leasehold }> {
    const proxy = await startProxy({ host: server.host, port: server.port });
    cleanups.push(() => proxy.close());
    const viaProxy = new Redis(proxy.port, proxy.host);
    viaProxy.on('error', () => {});
    cleanups.push(() => viaProxy.disconnect());
    await viaProxy.ping();
    const locks = new Leasehold(viaProxy, { prefix, commandTimeout });
    cleanups.push(() => locks.close());
    return { proxy, locks };
  }

  async function holder(prefix: string): Promise<Holder> {
    const h = await Holder.start(server.url, prefix);
    cleanups.push(() => h.kill9());
    return h;
  }

  it('a holder frozen past its ttl: another acquires; on wake the stale holder is told, and cannot release the new lock', async () => {
    const prefix = randomPrefix();
    const stale = await holder(prefix);
    stale.send({ cmd: 'acquire', name: 'payment:7', ttl: 1_000 });
    const acquired = await stale.next();
    expect(acquired.event).toBe('acquired');

    stale.process.kill('SIGSTOP');
    cleanups.push(() => stale.process.kill('SIGCONT'));
    const locks = leasehold(prefix);
    const fresh = await locks.acquire('payment:7', { ttl: 10_000, wait: 5_000 });
    expect(fresh.fencingToken).toBeGreaterThan(acquired.fencingToken as number);

    stale.process.kill('SIGCONT');
    const lost = await stale.next();
    expect(lost.event).toBe('lost');
    // Its own clock ran past the lease before any extension was confirmed.
    expect(lost.reason).toBe('validity-elapsed');
    expect(lost.expiresIn).toBe(0);

    stale.send({ cmd: 'release' });
    expect(await stale.next()).toEqual({ event: 'released', released: false });
    expect(lockRecord(await client.get(lockKeys(prefix, 'payment:7').lock)).state).toBe(fresh.owner);
    expect(fresh.signal.aborted).toBe(false);
    expect(await fresh.release()).toBe(true);
  });

  it('a holder killed with kill -9: the lock stays held until its ttl ends, then is acquirable', async () => {
    const prefix = randomPrefix();
    const victim = await holder(prefix);
    victim.send({ cmd: 'acquire', name: 'job', ttl: 1_000 });
    const acquired = await victim.next();
    await victim.kill9();
    const killedAt = performance.now();
    const locks = leasehold(prefix);
    expect(await locks.tryAcquire('job')).toBeNull();
    const next = await locks.acquire('job', { wait: 5_000 });
    expect(performance.now() - killedAt).toBeGreaterThan(500);
    expect(next.fencingToken).toBeGreaterThan(acquired.fencingToken as number);
    await next.release();
  });

  it('a waiter killed with kill -9 while first in line: the lock it was handed frees itself for the next', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const held = await locks.acquire('queue', { ttl: 10_000 });
    const doomed = await holder(prefix);
    doomed.send({ cmd: 'wait', name: 'queue', ttl: 10_000, wait: 20_000 });
    expect((await doomed.next()).event).toBe('waiting');
    const keys = lockKeys(prefix, 'queue');
    await waitFor(async () => (await client.zcard(keys.waiters)) === 1, { timeout: 5_000 });
    await doomed.kill9();
    const other = leasehold(prefix);
    const next = other.acquire('queue', { wait: 10_000 });
    await waitFor(async () => (await client.zcard(keys.waiters)) === 2, { timeout: 5_000 });
    await held.release();
    // The release handed the lock to the dead waiter; its reservation runs out and the next one gets it.
    const started = performance.now();
    const lock = await next;
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await lock.release()).toBe(true);
  });

  it('a restarted redis-server keeps the function library (persisted with the data); a server that lost it gets it loaded again', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix);
    const before = await locks.acquire('restart', { ttl: 5_000 });
    expect(await before.release()).toBe(true);

    await server.restart();
    await waitFor(async () => (await client.ping().catch(() => '')) === 'PONG', { timeout: 10_000 });
    // With persistence (appendonly) the library came back with the data: no reload needed.
    expect(String(await server.command('FUNCTION', 'LIST'))).toMatch(/leasehold_/);
    const after = await locks.acquire('restart', { ttl: 5_000 });
    // With persistence (appendfsync always) the fencing counter survived the restart.
    expect(after.fencingToken).toBeGreaterThan(before.fencingToken);
    expect(await after.release()).toBe(true);

    // A server without the library (flushed, or restarted without persistence): loaded again at once.
    await server.command('FUNCTION', 'FLUSH');
    await server.command('CONFIG', 'RESETSTAT');
    const again = await locks.acquire('restart', { ttl: 5_000 });
    expect(again.fencingToken).toBeGreaterThan(after.fencingToken);
    expect(await again.release()).toBe(true);
    const stats = String(await server.command('INFO', 'commandstats'));
    expect(stats).toMatch(/cmdstat_function\|load:calls=1,/);
    expect(stats).toMatch(/cmdstat_fcall:calls=[3-9]/);
    expect(stats).not.toMatch(/cmdstat_eval/);
  });

  it('a user the server does not let load functions: scripts run by EVALSHA, and EVAL on NOSCRIPT', async () => {
    const prefix = randomPrefix();
    const user = `nofn${prefix.replace(/\W/g, '')}`;
    await server.command('ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-function', '-fcall');
    cleanups.push(() => server.command('ACL', 'DELUSER', user));
    await server.command('FUNCTION', 'FLUSH');
    await server.command('SCRIPT', 'FLUSH');
    await server.command('CONFIG', 'RESETSTAT');
    const limited = new Redis(server.port, server.host, { username: user, password: 'pw' });
    cleanups.push(() => limited.disconnect());
    const locks = new Leasehold(limited, { prefix, unsafeConfig: 'ignore' });
    cleanups.push(() => locks.close());
    const first = await locks.acquire('acl', { ttl: 5_000 });
    expect(await first.release()).toBe(true);
    const second = await locks.acquire('acl', { ttl: 5_000 });
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await second.release()).toBe(true);
    const stats = String(await server.command('INFO', 'commandstats'));
    expect(stats).toMatch(/cmdstat_eval:calls=[1-9]/);
    expect(stats).toMatch(/cmdstat_evalsha:calls=[3-9]/);
    expect(stats).toMatch(/cmdstat_fcall:calls=\d+,.*rejected_calls=1,/);
  });

  it('nothing listening: acquire fails with StoreUnavailableError in bounded time', async () => {
    const port = await freePort();
    const dead = new Redis(port, '127.0.0.1', { lazyConnect: false });
    dead.on('error', () => {});
    cleanups.push(() => dead.disconnect());
    const locks = new Leasehold(dead, { commandTimeout: 300 });
    cleanups.push(() => locks.close());
    const started = performance.now();
    const error = await locks.acquire('x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('a black-holed network: acquire fails in bounded time; whenUnavailable decides what withLock does', async () => {
    const { proxy, locks } = await throughProxy(randomPrefix(), 300);
    proxy.blackhole(true);

    const started = performance.now();
    await expect(locks.acquire('settle')).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(performance.now() - started).toBeLessThan(3_000);

    let ran = 0;
    await expect(locks.withLock('settle', async () => ran++)).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(ran).toBe(0);
    expect(await locks.tryWithLock('settle', { whenUnavailable: 'skip' }, async () => ran++)).toEqual({
      ran: false,
      reason: 'unavailable',
    });
    expect(await locks.withLock('settle', { whenUnavailable: 'skip' }, async () => ran++)).toBeUndefined();
    expect(ran).toBe(0);
    const value = await locks.withLock('cleanup', { whenUnavailable: 'run' }, async (signal, lock) => {
      expect(lock).toBeNull();
      expect(signal.aborted).toBe(false);
      return 'ran unlocked';
    });
    expect(value).toBe('ran unlocked');
    proxy.blackhole(false);
  });

  it('an answer that comes after acquire gave up is released, not left as an orphan lock', async () => {
    const prefix = randomPrefix();
    const { proxy, locks } = await throughProxy(prefix, 200);
    proxy.setLatency(300);
    await expect(locks.acquire('late', { ttl: 30_000 })).rejects.toBeInstanceOf(StoreUnavailableError);
    const key = lockKeys(prefix, 'late').lock;
    // The script ran on the server and took the lock; the late reply triggers the release.
    await waitFor(async () => lockRecord(await client.get(key)).state !== null, { timeout: 3_000 });
    await waitFor(async () => lockRecord(await client.get(key)).state === null, { timeout: 5_000 });
    // It did issue a token (the record is there), and nobody holds the lock it granted.
    expect(counterToken(await client.get(key))).toBeGreaterThan(0);
  });

  it('a refusal that comes after a waiting acquire gave up leaves the queue: no entry waits out waiterLease, no release reserves for it', async () => {
    const prefix = randomPrefix();
    const holder = await leasehold(prefix).acquire('queued-late', { ttl: 30_000 });
    const { proxy, locks } = await throughProxy(prefix, 200);
    // Each way 500 ms: the attempt lands (and queues) at 500, its refusal is back at 1,000, long
    // after the 200 ms commandTimeout, and the entry stands until the leave lands at 1,500.
    proxy.setLatency(500);
    await expect(locks.acquire('queued-late', { wait: 10_000 })).rejects.toBeInstanceOf(StoreUnavailableError);
    const waiters = lockKeys(prefix, 'queued-late').waiters;
    await waitFor(async () => (await client.zcard(waiters)) === 1, {
      timeout: 3_000,
      message: 'the late attempt queued',
    });
    // Gone well inside waiterLease (its entry would otherwise stand that long).
    await waitFor(async () => (await client.zcard(waiters)) === 0, {
      timeout: DEFAULTS.waiterLease / 2,
      message: 'the entry left',
    });
    // So the release reserves the lock for nobody: the next caller takes it at once.
    expect(await holder.release()).toBe(true);
    expect(await leasehold(prefix).tryAcquire('queued-late')).not.toBeNull();
  });

  it('a frozen redis-server: the holder’s signal aborts once its validity runs out, with no answer from Redis', async () => {
    const prefix = randomPrefix();
    const locks = leasehold(prefix, { commandTimeout: 200 });
    const lock = await locks.acquire('frozen', { ttl: 600 });
    server.pause();
    cleanups.push(() => server.resume());
    try {
      await waitFor(() => lock.signal.aborted, { timeout: 3_000 });
      expect((lock.signal.reason as LockLostError).reason).toBe('validity-elapsed');
      // Validity ends a drift margin before the lease: let the lease itself run out before the
      // server wakes, or a watchdog extend queued during the pause could still find it alive.
      await sleep(100);
    } finally {
      server.resume();
    }
    await sleep(50);
    expect(await lock.release()).toBe(false);
  });
});
