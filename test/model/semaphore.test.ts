import fc from 'fast-check';
import { describe, it } from 'vitest';
import {
  expectCaught,
  type ModelSpec,
  memory,
  modelProperty,
  onRedisInRealTime,
  params,
  takeStats,
  VIRTUAL,
} from './harness.js';
import { type LockModel, lockCommands, LockModel as Model } from './locks.js';

/**
 * The semaphore (`limit: 2`) against a model: four instances take permits of one name, with the
 * commands and faults of the mutex model (locks.ts). test/unit/primitives/semaphore-model.test.ts
 * checks acquire / release / expire / kill sequences on a real server too; this model adds waits,
 * aborts, extensions, withLock, stops, blocked event loops, late and re-sent replies and closes.
 *
 * Invariants:
 * - never more than 2 valid holders (each by its own expiresIn() > 0 and signal not aborted);
 * - no permit reaches user code, nor a withLock work, with no validity left;
 * - tokens strictly increase in the store's grant order (the name's one counter);
 * - every acquisition settles within max(wait, 2 × commandTimeout) + 3 × commandTimeout (plus its
 *   instance's stops);
 *   no undisturbed waiter stays parked while a permit has been surely free for a reservation;
 * - a try refused finds no permit surely free (a permit is never lost); a valid hold's release
 *   answers true;
 * - once everyone closed and every lease ran out: no hold, reservation or waiter left.
 *
 * Negative control: a release that frees someone else's permit when its own is gone (a plain
 * DEL / DECR that ignores the owner).
 */

const NAME = 'semaphore';
const SLOTS = 4;
const LIMIT = 2;
const config = { name: NAME, kinds: ['permit' as const], limit: LIMIT };

function spec(overrides: Partial<ModelSpec<LockModel>> = {}): ModelSpec<LockModel> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME], limit: LIMIT },
    model: () => new Model(config),
    commands: (timing, virtual) => lockCommands(config, SLOTS, timing, virtual),
    finish: (model, world) => model.finish(world),
    ...overrides,
  };
}

describe('the semaphore checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 400);
    await fc.assert(modelProperty(spec()), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it('negative control: a release that frees another holder’s permit is caught', async () => {
    const broken = spec({ world: { slots: SLOTS, names: [NAME], limit: LIMIT, broken: { plainDel: true } } });
    await expectCaught(
      modelProperty(broken),
      600,
      /permits of semaphore|valid when released|valid when extended/,
      'plain-DEL release (semaphore)',
    );
  });

  onRedisInRealTime((real) => spec(real));
});
