import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { now } from '../../src/core/clock.js';
import { DEFAULTS } from '../../src/core/defaults.js';
import type { LockEngine } from '../../src/core/engine.js';
import type { NodeOutcome } from '../../src/core/errors.js';
import {
  ErrorCode,
  Leasehold,
  type LeaseholdOptions,
  LockLostError,
  MemoryStore,
  QuorumError,
  StoreUnavailableError,
} from '../../src/index.js';
import { mutex } from '../../src/primitives/mutex.js';
import type { BackendOptions } from '../../src/store/backend.js';
import { readLockValue } from '../../src/store/formats.js';
import { lockKeys } from '../../src/store/index.js';
import type { Store, StoreSettings } from '../../src/store/port.js';
import { resolveStore } from '../../src/store/registry.js';
import { ANNOUNCED_HAND_ON, storeSettings } from '../../src/store/settings.js';
import { Quorum, type QuorumOptions } from '../../src/topology/quorum.js';
import {
  commandCalls,
  counterToken,
  lockRecord,
  type RedisServer,
  randomPrefix,
  startProxy,
  startRedis,
  type TcpProxy,
  waitFor,
} from '../harness/index.js';
import { leftBehind, NOTHING, watchTimers } from '../harness/leaks.js';

/**
 * Redlock against five real redis-server processes. Faults are real: kill -9, SIGSTOP, a TCP proxy
 * that adds latency or swallows traffic. `admin` connections are separate from the locks' own, so
 * inspecting a node never queues behind (or ahead of) the commands under test.
 */

const N = 5;
const NODES = Array.from({ length: N }, (_, i) => i);

let servers: RedisServer[] = [];
let admin: Redis[] = [];
let clients: Redis[] = [];
/** Run after each test, last in first out: locks, then the connections and proxies it made. */
const cleanups: Array<() => Promise<unknown>> = [];

function connect(port: number): Redis {
  // Reconnect fast after a kill, and queue commands meanwhile: the lock's own timeouts bound them.
  const client = new Redis(port, '127.0.0.1', { retryStrategy: () => 50, maxRetriesPerRequest: null });
  client.on('error', () => {});
  return client;
}

/** Connections of a test's own, disconnected after it. */
function clientsFor(ports: readonly number[]): Redis[] {
  const made = ports.map(connect);
  cleanups.push(async () => {
    for (const client of made) client.disconnect();
  });
  return made;
}

/** One TCP proxy in front of each node, closed after the test. */
async function proxied(): Promise<TcpProxy[]> {
  const made = await Promise.all(servers.map((s) => startProxy(s)));
  cleanups.push(() => Promise.all(made.map((p) => p.close())));
  return made;
}

function redlock(
  prefix: string,
  options: LeaseholdOptions = {},
  nodes: readonly (Redis | Store)[] = clients,
): Leasehold {
  const locks = new Leasehold(nodes, { prefix, ...options });
  cleanups.push(() => locks.close());
  return locks;
}

/** The settings a Redlock Leasehold of `prefix` builds each node's store with (src/topology/engines.ts), over `given`. */
function nodeSettings(prefix: string, given: Partial<StoreSettings> = {}): StoreSettings {
  return storeSettings({ prefix, handOn: ANNOUNCED_HAND_ON, ...given });
}

/** What resolveStore builds a node's store with, as a Redlock Leasehold of `prefix` does (background failures dropped). */
function nodeOptions(prefix: string, given: Partial<StoreSettings> = {}): BackendOptions {
  return { ...nodeSettings(prefix, given), onError: () => {} };
}

/** A store whose calls go to `store`, except the ones `overrides` replaces (a test's broken variant or a probe). */
/** `store` with some methods replaced; used as it is (never re-bound), so give it the store of the right settings. */
function intercept(store: Store, overrides: Partial<Pick<Store, 'acquire' | 'raiseFence'>>): Store {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'bind') return undefined;
      const override = (overrides as Record<PropertyKey, unknown>)[prop];
      if (override !== undefined) return override;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** A store that counts its raiseFence calls in `counter`: which acquisitions wrote their token back. */
function counted(store: Store, counter: { raiseFence: number }): Store {
  return intercept(store, {
    raiseFence: (name, fence) => {
      counter.raiseFence += 1;
      return store.raiseFence?.(name, fence) ?? Promise.reject(new Error('no raiseFence'));
    },
  });
}

function lockKey(prefix: string, name: string): string {
  return lockKeys(prefix, name).lock;
}

/** Listeners for the hand-offs of lock `name`, over every node (PUBSUB NUMSUB of its channel). */
async function listeners(prefix: string, name: string): Promise<number> {
  const { channel } = lockKeys(prefix, name);
  const replies = await Promise.all(admin.map((node) => node.pubsub('NUMSUB', channel)));
  return replies.reduce((sum, reply) => sum + Number(reply[1] ?? 0), 0);
}

