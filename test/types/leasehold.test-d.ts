import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster, createSentinel } from 'redis';
import { describe, expectTypeOf, test } from 'vitest';
import {
  type Backend,
  type BackendOperation,
  ErrorCode,
  Leasehold,
  type Lock,
  MemoryStore,
  type RedisUnavailableError,
  type Store,
  StoreUnavailableError,
  type TryResult,
  type WithLockOptions,
} from '../../src/index.js';

/**
 * Compile-time checks of the public types, run by `vitest` (typecheck) and by `tsc --noEmit`.
 * Nothing here runs: each `@ts-expect-error` line must fail to compile, or the check fails.
 */

declare const locks: Leasehold;

describe('new Leasehold(backend)', () => {
  test('accepts the clients of both libraries, a Store, and arrays of them (Redlock)', () => {
    const redis = new Redis({ lazyConnect: true });
    const cluster = new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true });
    const nodeRedis = createClient({ url: 'redis://127.0.0.1:6379' });
    const nodeCluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] });
    const nodeSentinel = createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 26379 }] });
    const memory = new MemoryStore();

    expectTypeOf(redis).toExtend<Backend>();
    expectTypeOf(cluster).toExtend<Backend>();
    expectTypeOf(nodeRedis).toExtend<Backend>();
    expectTypeOf(nodeCluster).toExtend<Backend>();
    expectTypeOf(nodeSentinel).toExtend<Backend>();
    expectTypeOf(memory).toExtend<Backend>();
    expectTypeOf<Store>().toExtend<Backend>();

    new Leasehold(redis);
    new Leasehold(cluster, { prefix: 'p' });
    new Leasehold(nodeRedis);
    new Leasehold(nodeCluster);
    new Leasehold(nodeSentinel);
    new Leasehold(memory, { ttl: 5_000 });
    new Leasehold([redis, new Redis(), new Redis()]);
    new Leasehold([nodeRedis, redis, memory] as const, { quorum: 2 });
    const masters: readonly Redis[] = [redis];
    new Leasehold(masters);
  });

  test('rejects what is not a client or a Store, at compile time', () => {
    expectTypeOf<{ host: string; port: number }>().not.toExtend<Backend>();
    expectTypeOf<string>().not.toExtend<Backend>();
    expectTypeOf<number>().not.toExtend<Backend>();
    expectTypeOf<object>().not.toExtend<Backend>();

    // @ts-expect-error connection options, not a client
    new Leasehold({ host: '127.0.0.1', port: 6379 });
    // @ts-expect-error a URL, not a client
    new Leasehold('redis://127.0.0.1:6379');
    // @ts-expect-error a port, not a client
    new Leasehold(6379);
    // @ts-expect-error nothing at all
    new Leasehold();
    // @ts-expect-error an array with something that is not a client
    new Leasehold([new Redis(), { host: '127.0.0.1' }]);
    // @ts-expect-error options are checked too
    new Leasehold(new MemoryStore(), { ttl: '30s' });
  });
});

describe('withLock', () => {
  test('without options: the work gets the Lock, the result is the work’s', () => {
    const result = locks.withLock('job', async (signal, lock) => {
      expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 42;
    });
    expectTypeOf(result).toEqualTypeOf<Promise<number>>();
    expectTypeOf(locks.withLock('job', () => 'sync')).toEqualTypeOf<Promise<string>>();
  });

  test('with options: fail (the default) and run never resolve undefined; skip may', () => {
    const plain = locks.withLock('job', { ttl: 1_000, wait: 0 }, async (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 'done';
    });
    expectTypeOf(plain).toEqualTypeOf<Promise<string>>();

    const failing = locks.withLock('job', { whenUnavailable: 'fail' }, (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 1;
    });
    expectTypeOf(failing).toEqualTypeOf<Promise<number>>();

    const running = locks.withLock('job', { whenUnavailable: 'run' }, (_signal, lock) => {
      // Run unlocked when the backend is down: there is no lock then.
      expectTypeOf(lock).toEqualTypeOf<Lock | null>();
      return true;
    });
    expectTypeOf(running).toEqualTypeOf<Promise<boolean>>();

    const skipping = locks.withLock('job', { whenUnavailable: 'skip' }, (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 1;
    });
    expectTypeOf(skipping).toEqualTypeOf<Promise<number | undefined>>();

    const options: WithLockOptions = { ttl: 1_000 };
    const unknownPolicy = locks.withLock('job', options, (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock | null>();
      return 1;
    });
    expectTypeOf(unknownPolicy).toEqualTypeOf<Promise<number | undefined>>();
  });

  test('wrong arguments fail to compile', () => {
    // @ts-expect-error the name must be a string
    locks.withLock(1, async () => 1);
    // @ts-expect-error the work is required
    locks.withLock('job');
    // @ts-expect-error the work is required after options too
    locks.withLock('job', { ttl: 1_000 });
    // @ts-expect-error ttl is a number of ms
    locks.withLock('job', { ttl: '1s' }, async () => 1);
    // @ts-expect-error an unknown policy
    locks.withLock('job', { whenUnavailable: 'retry' }, async () => 1);
    // @ts-expect-error an unknown option
    locks.withLock('job', { timeout: 1_000 }, async () => 1);
    // @ts-expect-error with whenUnavailable 'run' the work must accept a null lock
    locks.withLock('job', { whenUnavailable: 'run' }, async (_signal: AbortSignal, lock: Lock) => lock.name);
  });
});

