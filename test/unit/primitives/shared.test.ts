import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode, Leasehold, LockError, MemoryStore } from '../../../src/index.js';
import { STORE, type Store } from '../../../src/store/index.js';

/**
 * The semaphore and the read-write lock at the facade: their options checked at the edge, refused
 * at the call where they cannot be sound (Redlock) or cannot run (a store without shared holds),
 * and the job lock of a name held by shared holds refused like a mutex.
 */
const instances: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

function leasehold(backend: ConstructorParameters<typeof Leasehold>[0]): Leasehold {
  const locks = new Leasehold(backend);
  instances.push(locks);
  return locks;
}

async function refusal(call: Promise<unknown>): Promise<LockError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(LockError);
  expect((error as LockError).code).toBe(ErrorCode.INVALID_ARGUMENT);
  return error as LockError;
}

describe('limit and mode, checked at the edge', () => {
  it.each([
    [{ limit: 0 }, /`limit` must be an integer from 1 to 1000000, got 0/],
    [{ limit: 2.5 }, /`limit` must be an integer/],
    [{ limit: '3' }, /`limit` must be an integer .*got "3"/],
    [{ mode: 'read' }, /`mode` must be one of 'exclusive', 'shared', got "read"/],
    [{ limit: 2, mode: 'shared' }, /`limit` \(a semaphore\) and `mode` \(a read-write lock\) cannot be combined/],
    [{ limit: 2, mode: 'exclusive' }, /cannot be combined/],
    [{ limit: 2, reentrant: true }, /`reentrant` holds are exclusive: it cannot be combined with `limit`/],
    [{ mode: 'shared', reentrant: true }, /cannot be combined with `mode: 'shared'`/],
  ])('%j is refused', async (options, message) => {
    const locks = leasehold(new MemoryStore());
    expect((await refusal(locks.acquire('x', options as never))).message).toMatch(message);
  });

  it('mode: exclusive alone is the mutex, reentrant included', async () => {
    const locks = leasehold(new MemoryStore());
    await locks.withLock('x', { mode: 'exclusive', reentrant: true }, async () => {
      const inner = await locks.acquire('x', { reentrant: true, wait: 0 });
      expect(inner.holdCount).toBe(2);
      await inner.release();
    });
  });
});

describe('refused at the call where they cannot run', () => {
  it('on Redlock, saying why', async () => {
    const locks = leasehold([new MemoryStore(), new MemoryStore(), new MemoryStore()]);
    const semaphore = await refusal(locks.acquire('x', { limit: 2 }));
    expect(semaphore.message).toMatch(/`limit: 2` \(a semaphore\) is not available on Redlock: a majority vote/);
    const shared = await refusal(locks.tryWithLock('x', { mode: 'shared' }, () => 1));
    expect(shared.message).toMatch(/`mode: 'shared'` \(a read-write lock\) is not available on Redlock: its waiters/);
    // The mutex of the same instance is unaffected.
    await (await locks.acquire('x', { mode: 'exclusive' })).release();
  });

  it('on a store without shared holds, naming the store', async () => {
    const memory = new MemoryStore();
    const bare = {
      [STORE]: true,
      kind: 'bare',
      acquire: memory.acquire.bind(memory),
      release: memory.release.bind(memory),
      extend: memory.extend.bind(memory),
      leave: memory.leave.bind(memory),
      inspect: memory.inspect.bind(memory),
      watch: memory.watch.bind(memory),
      close: memory.close.bind(memory),
    } as Store;
    const locks = leasehold(bare);
    const error = await refusal(locks.acquire('x', { limit: 3 }));
    expect(error.message).toMatch(/^this bare store cannot run a semaphore: it has no shared holds/);
    await refusal(locks.withLock('x', { mode: 'shared' }, () => 1));
    await (await locks.acquire('x')).release();
  });
});

describe('one lock per name', () => {
  it('a job of a name held by shared holds does not run; the holds’ tokens and the job’s share one counter', async () => {
    const store = new MemoryStore();
    const locks = leasehold(store);
    const reader = await locks.acquire('nightly', { mode: 'shared' });
    expect(await locks.runOnce('nightly', () => 'ran')).toEqual({ ran: false, reason: 'locked' });
    await reader.release();
    const run = await locks.runOnce('nightly', () => 'ran');
    expect(run).toMatchObject({ ran: true });
    const next = await locks.acquire('nightly', { limit: 4 });
    expect(next.fencingToken).toBeGreaterThan(reader.fencingToken);
    await next.release();
  });

  it('a lock shows shared holds as no single owner; inspectShared lists them', async () => {
    const store = new MemoryStore();
    const locks = leasehold(store);
    const held = [await locks.acquire('p', { limit: 2 }), await locks.acquire('p', { limit: 2 })];
    expect(await store.inspect('p')).toMatchObject({ owner: null });
    const state = await store.inspectShared('p');
    expect(state).toMatchObject({ mode: 'semaphore', limit: 2, reserved: [] });
    expect(state.holds.map((h) => h.owner).sort()).toEqual(held.map((l) => l.owner).sort());
    for (const lock of held) await lock.release();
    expect(await store.inspectShared('p')).toMatchObject({ mode: 'free', holds: [] });
  });
});