/** Owner token on each listed node (null when free; a refused acquire's flag left out), read over the admin connections. */
function owners(prefix: string, name: string, nodes: readonly number[] = NODES): Promise<(string | null)[]> {
  return Promise.all(
    nodes.map(async (i) => {
      const { state } = lockRecord((await admin[i]?.get(lockKey(prefix, name))) ?? null);
      return state === null ? null : readLockValue(state).owner;
    }),
  );
}

function outcomes(error: unknown): NodeOutcome['outcome'][] {
  expect(error).toBeInstanceOf(QuorumError);
  return (error as QuorumError).nodes.map((n) => n.outcome);
}

function aborted(signal: AbortSignal, timeout: number): Promise<LockLostError> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`signal not aborted within ${timeout} ms`)), timeout);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve(signal.reason as LockLostError);
    });
  });
}

/** Thaw frozen nodes, restart killed ones, and wait until every connection works again. */
async function heal(): Promise<void> {
  await Promise.all(
    servers.map(async (server) => {
      if (!server.running) await server.restart();
      else server.resume();
    }),
  );
  await waitFor(
    async () => {
      const all = [...admin, ...clients];
      const replies = await Promise.all(all.map((c) => Promise.race([c.ping(), sleep(200, 'late')])));
      return replies.every((r) => r === 'PONG');
    },
    { timeout: 10_000, message: 'every node answers again' },
  );
}

beforeAll(async () => {
  servers = await Promise.all(NODES.map(() => startRedis()));
  admin = servers.map((s) => connect(s.port));
  clients = servers.map((s) => connect(s.port));
  // Connections are up before the first test, whose calls have only the per-node timeout.
  await Promise.all([...admin, ...clients].map((c) => c.ping()));
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await heal();
});

afterAll(async () => {
  for (const client of [...admin, ...clients]) client.disconnect();
  await Promise.all(servers.map((s) => s.stop()));
});

describe('Redlock: the same Lock handle as the single-instance mutex', () => {
  it('acquire, fencing token, expiresIn, extend, await using, withLock, tryWithLock', async () => {
    const prefix = randomPrefix();
    const timers = watchTimers();
    const locks = redlock(prefix);
    let first: number;
    {
      await using lock = await locks.acquire('report', { ttl: 2_000 });
      first = lock.fencingToken;
      expect(first).toBeGreaterThan(0);
      expect(lock.expiresIn()).toBeGreaterThan(0);
      expect(lock.expiresIn()).toBeLessThanOrEqual(2_000 - (2_000 * DEFAULTS.driftFactor + DEFAULTS.driftConstant));
      // Every node grants, even those that answered after the quorum had decided.
      await waitFor(async () => (await owners(prefix, 'report')).every((o) => o === lock.owner));
      await lock.extend(5_000);
      expect(lock.expiresIn()).toBeGreaterThan(2_000);
      expect(lockRecord(await admin[0]?.get(lockKey(prefix, 'report'))).pttl).toBeGreaterThan(2_000);
      expect(lock.signal.aborted).toBe(false);
    }
    expect(await owners(prefix, 'report')).toEqual([null, null, null, null, null]);
    const again = await locks.tryWithLock('report', (_signal, lock) => lock.fencingToken);
    expect(again).toEqual({ ran: true, value: expect.any(Number) });
    expect(again.ran && again.value).toBeGreaterThan(first);
    expect(await locks.withLock('report', { ttl: 1_000 }, (signal) => signal.aborted)).toBe(false);
    expect(await leftBehind(locks, { timers, listeners: () => listeners(prefix, 'report') })).toEqual(NOTHING);
  });

  it('rejects the same client twice: one master must not count as two votes', () => {
    expect(() => new Leasehold([clients[0] as Redis, clients[1] as Redis, clients[0] as Redis])).toThrow(
      /same client or store twice \(index 2\)/,
    );
    expect(() => new Leasehold(clients, { nodeTimeout: 0 })).toThrow(/`nodeTimeout` must be an integer/);
    expect(() => new Leasehold(clients, { quorum: 2 })).toThrow(/`quorum` must be an integer from 3/);
  });
});