describe('tryWithLock', () => {
  test('resolves a TryResult of the work’s value, with and without options', () => {
    const bare = locks.tryWithLock('job', async (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 'x';
    });
    expectTypeOf(bare).toEqualTypeOf<Promise<TryResult<string>>>();

    const skipping = locks.tryWithLock('job', { ttl: 1_000, whenUnavailable: 'skip' }, (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock>();
      return 1;
    });
    expectTypeOf(skipping).toEqualTypeOf<Promise<TryResult<number>>>();

    const running = locks.tryWithLock('job', { whenUnavailable: 'run' }, (_signal, lock) => {
      expectTypeOf(lock).toEqualTypeOf<Lock | null>();
      return 1;
    });
    expectTypeOf(running).toEqualTypeOf<Promise<TryResult<number>>>();
  });

  test('a TryResult narrows on `ran`', async () => {
    const result = await locks.tryWithLock('job', async () => 7);
    if (result.ran) expectTypeOf(result.value).toEqualTypeOf<number>();
    else expectTypeOf(result.reason).toEqualTypeOf<'locked' | 'unavailable'>();
  });

  test('wrong arguments fail to compile', () => {
    // @ts-expect-error tryWithLock never waits: no `wait` option
    locks.tryWithLock('job', { wait: 1_000 }, async () => 1);
    // @ts-expect-error the work is required
    locks.tryWithLock('job', { ttl: 1_000 });
    // @ts-expect-error with whenUnavailable 'run' the work must accept a null lock
    locks.tryWithLock('job', { whenUnavailable: 'run' }, async (_signal: AbortSignal, lock: Lock) => lock.name);
  });
});

describe('events', () => {
  test('backendError names the operation that failed', () => {
    locks.on('backendError', ({ error, operation }) => {
      expectTypeOf(error).toEqualTypeOf<unknown>();
      expectTypeOf(operation).toEqualTypeOf<BackendOperation>();
    });
    expectTypeOf<'acquire' | 'extend' | 'release' | 'wait' | 'leave-queue'>().toExtend<BackendOperation>();
    // @ts-expect-error not an operation leasehold reports
    const wrong: BackendOperation = 'connect';
    void wrong;
  });
});

describe('ErrorCode', () => {
  test('its keys are the codes of the README’s table', () => {
    expectTypeOf(ErrorCode.LOCK_TIMEOUT).toEqualTypeOf<'LOCK_TIMEOUT'>();
    expectTypeOf(ErrorCode.LOCK_LOST).toEqualTypeOf<'LOCK_LOST'>();
    expectTypeOf(ErrorCode.STORE_UNAVAILABLE).toEqualTypeOf<'STORE_UNAVAILABLE'>();
    expectTypeOf(ErrorCode.LOCK_QUORUM).toEqualTypeOf<'LOCK_QUORUM'>();
    expectTypeOf(ErrorCode.STORE_ERROR).toEqualTypeOf<'STORE_ERROR'>();
    expectTypeOf(new StoreUnavailableError('x')).toEqualTypeOf<RedisUnavailableError>();
  });
});
