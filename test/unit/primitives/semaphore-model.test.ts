import fc from 'fast-check';
import { describe, it } from 'vitest';
import { Leasehold, MemoryStore } from '../../../src/index.js';
import type { SharedStore } from '../../../src/store/port.js';
import { resolveStore } from '../../../src/store/registry.js';
import { storeSettings } from '../../../src/store/settings.js';
import { randomPrefix } from '../../harness/index.js';
import { suiteRedis } from './redis-fixture.js';
import { type Command, EXAMPLES, type ModelBackend, semaphoreProperty } from './semaphore-model.js';

/**
 * A semaphore of n never has n+1 holders, and never loses a permit: random acquire / release /
 * expire / kill sequences checked against a model (semaphore-model.ts), on the MemoryStore and on
 * a real redis-server. The negative controls run the same property on broken semaphores.
 */

const RUNS = 30;
const examples = EXAMPLES.map((e) => [e as Command[]] as [Command[]]);

describe('a semaphore checked against a model', () => {
  it('MemoryStore', async () => {
    const store = new MemoryStore().bind(storeSettings({ prefix: randomPrefix() }));
    const backend: ModelBackend = {
      make: async () => new Leasehold(store),
      holds: async (name) => (await store.inspectShared(name)).holds.length,
    };
    await fc.assert(semaphoreProperty(backend), { numRuns: RUNS, examples });
  }, 60_000);

  describe('redis-server', () => {
    const redis = suiteRedis();

    it('ioredis, one client per instance', async () => {
      const prefix = randomPrefix();
      const store = resolveStore(redis.client(), { ...storeSettings({ prefix }), onError: () => {} })
        .store as unknown as SharedStore;
      const backend: ModelBackend = {
        make: async () => new Leasehold(redis.client(), { prefix }),
        holds: async (name) => (await store.inspectShared(name)).holds.length,
      };
      await fc.assert(semaphoreProperty(backend), { numRuns: RUNS, examples });
    }, 60_000);
  });
});