describe('Redlock: quorum on every subset of occupied nodes', () => {
  it('acquires exactly when the free nodes form a quorum (all 2⁵ subsets), and leaves nothing behind', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 5_000, autoExtend: false });
    for (let mask = 0; mask < 2 ** N; mask++) {
      const name = `subset:${mask}`;
      const occupied = NODES.filter((i) => (mask >> i) & 1);
      await Promise.all(occupied.map((i) => admin[i]?.set(lockKey(prefix, name), 'other', 'PX', 20_000)));
      const expected = NODES.map((i) => (occupied.includes(i) ? 'other' : null));
      const lock = await locks.tryAcquire(name);
      expect(lock !== null, `occupied ${occupied.join(',') || 'none'}`).toBe(N - occupied.length >= 3);
      if (lock) {
        const ours = NODES.map((i) => (occupied.includes(i) ? 'other' : lock.owner));
        await waitFor(async () => JSON.stringify(await owners(prefix, name)) === JSON.stringify(ours));
        expect(await lock.release()).toBe(true);
      }
      // Failed or released, none of our keys is left, and the other owner still holds its own.
      expect(await owners(prefix, name), `occupied ${occupied.join(',') || 'none'}`).toEqual(expected);
    }
  });
});

describe('Redlock: nodes killed and frozen', () => {
  it('while holding: a minority down keeps the lock; the majority down loses it', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 1_200 });
    const extendFailures: unknown[] = [];
    locks.on('extendFailed', ({ error }) => extendFailures.push(error));
    let extended = 0;
    locks.on('extended', () => {
      extended += 1;
    });
    const lock = await locks.acquire('hold');

    await servers[0]?.kill9();
    servers[1]?.pause();
    const before = extended;
    await waitFor(() => extended >= before + 2, { timeout: 5_000, message: 'two extensions with 2 nodes down' });
    expect(lock.signal.aborted).toBe(false);
    expect(lock.expiresIn()).toBeGreaterThan(0);
    expect(await redlock(prefix).tryAcquire('hold')).toBeNull();

    await servers[2]?.kill9();
    const lost = await aborted(lock.signal, 5_000);
    expect(lost).toBeInstanceOf(LockLostError);
    expect(lost.reason).toBe('validity-elapsed');
    expect(extendFailures.length).toBeGreaterThan(0);
    expect(extendFailures.every((e) => e instanceof QuorumError)).toBe(true);
    expect(outcomes(extendFailures[0]).filter((o) => o === 'extended')).toHaveLength(2);
  });

  it('while holding: release with a minority down still counts', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 10_000 });
    const lock = await locks.acquire('release');
    await waitFor(async () => (await owners(prefix, 'release')).every((o) => o === lock.owner));
    servers[3]?.pause();
    await servers[4]?.kill9();
    expect(await lock.release()).toBe(true);
    expect(await owners(prefix, 'release', [0, 1, 2])).toEqual([null, null, null]);
    servers[3]?.resume();
    // The frozen node ran its queued commands in order on thawing: the release came after the grant.
    await waitFor(async () => (await owners(prefix, 'release', [3]))[0] === null, { timeout: 2_000 });
  });

  it('while acquiring: a minority killed or frozen mid-acquisition does not stop it', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 2_000 });
    servers[3]?.pause();
    const acquiring = locks.acquire('mid');
    const killing = servers[4]?.kill9();
    const lock = await acquiring;
    await killing;
    expect(lock.fencingToken).toBeGreaterThan(0);
    expect(await owners(prefix, 'mid', [0, 1, 2])).toEqual([lock.owner, lock.owner, lock.owner]);
    expect(await lock.release()).toBe(true);
  });

  it('while acquiring: a majority frozen fails with every node outcome, and cleans up after they thaw', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 10_000 });
    for (const i of [0, 1, 2]) servers[i]?.pause();
    const error = await locks.acquire('frozen', { wait: 5_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as QuorumError).code).toBe(ErrorCode.LOCK_QUORUM);
    expect(outcomes(error)).toEqual(['no-answer', 'no-answer', 'no-answer', 'acquired', 'acquired']);
    expect((error as QuorumError).nodes[0]?.cause).toBeInstanceOf(StoreUnavailableError);
    expect(await owners(prefix, 'frozen', [3, 4])).toEqual([null, null]);
    for (const i of [0, 1, 2]) servers[i]?.resume();
    // Their grants land after the attempt gave up, and are released as they land, well inside the ttl.
    await waitFor(async () => (await owners(prefix, 'frozen')).every((o) => o === null), { timeout: 3_000 });
  });
});

