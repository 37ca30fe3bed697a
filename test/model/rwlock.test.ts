import fc from 'fast-check';
import { describe, it } from 'vitest';
import { suiteRedis } from '../unit/primitives/redis-fixture.js';
import {
  command,
  expectCaught,
  type ModelSpec,
  memory,
  modelProperty,
  params,
  REAL,
  redis,
  runCommands,
  takeStats,
  VIRTUAL,
} from './harness.js';
import { acquireCommand, type LockModel, lockCommands, LockModel as Model, releaseCommand } from './locks.js';

/**
 * The read-write lock against a model: three instances take one name shared (`mode: 'shared'`)
 * or exclusive (a plain acquire: the mutex of the name), with the commands and faults of the
 * mutex model (locks.ts).
 *
 * Invariants:
 * - an exclusive valid holder is alone: no other valid holder, shared or exclusive (each judged
 *   by its own expiresIn() > 0 and signal not aborted); shared ones overlap freely;
 * - no hold reaches user code, nor a withLock work, with no validity left;
 * - tokens strictly increase in the store's grant order; an exclusive hold's token is above every
 *   hold handed out before it;
 * - writers are not starved: no shared hold goes to a request made after an undisturbed exclusive
 *   waiter queued, while it waits;
 * - every acquisition settles within its wait plus 3 × commandTimeout (plus its instance's stops);
 *   no undisturbed waiter stays parked while the lock has been surely free for it for a
 *   reservation's length; a try refused finds the lock not surely free for it;
 * - once everyone closed and every lease ran out: nothing held, reserved or queued.
 *
 * Negative control: an exclusive release that is a plain DEL (it deletes the lock whoever holds
 * it, shared holders' mark included).
 *
 * KNOWN DEFECT (the one of mutex.test.ts, by a trigger of its own; src/core/waiting.ts with the
 * shared release, src/store/memory/shared.ts and lua/release-shared.lua): an exclusive waiter
 * refused while shared holds hold the lock is given the longest hold's end as its fallback. A
 * shared release that leaves other holds wakes no one (the waiter at the head is not shared), and
 * those holds then run out without a word, so the waiter sleeps on until that first fallback, and
 * times out without a last attempt if its wait ends first, although the lock has been free. The
 * model counts such an idle waiter (World.staleFallback) rather than failing on it; the `it.fails`
 * test below runs the shrunk sequence without that excuse, and passes once the waiter learns how
 * long the holds left last.
 */

const NAME = 'rwlock';
const SLOTS = 3;
const config = { name: NAME, kinds: ['exclusive' as const, 'shared' as const] };

function spec(overrides: Partial<ModelSpec<LockModel>> = {}, strict = false): ModelSpec<LockModel> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME] },
    model: (world) => {
      if (strict) world.excuseIdle = undefined;
      return new Model(config);
    },
    commands: (timing, virtual) => lockCommands(config, SLOTS, timing, virtual),
    finish: (model, world) => model.finish(world),
    ...overrides,
  };
}

describe('the read-write lock checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 400);
    await fc.assert(modelProperty(spec()), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it.fails('KNOWN DEFECT: an exclusive waiter sleeps on after the shared holds left ran out', async () => {
    // The shrunk counterexample: two shared holds (300 ms and 2 s), an exclusive waiter (wait 1 s)
    // refused with 2 s as its fallback; the 2 s hold is released, the 300 ms one runs out: the
    // lock is free from 300 ms on, and the waiter sleeps until its wait ends.
    const cmds = [
      acquireCommand({
        slot: 0,
        kind: 'shared',
        via: 'acquire',
        ttl: 'short',
        autoExtend: false,
        wait: 0,
        abortable: false,
      }),
      acquireCommand({
        slot: 1,
        kind: 'shared',
        via: 'acquire',
        ttl: 'long',
        autoExtend: false,
        wait: 0,
        abortable: false,
      }),
      acquireCommand({
        slot: 0,
        kind: 'exclusive',
        via: 'acquire',
        ttl: 'short',
        autoExtend: false,
        wait: 'long',
        abortable: false,
      }),
      releaseCommand(1, 0),
      command<LockModel>('Advance(1500)', (_m, w) => w.advance(1_500)),
    ];
    // Only this defect is the expected failure: a run without it (fixed), or one that fails
    // otherwise, does not throw here, so `it.fails` reports it.
    const error = await runCommands(spec({}, true), cmds).catch((e: unknown) => e);
    if (/exclusive acquire 3 of #\d+ still waits though rwlock has been surely free/.test(String(error))) throw error;
    if (error !== undefined) console.error('not the known defect:', error);
  });

  it('negative control: a plain-DEL exclusive release is caught', async () => {
    const broken = spec({ world: { slots: SLOTS, names: [NAME], broken: { plainDel: true } } });
    await expectCaught(
      modelProperty(broken),
      500,
      /valid holders of rwlock|valid when released/,
      'plain-DEL release (read-write lock)',
    );
  });

  describe('redis-server, real time', () => {
    const server = suiteRedis();
    it('ioredis, one client per instance', async () => {
      const real = spec({ backend: redis(() => server.server), timing: REAL, maxCommands: 12 });
      await fc.assert(modelProperty(real), params(4));
    });
  });
});
