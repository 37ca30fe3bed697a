import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Leasehold, type Lock } from '../../src/index.js';
import { type RedisServer, randomPrefix, startProxy, startRedis, type TcpProxy } from '../harness/index.js';

/**
 * A safety check is trusted only if a broken lock makes it fail. The exclusion check below runs
 * unchanged on leasehold and on two classic broken locks (plain DEL release; GET then DEL),
 * through the same TCP proxy with the same network latency. It must find no violation for
 * leasehold and must find one for each broken lock.
 *
 * Violation: two critical sections overlap although both holders' leases were still valid by
 * their own clock when they left. A lease alone cannot stop an *expired* holder from running on
 * (that is what fencing is for, tested further down), but no correct lock lets two *valid*
 * holders in at once.
 */

interface Held {
  readonly validAtExit: () => boolean;
  readonly release: () => Promise<void>;
}

interface LockUnderTest {
  readonly label: string;
  tryAcquire(name: string, ttl: number): Promise<Held | null>;
  close(): Promise<void>;
}

interface Section {
  readonly worker: number;
  readonly enter: number;
  readonly exit: number;
  readonly valid: boolean;
}

/** A lease measured the way a careful naive client would: from the moment the SET was sent. */
function naiveValidity(sentAt: number, ttl: number): () => boolean {
  return () => performance.now() < sentAt + ttl * 0.99 - 2;
}

function leaseholdLock(client: Redis, prefix: string): LockUnderTest {
  const locks = new Leasehold(client, { prefix, commandTimeout: 5_000 });
  return {
    label: 'leasehold',
    async tryAcquire(name, ttl) {
      const lock: Lock | null = await locks.tryAcquire(name, { ttl, autoExtend: false });
      if (!lock) return null;
      return { validAtExit: () => lock.expiresIn() > 0, release: async () => void (await lock.release()) };
    },
    close: () => locks.close(),
  };
}

function plainDelLock(client: Redis, prefix: string): LockUnderTest {
  return {
    label: 'SET NX PX + plain DEL',
    async tryAcquire(name, ttl) {
      const key = `${prefix}:${name}`;
      const sentAt = performance.now();
      const ok = await client.set(key, randomBytes(16).toString('hex'), 'PX', ttl, 'NX');
      if (ok !== 'OK') return null;
      return { validAtExit: naiveValidity(sentAt, ttl), release: async () => void (await client.del(key)) };
    },
    close: async () => {},
  };
}

function getThenDelLock(client: Redis, prefix: string): LockUnderTest {
  return {
    label: 'SET NX PX + GET then DEL',
    async tryAcquire(name, ttl) {
      const key = `${prefix}:${name}`;
      const token = randomBytes(16).toString('hex');
      const sentAt = performance.now();
      const ok = await client.set(key, token, 'PX', ttl, 'NX');
      if (ok !== 'OK') return null;
      return {
        validAtExit: naiveValidity(sentAt, ttl),
        release: async () => {
          // The lock can change hands between these two round trips.
          if ((await client.get(key)) === token) await client.del(key);
        },
      };
    },
    close: async () => {},
  };
}

/**
 * How long a holder works: short sections that end well inside the lease, sections that end
 * just before it expires (where a GET-then-DEL release races the expiry), and sections that
 * overrun it (whose late plain DEL hits the next holder).
 */
function holdFor(ttl: number): number {
  const r = Math.random();
  if (r < 0.4) return ttl * (0.15 + 0.25 * Math.random());
  if (r < 0.7) return ttl * (0.6 + 0.2 * Math.random());
  return ttl * (1 + 0.5 * Math.random());
}

/**
 * Workers (each its own connection, like separate pods) take turns on one lock. Runs until
 * `minMs` has passed, and then until a violation is found or `maxMs` has passed.
 */