describe('Redlock: latency', () => {
  it('an acquisition that outlasts its validity fails and releases what it took; agreeing nodes save the write-back', async () => {
    const prefix = randomPrefix();
    const slow = await proxied();
    for (const p of slow) p.setLatency(150);
    // A large driftFactor leaves a validity (10 s × 4.5% − 2 ms ≈ 448 ms) longer than one round trip
    // through the proxies (≈ 300 ms) and shorter than two (≈ 600 ms), while the nodes' leases last
    // 10 s: anything gone was released.
    const connections = clientsFor(slow.map((p) => p.port));
    await Promise.all(connections.map((c) => c.ping()));
    const locks = redlock(prefix, { nodeTimeout: 5_000, driftFactor: 0.955 }, connections);
    // Counters that all differ: whichever nodes grant, one of them issues the maximum, which must be
    // written back, a second round trip.
    // A lock key holding a fencing record alone: no lease, a token and no grant (lua/lib/lease.lua).
    const fence = lockKeys(prefix, 'slow').lock;
    const base = (Date.now() + 3_600_000) * 1000;
    await Promise.all(admin.map((c, i) => c.set(fence, `\n${base + 10 * (N - i)}`)));
    const started = now();
    const error = await locks.acquire('slow', { ttl: 10_000, wait: 5_000 }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/no validity left/);
    expect(outcomes(error).every((o) => o === 'fenced' || o === 'acquired')).toBe(true);
    expect(outcomes(error)).toContain('fenced');
    expect(await owners(prefix, 'slow')).toEqual([null, null, null, null, null]);
    // The acquisition did run on every node (each counter moved), and far less than the ttl has passed.
    const fences = await Promise.all(admin.map((c) => c.get(fence)));
    expect(fences.map(counterToken)).toEqual(
      NODES.map((i) => expect.toSatisfy((f: number) => f > base + 10 * (N - i))),
    );
    expect(now() - started).toBeLessThan(10_000);

    // Counters that agree (a fresh lock): a quorum issues the same maximum, no write-back is needed,
    // and one round trip fits in the same validity.
    const lock = await locks.acquire('agreed', { ttl: 10_000 });
    expect(lock.fencingToken).toBeGreaterThan(Date.now() * 1000);
    expect(lock.expiresIn()).toBeGreaterThan(0);
    expect(await lock.release()).toBe(true);
  });

  it('nodes slower than the per-node timeout: fails, and grants that land late are released', async () => {
    const prefix = randomPrefix();
    const slow = await proxied();
    // Each way as long as the default per-node timeout: a round trip takes twice that.
    for (const p of slow) p.setLatency(DEFAULTS.nodeTimeout);
    const locks = redlock(prefix, {}, clientsFor(slow.map((p) => p.port)));
    const error = await locks.tryAcquire('late', { ttl: 10_000 }).catch((e: unknown) => e);
    expect(outcomes(error)).toEqual(['no-answer', 'no-answer', 'no-answer', 'no-answer', 'no-answer']);
    expect((error as QuorumError).nodes[0]?.cause).toMatchObject({
      message: new RegExp(`within ${DEFAULTS.nodeTimeout} ms \\(nodeTimeout\\)`),
    });
    await waitFor(async () => counterToken(await admin[0]?.get(lockKeys(prefix, 'late').lock)) >= 1, {
      timeout: 3_000,
    });
    await waitFor(async () => (await owners(prefix, 'late')).every((o) => o === null), { timeout: 3_000 });
  });
});

describe('Redlock: backendError names the operation', () => {
  it('a node whose acquire fails is reported with operation acquire while the quorum still wins', async () => {
    const prefix = randomPrefix();
    const stores = NODES.map(() => new MemoryStore().bind(nodeSettings(prefix)));
    const failing = intercept(stores[0] as Store, {
      acquire: () => Promise.reject(new Error('node 0 is broken')),
    });
    const locks = redlock(prefix, {}, [failing, ...stores.slice(1)]);
    const seen: { message: string; operation: string }[] = [];
    locks.on('backendError', ({ error, operation }) => seen.push({ message: (error as Error).message, operation }));
    const lock = await locks.acquire('reported', { ttl: 5_000 });
    expect(await lock.release()).toBe(true);
    expect(seen).toEqual([{ message: 'node 0 is broken', operation: 'acquire' }]);
  });
});

