import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { Leasehold, type Lock, LockLostError, MemoryStore } from '../../../src/index.js';

/**
 * withLock hands an arrow function that declares no parameter a signal of no lock (it cannot read
 * it); every other work must get the lock's own, which aborts when the lease is lost. These are
 * the ways a work reads its signal without naming it: each must still learn of the loss.
 */

const TTL = 200;
const opened: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((l) => l.close()));
});

function leasehold(): Leasehold {
  const locks = new Leasehold(new MemoryStore());
  opened.push(locks);
  return locks;
}

/** Waits on `signal` far past the lease (the README's pattern): rejects once the lease is lost. */
const pause = (signal: AbortSignal) => sleep(20 * TTL, undefined, { signal });

describe('the signal withLock hands the work', () => {
  const works: Array<[string, (signal: AbortSignal, lock: Lock) => Promise<unknown>]> = [
    ['rest parameters', (...args) => pause(args[0])],
    [
      'a function reading `arguments`',
      function () {
        // biome-ignore lint/complexity/noArguments: the case under test
        return pause(arguments[0] as AbortSignal);
      },
    ],
    [
      'a wrapper that passes its arguments on',
      (
        (inner) =>
        (...args: [AbortSignal]) =>
          inner(...args)
      )(pause),
    ],
    ['a bound function', pause.bind(null)],
  ];

  for (const [what, work] of works) {
    it(`${what}: the lock's own signal, aborted when the lease is lost`, async () => {
      const locks = leasehold();
      const error = await locks.withLock(`w-${what}`, { ttl: TTL, autoExtend: false }, work).catch((e) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).reason).toBe('validity-elapsed');
    });
  }

  it('a named parameter is the lock’s signal; an arrow function with none still holds the lock', async () => {
    await leasehold().withLock('named', { ttl: 5_000 }, async (signal, lock) => {
      expect(signal).toBe(lock.signal);
    });
    const store = new MemoryStore();
    const [a, b] = [new Leasehold(store), new Leasehold(store)];
    opened.push(a, b);
    await a.withLock('bare', { ttl: 5_000 }, async () => {
      expect(await b.tryAcquire('bare')).toBeNull();
    });
  });
});
