import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { Leasehold } from '../../../src/index.js';
import type { Store } from '../../../src/store/index.js';
import type { SharedRequest } from '../../../src/store/port.js';
import { boundArgs, SCRIPTS } from '../../../src/store/redis/scripts.js';
import { resolveStore } from '../../../src/store/registry.js';
import { storeSettings } from '../../../src/store/settings.js';
import { writerUnderReaders } from '../../contract/shared.js';
import { randomPrefix } from '../../harness/index.js';
import { suiteRedis } from './redis-fixture.js';
import { type Command, EXAMPLES, type ModelBackend, semaphoreProperty } from './semaphore-model.js';

/**
 * The semaphore's and the read-write lock's checks can fail: each runs, unchanged, on a Redis
 * store whose acquire-shared script is broken one way (a step of lib/shared.lua replaced in the
 * test only), and must catch it; the same check on the real script passes.
 */

const redis = suiteRedis();
const client = () => redis.client();
const instances: Leasehold[] = [];
afterEach(async () => {
  await Promise.all(instances.splice(0).map((l) => l.close()));
});

/** Replace the Lua function `name` of lib/shared.lua by one with `body`; fail if it is not there. */
function replaceFunction(name: string, body: string): (source: string) => string {
  const definition = new RegExp(`local function ${name}\\(([^)]*)\\)\\n[\\s\\S]*?\\nend\\n`);
  return (source) => {
    if (!definition.test(source)) throw new Error(`acquire-shared has no function ${name}`);
    return source.replace(definition, (_, params: string) => `local function ${name}(${params})\n  ${body}\nend\n`);
  };
}

/** A Redis store under `prefix` whose acquire-shared runs `patch(source)` instead (by EVAL). */
function patched(prefix: string, patch: ((source: string) => string) | undefined): Store {
  const redis = client();
  const { store } = resolveStore(redis, { ...storeSettings({ prefix }), onError: () => {} });
  if (!patch) return store;
  const script = SCRIPTS.acquireShared;
  const source = patch(script.source);
  const acquireShared = async (name: string, request: SharedRequest) => {
    const { keys, args } = script.input(prefix, name, request, 'PUBLISH', boundArgs(storeSettings({ prefix })));
    return script.reply.decode(await redis.eval(source, keys.length, ...keys, ...args));
  };
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'acquireShared') return acquireShared;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function leasehold(prefix: string, patch?: (source: string) => string): Leasehold {
  const locks = new Leasehold(patched(prefix, patch), { prefix });
  instances.push(locks);
  return locks;
}

/** The model check of semaphore-model.ts on a semaphore with `patch`: its counterexample's message, or null. */
async function modelCheck(patch: ((source: string) => string) | undefined, numRuns: number): Promise<string | null> {
  const prefix = randomPrefix();
  const inspector = resolveStore(client(), { ...storeSettings({ prefix }), onError: () => {} }).store;
  const backend: ModelBackend = {
    make: async () => new Leasehold(patched(prefix, patch), { prefix }),
    holds: async (name) => (await inspector.inspectShared?.(name))?.holds.length ?? 0,
  };
  const examples = EXAMPLES.map((e) => [e as Command[]] as [Command[]]);
  // The first counterexample is enough: no shrinking.
  const result = await fc.check(semaphoreProperty(backend), { numRuns, examples, endOnFailure: true });
  if (!result.failed) return null;
  return result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance);
}

describe('negative controls: a broken semaphore is caught by the model check', () => {
  it('the real script passes the check', async () => {
    expect(await modelCheck(undefined, 5)).toBeNull();
  }, 30_000);

  it('a semaphore that admits without counting has an n+1st holder', async () => {
    const message = await modelCheck(replaceFunction('in_use', 'return 0'), 5);
    expect(message).toMatch(/granted while 2 holds were surely live/);
  }, 30_000);

  it('a semaphore that never reclaims expired permits refuses with a permit free', async () => {
    const countAll = replaceFunction('in_use', "return redis.call('ZCARD', holds)");
    const keepAll = replaceFunction('prune', 'return');
    const message = await modelCheck((source) => keepAll(countAll(source)), 5);
    expect(message).toMatch(/refused while at most \d holds could be live/);
  }, 30_000);
});

describe('negative control: a read-write lock without writer preference starves the writer', () => {
  async function stream(patch?: (source: string) => string) {
    const prefix = randomPrefix();
    const readers = [1, 2, 3].map(() => leasehold(prefix, patch));
    return writerUnderReaders(readers, leasehold(prefix, patch), 'stream', { hold: 60, bound: 1_500 });
  }

  it('with writer preference the writer gets in; without it, the same check times out', async () => {
    const fair = await stream();
    expect(fair.waited).not.toBeNull();
    const starving = await stream(replaceFunction('exclusive_ahead', 'return false'));
    expect(starving.readerHolds).toBeGreaterThan(8);
    expect(starving.waited).toBeNull();
  }, 30_000);
});