describe('Redlock: a late grant of an earlier attempt', () => {
  it('is never counted for a later attempt: the lock stays on a quorum after that grant is given back', async () => {
    const prefix = randomPrefix();
    const stores = NODES.map(() => new MemoryStore().bind(nodeSettings(prefix)));
    // Node 4 takes the first acquire at once but answers it only after 300 ms, far past nodeTimeout.
    let first = true;
    const nodes = stores.map((store, i) =>
      i !== 4
        ? store
        : intercept(store, {
            acquire: async (name, request) => {
              const reply = await store.acquire(name, request);
              if (first) {
                first = false;
                await sleep(300);
              }
              return reply;
            },
          }),
    );
    // Another owner holds nodes 0, 1 and 3: the first attempt gets only node 2 (and node 4, late).
    const other = [0, 1, 3].map((i) => new Leasehold(stores[i] as Store, { prefix }));
    cleanups.push(async () => {
      for (const l of other) await l.close();
    });
    const held = await Promise.all(other.map((l) => l.acquire('late-grant', { ttl: 10_000 })));
    const locks = redlock(prefix, { nodeTimeout: 50 }, nodes);
    const taking = locks.acquire('late-grant', { ttl: 10_000, wait: 3_000 });
    // Node 1 frees up while node 4's first answer is still on its way.
    await sleep(100);
    await held[1]?.release();
    const lock = await taking;
    // Let node 4's late answer land and the first attempt's clean-up run.
    await sleep(400);
    const holding = await Promise.all(stores.map(async (s) => (await s.inspect('late-grant')).owner === lock.owner));
    expect(lock.expiresIn()).toBeGreaterThan(0);
    expect(holding.filter(Boolean).length).toBeGreaterThanOrEqual(3);
    // And nobody else can take it meanwhile.
    await held[0]?.release();
    await held[2]?.release();
    const rival = redlock(prefix, {}, stores);
    expect(await rival.tryAcquire('late-grant', { ttl: 1_000 })).toBeNull();
    expect(await lock.release()).toBe(true);
  });
});

describe('Redlock: partitions', () => {
  it('a client that reaches only 2 of 5 nodes fails, and nothing it took outlives the ttl', async () => {
    const prefix = randomPrefix();
    const cut = (await proxied()).slice(2);
    for (const p of cut) p.blackhole(true);
    const nodes = [clients[0] as Redis, clients[1] as Redis, ...clientsFor(cut.map((p) => p.port))];
    const locks = redlock(prefix, { ttl: 1_000 }, nodes);

    const error = await locks.acquire('partitioned', { wait: 3_000 }).catch((e: unknown) => e);
    expect(outcomes(error)).toEqual(['acquired', 'acquired', 'no-answer', 'no-answer', 'no-answer']);
    expect(await owners(prefix, 'partitioned')).toEqual([null, null, null, null, null]);

    // A lost quorum is unavailability for withLock's policy.
    expect(await locks.withLock('partitioned', { whenUnavailable: 'skip' }, () => 'ran')).toBeUndefined();
    expect(await locks.tryWithLock('partitioned', { whenUnavailable: 'skip' }, () => 'ran')).toEqual({
      ran: false,
      reason: 'unavailable',
    });
    expect(await locks.withLock('partitioned', { whenUnavailable: 'run' }, (_signal, lock) => lock)).toBeNull();
    await expect(locks.withLock('partitioned', () => 'ran')).rejects.toBeInstanceOf(QuorumError);

    // The partition heals (the proxy resets the connections it held). The acquires made while the
    // far clients never became ready were held, never sent, and fail on the reset; whatever an
    // acquire did take is released as it lands, and in no case outlives the 1 s ttl.
    for (const p of cut) p.blackhole(false);
    await Promise.all(nodes.map((c) => (c as Redis).ping()));
    await sleep(1_000);
    expect(await owners(prefix, 'partitioned')).toEqual([null, null, null, null, null]);
  });
});