async function exclusionRun(
  make: (client: Redis) => LockUnderTest,
  proxy: TcpProxy,
  opts: { workers: number; ttl: number; minMs: number; maxMs: number },
): Promise<{ sections: number; violations: Array<[Section, Section]> }> {
  const clients = Array.from({ length: opts.workers }, () => new Redis(proxy.port, proxy.host));
  const locks = clients.map(make);
  const sections: Section[] = [];
  const violations: Array<[Section, Section]> = [];
  const start = performance.now();
  const open = new Map<number, { enter: number; held: Held }>();
  const done = () => {
    const elapsed = performance.now() - start;
    return elapsed > opts.maxMs || (elapsed > opts.minMs && violations.length > 0);
  };
  await Promise.all(
    locks.map(async (lock, worker) => {
      while (!done()) {
        const held = await lock.tryAcquire('resource', opts.ttl);
        if (!held) {
          await sleep(1);
          continue;
        }
        const enter = performance.now();
        open.set(worker, { enter, held });
        await sleep(holdFor(opts.ttl));
        const exit = performance.now();
        open.delete(worker);
        const section = { worker, enter, exit, valid: held.validAtExit() };
        if (section.valid) {
          for (const other of sections) {
            if (other.valid && other.enter < section.exit && section.enter < other.exit)
              violations.push([other, section]);
          }
        }
        sections.push(section);
        await held.release();
      }
    }),
  );
  await Promise.all(locks.map((l) => l.close()));
  for (const c of clients) c.disconnect();
  return { sections: sections.length, violations };
}

describe('negative controls: the exclusion check fails on broken locks', () => {
  let server: RedisServer;
  let proxy: TcpProxy;
  const settings = { workers: 8, ttl: 100, minMs: 2_500, maxMs: 15_000 };

  beforeAll(async () => {
    server = await startRedis();
    proxy = await startProxy({ host: server.host, port: server.port });
    proxy.setLatency(10);
  });
  afterAll(async () => {
    await proxy.close();
    await server.stop();
  });

  it('leasehold: no two valid holders at once', async () => {
    const prefix = randomPrefix();
    const result = await exclusionRun((c) => leaseholdLock(c, prefix), proxy, { ...settings, maxMs: settings.minMs });
    expect(result.sections).toBeGreaterThan(10);
    expect(result.violations).toEqual([]);
  });

  it('plain DEL release (a slow holder deletes the next holder’s lock): violation detected', async () => {
    const prefix = randomPrefix();
    const result = await exclusionRun((c) => plainDelLock(c, prefix), proxy, settings);
    expect(result.violations.length).toBeGreaterThan(0);
  });

  it('GET then DEL (the lock changes hands between the two calls): violation detected', async () => {
    const prefix = randomPrefix();
    const result = await exclusionRun((c) => getThenDelLock(c, prefix), proxy, settings);
    expect(result.violations.length).toBeGreaterThan(0);
  });
});

/**
 * Fencing: a holder that pauses past its lease (a GC pause, SIGSTOP, a slow network) wakes up
 * believing it still holds the lock. No lease can prevent that; the protected resource must
 * reject its write because a newer token has been seen. The observer below records which writes
 * the resource accepted and flags any accepted write older than one accepted before it.
 */
class Resource {
  #newest = 0;
  readonly accepted: number[] = [];
  constructor(readonly fenced: boolean) {}

  write(token: number): boolean {
    if (this.fenced && token <= this.#newest) return false;
    this.#newest = Math.max(this.#newest, token);
    this.accepted.push(token);
    return true;
  }

  staleAccepted(): number {
    let newest = 0;
    let stale = 0;
    for (const token of this.accepted) {
      if (token < newest) stale++;
      newest = Math.max(newest, token);
    }
    return stale;
  }
}

describe('fencing: the resource rejects a paused holder’s stale write', () => {
  let server: RedisServer;
  let client: Redis;

  beforeAll(async () => {
    server = await startRedis();
    client = new Redis(server.port, server.host);
  });
  afterAll(async () => {
    client.disconnect();
    await server.stop();
  });

  async function pausedHolderRun(resource: Resource): Promise<void> {
    const locks = new Leasehold(client, { prefix: randomPrefix() });
    for (let round = 0; round < 5; round++) {
      const slow = await locks.acquire('ledger', { ttl: 100, autoExtend: false });
      // The slow holder decided to write, then stalled past its lease before the write landed.
      const stalled = sleep(250).then(() => resource.write(slow.fencingToken));
      const fast = await locks.acquire('ledger', { ttl: 5_000, wait: 2_000 });
      resource.write(fast.fencingToken);
      await stalled;
      await fast.release();
    }
    await locks.close();
  }

  it('with fencing: every stale write is rejected', async () => {
    const resource = new Resource(true);
    await pausedHolderRun(resource);
    expect(resource.accepted).toHaveLength(5);
    expect(resource.staleAccepted()).toBe(0);
  });

  it('without fencing (negative control): the observer catches the stale writes', async () => {
    const resource = new Resource(false);
    await pausedHolderRun(resource);
    expect(resource.staleAccepted()).toBe(5);
  });
});
