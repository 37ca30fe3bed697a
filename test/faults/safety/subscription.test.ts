import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { now } from '../../../src/core/clock.js';
import { Leasehold, MemoryStore } from '../../../src/index.js';
import type { HandOff, Store } from '../../../src/store/port.js';
import { storeSettings } from '../../../src/store/settings.js';
import { waitFor } from '../../harness/index.js';

/** The memory store with a watch that takes `ms` to go live, as a slow network's subscription would. */
function slowToSubscribe(store: MemoryStore, ms: number): Store {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'watch') {
        return async (name: string, onHandOff: (handOff: HandOff) => void) => {
          await sleep(ms);
          return target.watch(name, onHandOff);
        };
      }
      // A Leasehold takes the store's scope for its prefix: that scope is slow too.
      if (prop === 'scope') return (prefix: string) => slowToSubscribe(target.bind(storeSettings({ prefix })), ms);
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('a waiter that joins before the shared subscription is live', () => {
  it('still gets a hand-off published before the subscription went live', async () => {
    const store = new MemoryStore();
    const holder = new Leasehold(store);
    const slow = new Leasehold(slowToSubscribe(store, 1_000));
    const held = await holder.acquire('x', { ttl: 30_000 });
    const controller = new AbortController();
    // The first waiter opens the shared subscription (slow), then gives up.
    const first = slow.acquire('x', { wait: 10_000, signal: controller.signal }).catch(() => undefined);
    await waitFor(async () => (await store.queued('x', 0)).count === 1);
    const second = slow.acquire('x', { wait: 10_000 });
    await waitFor(async () => (await store.queued('x', 0)).count === 2);
    // An abort is heard at once, even while the subscription is still on its way.
    const aborted = now();
    controller.abort();
    await first;
    expect(now() - aborted).toBeLessThan(100);
    // Handed to the second waiter while the subscription is not live yet: the message is lost.
    await held.release();
    const released = now();
    const lock = await second;
    expect(now() - released).toBeLessThan(1_500);
    await lock.release();
    await Promise.all([holder.close(), slow.close()]);
  });
});