describe('Redlock: contention', () => {
  it('three contenders at once: exactly one holds at a time, the others get it in turn', async () => {
    const prefix = randomPrefix();
    // Each contender has connections of its own, as separate processes would.
    const contenders = [0, 1, 2].map(() => redlock(prefix, { ttl: 2_000 }, clientsFor(servers.map((s) => s.port))));
    for (let round = 0; round < 3; round++) {
      let inside = 0;
      let overlaps = 0;
      const tokens: number[] = [];
      await Promise.all(
        contenders.map((locks) =>
          locks.withLock(`turns:${round}`, { wait: 10_000 }, async (signal, lock) => {
            inside += 1;
            if (inside > 1) overlaps += 1;
            tokens.push(lock.fencingToken);
            await sleep(30);
            expect(signal.aborted).toBe(false);
            inside -= 1;
          }),
        ),
      );
      expect(overlaps).toBe(0);
      expect(tokens).toHaveLength(3);
      expect([...tokens].sort((a, b) => a - b)).toEqual(tokens);
      expect(new Set(tokens).size).toBe(3);
    }
  });

  it('a release wakes a waiter the nodes refused, long before its next retry, past an extend', async () => {
    const prefix = randomPrefix();
    const ttl = 20_000;
    const holder = redlock(prefix, { ttl, autoExtend: false });
    // The waiter has connections of its own, as another process would.
    const waiter = redlock(prefix, {}, clientsFor(servers.map((s) => s.port)));
    const held = await holder.acquire('wake');
    const waiting = waiter.acquire('wake', { wait: ttl });
    // Marked handled: a failed check below must not leave it unhandled when the instance closes.
    waiting.catch(() => undefined);
    // Refused, it listens for releases on enough nodes that every quorum has one of them.
    await waitFor(async () => (await listeners(prefix, 'wake')) >= N - 3 + 1, { timeout: ttl / 4 });
    // The flag outlives an extend, as the watchdog's would.
    await held.extend();
    // Released just after one of the waiter's retries: unwoken, it would sleep DEFAULTS.maxPark
    // before the next (the refusals' pttl, the holder's whole lease, is longer).
    const node = admin[0] as Redis;
    const before = await commandCalls(node, 'fcall');
    await waitFor(async () => (await commandCalls(node, 'fcall')) > before, {
      timeout: DEFAULTS.maxPark * 2,
      interval: 10,
    });
    const released = performance.now();
    await held.release();
    const lock = await waiting;
    expect(performance.now() - released).toBeLessThan(DEFAULTS.maxPark / 4);
    expect(lock.fencingToken).toBeGreaterThan(held.fencingToken);
    await lock.release();
  });

  it('a release nobody was refused by publishes nothing; one a refusal flagged publishes on its node', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 5_000, autoExtend: false });
    const published = () => Promise.all(admin.map((node) => commandCalls(node, 'publish')));
    await Promise.all(admin.map((node) => node.config('RESETSTAT')));
    for (let i = 0; i < 5; i++) await (await locks.acquire('quiet')).release();
    expect(await published()).toEqual([0, 0, 0, 0, 0]);
    const held = await locks.acquire('refused');
    expect(await locks.tryAcquire('refused')).toBeNull();
    await held.release();
    expect(await published()).toEqual([1, 1, 1, 1, 1]);
  });

  it('a split vote resolves: three contenders that each took a minority back off, and take turns', async () => {
    const prefix = randomPrefix();
    // Each contender reaches its own nodes at once and the rest through a 20 ms link, so all three
    // start with a split vote: #0 takes nodes 0 and 1, #1 takes 2 and 3, #2 takes 4.
    const near = [[0, 1], [2, 3], [4]];
    const far = await proxied();
    for (const p of far) p.setLatency(20);
    const firstReplies = near.map(() => new Map<number, boolean>());
    const contenders = near.map((mine, c) => {
      const ports = NODES.map((n) => (mine.includes(n) ? servers[n]?.port : far[n]?.port) ?? 0);
      const connections = clientsFor(ports);
      const stores = connections.map((client, n) => {
        const store = resolveStore(client, nodeOptions(prefix)).store;
        return intercept(store, {
          acquire: async (name, request) => {
            const reply = await store.acquire(name, request);
            if (!firstReplies[c]?.has(n)) firstReplies[c]?.set(n, reply.acquired);
            return reply;
          },
        });
      });
      return { locks: redlock(prefix, { ttl: 2_000, nodeTimeout: 1_000 }, stores), connections };
    });
    await Promise.all(contenders.flatMap((c) => c.connections.map((client) => client.ping())));
    let inside = 0;
    let overlaps = 0;
    await Promise.all(
      contenders.map(({ locks }) =>
        locks.withLock('split', { wait: 15_000 }, async () => {
          inside += 1;
          if (inside > 1) overlaps += 1;
          await sleep(20);
          inside -= 1;
        }),
      ),
    );
    const split = near.map((mine) => NODES.map((n) => mine.includes(n)));
    expect(firstReplies.map((replies) => NODES.map((n) => replies.get(n)))).toEqual(split);
    expect(overlaps).toBe(0);
  });
});

