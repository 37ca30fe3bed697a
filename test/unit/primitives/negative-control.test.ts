import { afterEach, describe, expect, it } from 'vitest';
import type { Lock } from '../../../src/core/lock.js';
import { Leasehold, LockTimeoutError, MemoryStore } from '../../../src/index.js';
import { Reentrancy } from '../../../src/primitives/reentrant.js';

/**
 * The checks of the reentrant and acquireAll cases can fail: a broken variant of each, fed the same
 * situation, is caught.
 */
const instances: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

function leasehold(store: MemoryStore): Leasehold {
  const locks = new Leasehold(store);
  instances.push(locks);
  return locks;
}

/** Reentrancy by instance rather than by async context: any code of the instance re-enters. */
class InstanceWide extends Reentrancy {
  #last: Lock | undefined;
  override held(name: string): Lock | undefined {
    return this.#last?.name === name && this.#last.held ? this.#last : undefined;
  }
  override run<T>(lock: Lock, work: () => T): T {
    this.#last = lock;
    return work();
  }
}

describe('reentrant: the hold is carried by the async context alone', () => {
  async function outsider(reentrancy: Reentrancy): Promise<Lock | undefined> {
    const locks = leasehold(new MemoryStore());
    const lock = await locks.acquire('r');
    let release!: () => void;
    const inside = reentrancy.run(lock, () => new Promise<void>((resolve) => (release = resolve)));
    // Code outside the work's async context asks while the work still runs.
    const seen = reentrancy.held('r');
    release();
    await inside;
    await lock.release();
    return seen;
  }

  it('the real one: code outside the work does not see the hold', async () => {
    expect(await outsider(new Reentrancy())).toBeUndefined();
  });

  it('negative control: a per-instance variant lets an outsider re-enter', async () => {
    expect(await outsider(new InstanceWide())).toBeDefined();
  });
});

describe('acquireAll: one global order is what prevents the deadlock', () => {
  /** Two callers over the same two names in opposite orders, each holding its first while it asks for its second. */
  async function crossed(take: (locks: Leasehold, names: string[]) => Promise<unknown>): Promise<unknown[]> {
    const store = new MemoryStore();
    const [a, b] = [leasehold(store), leasehold(store)];
    return Promise.all([take(a, ['p', 'q']).catch((e: unknown) => e), take(b, ['q', 'p']).catch((e: unknown) => e)]);
  }

  /** A broken acquireAll: the names in the caller's order. */
  async function inGivenOrder(locks: Leasehold, names: string[]): Promise<Lock[]> {
    const held: Lock[] = [];
    try {
      for (const name of names) {
        held.push(await locks.acquire(name, { wait: 300 }));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return held;
    } finally {
      await Promise.all(held.map((l) => l.release()));
    }
  }

  it('the real one: both callers get both names', async () => {
    const results = await crossed(async (locks, names) => {
      const all = await locks.acquireAll(names, { wait: 2_000 });
      await new Promise((resolve) => setTimeout(resolve, 20));
      return all.release();
    });
    expect(results).toEqual([true, true]);
  });

  it('negative control: taking the names in the order given deadlocks until a wait runs out', async () => {
    const results = await crossed(inGivenOrder);
    expect(results.some((r) => r instanceof LockTimeoutError)).toBe(true);
  });
});