describe('Redlock: fencing across changing quorums', () => {
  /**
   * Many acquisitions, each from a fresh instance (it remembers no earlier token, so only the nodes
   * carry the order) while a changing minority of nodes refuses connections. Returns the tokens.
   */
  async function fencingRun(
    variant: (store: Store) => Store,
  ): Promise<{ tokens: number[]; quorums: number; writeBacks: number[] }> {
    const prefix = randomPrefix();
    const gates = await proxied();
    // One node's counter far ahead of every clock: the quorums that include it issue its token,
    // and only the write-back carries that order to the quorums that do not.
    await admin[0]?.set(lockKeys(prefix, 'fenced').lock, `\n${(Date.now() + 3_600_000) * 1000}`);
    const random = seeded(7);
    const tokens: number[] = [];
    const quorums = new Set<string>();
    const writeBacks: number[] = [];
    const noop = () => {};
    for (let i = 0; i < 30; i++) {
      const down = NODES.filter(() => random() < 0.45).slice(0, 2);
      for (const [n, gate] of gates.entries()) gate.refuse(down.includes(n));
      const nodes = await Promise.all(
        gates.map(async (gate, n) => {
          // No offline queue and no reconnect: a down node's calls fail now and are never replayed.
          const client = new Redis(gate.port, '127.0.0.1', {
            lazyConnect: true,
            enableOfflineQueue: false,
            retryStrategy: () => null,
          });
          client.on('error', noop);
          if (down.includes(n)) await client.connect().catch(noop);
          else await client.connect();
          return client;
        }),
      );
      const counter = { raiseFence: 0 };
      const locks = new Leasehold(
        nodes.map((c) => counted(variant(resolveStore(c, nodeOptions(prefix)).store), counter)),
        { prefix },
      );
      const lock = await locks.acquire('fenced', { ttl: 2_000, autoExtend: false });
      tokens.push(lock.fencingToken);
      writeBacks.push(counter.raiseFence);
      quorums.add(NODES.filter((n) => !down.includes(n)).join(','));
      await lock.release();
      await locks.close();
      for (const client of nodes) client.disconnect();
    }
    return { tokens, quorums: quorums.size, writeBacks };
  }

  const increasing = (tokens: readonly number[]) => tokens.every((t, i) => i === 0 || t > (tokens[i - 1] ?? 0));

  it('tokens strictly increase over many acquisitions while a changing minority of nodes is down', async () => {
    const { tokens, quorums, writeBacks } = await fencingRun((store) => store);
    expect(quorums).toBeGreaterThan(3);
    expect(increasing(tokens), tokens.join(' ')).toBe(true);
    // Both paths ran: acquisitions whose granting quorum agreed on the maximum (no write-back), and
    // acquisitions where fewer than a quorum issued it (written back to every granting node).
    expect(writeBacks.filter((n) => n === 0).length, writeBacks.join(' ')).toBeGreaterThan(0);
    expect(writeBacks.filter((n) => n >= 3).length, writeBacks.join(' ')).toBeGreaterThan(0);
    expect(
      writeBacks.every((n) => n === 0 || n >= 3),
      writeBacks.join(' '),
    ).toBe(true);
  });

  it('writes the maximum back only when fewer than a quorum of the granting nodes issued it', async () => {
    const prefix = randomPrefix();
    const counter = { raiseFence: 0 };
    const stores = clients.map((c) => counted(resolveStore(c, nodeOptions(prefix)).store, counter));
    const locks = redlock(prefix, { ttl: 2_000, autoExtend: false }, stores);
    const fence = lockKeys(prefix, 'paths').lock;

    // Fresh counters agree: every node issues the token the client proposed (its clock, a little
    // ahead), so any granting quorum holds the maximum.
    const first = await locks.acquire('paths');
    expect(first.fencingToken).toBeGreaterThan(Date.now() * 1000);
    expect(counter.raiseFence).toBe(0);
    await first.release();

    // Counters that all differ, above any proposal: only one granting node issues the maximum,
    // which goes to all of them.
    const base = (Date.now() + 3_600_000) * 1000;
    await Promise.all(admin.map((c, i) => c.set(fence, `\n${base + 10 * (N - i)}`)));
    const second = await locks.acquire('paths');
    expect(counter.raiseFence).toBeGreaterThanOrEqual(3);
    // Any 3 of the 5 include one of the nodes seeded with base + 30 or more. A grant that landed
    // after the decision is not written to, and its node's counter may end above the token.
    expect(second.fencingToken).toBeGreaterThan(base + 30);
    const counters = (await Promise.all(admin.map((c) => c.get(fence)))).map(counterToken);
    expect(counters.filter((f) => f >= second.fencingToken).length).toBeGreaterThanOrEqual(3);
    await second.release();
  });

  it('negative control: without the write-back of the maximum, the same run sees a token repeat or go back', async () => {
    const { tokens } = await fencingRun((store) =>
      intercept(store, {
        acquire: (name, request) => store.acquire(name, { ...request, minFence: 0 }),
        raiseFence: async (_keys, fence) => fence,
      }),
    );
    expect(increasing(tokens), tokens.join(' ')).toBe(false);
  });
});

describe('Redlock: extend and release outcomes', () => {
  it('extend is lost when a majority of nodes no longer hold the lock; release then reports it was gone', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 5_000, autoExtend: false });
    const lock = await locks.acquire('expired');
    await waitFor(async () => (await owners(prefix, 'expired')).every((o) => o === lock.owner));
    await Promise.all([0, 1, 2].map((i) => admin[i]?.del(lockKey(prefix, 'expired'))));
    await expect(lock.extend()).rejects.toMatchObject({ reason: 'expired' });
    expect(lock.signal.aborted).toBe(true);
    expect(await lock.release()).toBe(false);

    const taken = await locks.acquire('taken');
    await waitFor(async () => (await owners(prefix, 'taken')).every((o) => o === taken.owner));
    await Promise.all([2, 3, 4].map((i) => admin[i]?.set(lockKey(prefix, 'taken'), 'other', 'PX', 5_000)));
    await expect(taken.extend()).rejects.toMatchObject({ reason: 'not-owner' });
    // The nodes that did extend were given back (well before their 5 s lease would end): only the
    // other owner's keys remain.
    await waitFor(async () => (await owners(prefix, 'taken', [0, 1])).every((o) => o === null), { timeout: 2_000 });
  });

  it('release that cannot be confirmed on a quorum throws a QuorumError', async () => {
    const prefix = randomPrefix();
    const locks = redlock(prefix, { ttl: 5_000, autoExtend: false });
    const lock = await locks.acquire('unconfirmed');
    await waitFor(async () => (await owners(prefix, 'unconfirmed')).every((o) => o === lock.owner));
    for (const i of [0, 1, 2]) servers[i]?.pause();
    const error = await lock.release().catch((e: unknown) => e);
    expect(outcomes(error)).toEqual(['no-answer', 'no-answer', 'no-answer', 'released', 'released']);
  });
});

/**
 * The negative control. The exclusion check: a holder that got the lock through a slow quorum, and
 * a fast contender that takes it the moment the nodes let it. The fast one must never get it while
 * the slow one still believes, by its own clock, that it holds it. The real engine passes; a variant
 * that counts the lease from the quorum's answer instead of from before the request was sent (as the
 * incumbent implementation does) must be caught granting it twice. The variant wraps a real engine
 * and rewrites the validity of each grant it returns.
 */
function trusting(engine: Quorum): LockEngine {
  return {
    attempt: async (name, owner, ttl, tries) => {
      const attempt = await engine.attempt(name, owner, ttl, tries);
      if (!attempt.acquired) return attempt;
      return { ...attempt, validUntil: now() + ttl - (ttl * DEFAULTS.driftFactor + DEFAULTS.driftConstant) };
    },
    extend: (name, owner, ttl) => engine.extend(name, owner, ttl),
    release: (name, owner) => engine.release(name, owner),
    watch: (name, onHandOff) => engine.watch(name, onHandOff),
    close: () => engine.close(),
  };
}

describe('Redlock: negative control', () => {
  const engineOptions: QuorumOptions = {
    commandTimeout: DEFAULTS.commandTimeout,
    driftFactor: DEFAULTS.driftFactor,
    driftConstant: DEFAULTS.driftConstant,
    quorum: 3,
    nodeTimeout: 2_000,
  };
  /** Each node's store: this engine's instance label, and Redlock's hand-on. */
  const nodeOf = (prefix: string) => (c: Redis) => resolveStore(c, nodeOptions(prefix, { instance: 'test' }));

  async function exclusion(
    variant: (engine: Quorum) => LockEngine,
  ): Promise<{ granted: number; doubleGrants: number }> {
    const prefix = randomPrefix();
    const slowProxies = await proxied();
    for (const p of slowProxies) p.setLatency(60);
    const slow = variant(
      new Quorum(mutex, clientsFor(slowProxies.map((p) => p.port)).map(nodeOf(prefix)), engineOptions),
    );
    const fast = new Quorum(mutex, clients.map(nodeOf(prefix)), engineOptions);
    const ttl = 600;
    let granted = 0;
    let doubleGrants = 0;
    for (let round = 0; round < 3; round++) {
      const name = `exclusive:${round}`;
      const first = await slow.attempt(name, token(), ttl, 0).catch(() => null);
      if (!first?.acquired) continue;
      granted += 1;
      const second = token();
      const deadline = now() + 3_000;
      for (;;) {
        const attempt = await fast.attempt(name, second, ttl, 0);
        if (attempt.acquired) {
          if (now() < first.validUntil) doubleGrants += 1;
          break;
        }
        if (now() > deadline) throw new Error('the fast contender never got the lock');
        await sleep(2);
      }
      await fast.release(name, second);
    }
    await slow.close();
    await fast.close();
    return { granted, doubleGrants };
  }

  it('the real engine, fed a slow quorum, never grants twice', async () => {
    const { granted, doubleGrants } = await exclusion((engine) => engine);
    expect(granted).toBeGreaterThan(0);
    expect(doubleGrants).toBe(0);
  });

  it('a variant that counts the lease from the answer, fed the same slow quorum, is caught granting twice', async () => {
    const { granted, doubleGrants } = await exclusion(trusting);
    expect(granted).toBeGreaterThan(0);
    expect(doubleGrants).toBeGreaterThan(0);
  });
});

function token(): string {
  return randomBytes(16).toString('base64url');
}

/** A small deterministic PRNG, so the fencing run's down-sets are the same on every run. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
