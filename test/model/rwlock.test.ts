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
  type Size,
  showsDefect,
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
 * KNOWN DEFECT (the one of mutex.test.ts, by two triggers of the read-write lock's own): a waiter
 * learns that the lock came free for it only from a release that names it, or from the fallback
 * its last refusal gave it. (1) An exclusive waiter refused while shared holds hold the lock gets
 * the longest hold's end; a shared release that leaves other holds wakes no one (the waiter at
 * the head is not shared; src/store/memory/shared.ts, lua/lib/shared.lua), and those holds then
 * run out without a word. (2) Shared waiters kept out by an exclusive waiter queued ahead (writer
 * preference) are not told when it gives up (its leave passes nothing on unless it was reserved).
 * Either way the waiter sleeps on, and times out without a last attempt if its wait ends first,
 * although the lock has been free for it. The model counts such an idle waiter
 * (World.staleFallback) rather than failing on it; each `it.fails` test below runs its shrunk
 * sequence without that excuse, and passes once the waiter is told.
 */

const NAME = 'rwlock';
const SLOTS = 3;
const config = { name: NAME, kinds: ['exclusive' as const, 'shared' as const] };

const take = (slot: number, kind: 'exclusive' | 'shared', ttl: Size, wait: 0 | Size) =>
  acquireCommand({ slot, kind, via: 'acquire', ttl, autoExtend: false, wait, abortable: false });

function spec(overrides: Partial<ModelSpec<LockModel>> = {}): ModelSpec<LockModel> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME] },
    model: () => new Model(config),
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
    // The shrunk sequence: two shared holds (300 ms and 2 s), an exclusive waiter (wait 1 s)
    // refused with 2 s as its fallback; the 2 s hold is released, the 300 ms one runs out: the
    // lock is free from 300 ms on, and the waiter sleeps until its wait ends.
    const cmds = [
      take(0, 'shared', 'short', 0),
      take(1, 'shared', 'long', 0),
      take(0, 'exclusive', 'short', 'long'),
      releaseCommand(1, 0),
      command<LockModel>('Advance(1500)', (_m, w) => w.advance(1_500)),
    ];
    await showsDefect(spec(), cmds, /exclusive acquire 3 of #\d+ still waits though rwlock has been surely free/);
  });

  it.fails('KNOWN DEFECT: a shared waiter kept out by an exclusive waiter sleeps on after it gave up', async () => {
    // The shrunk sequence: an exclusive hold; a shared waiter, an exclusive one, another shared
    // one queue; the hold is released to the first shared waiter; the exclusive waiter's instance
    // closes: the second shared waiter could join at once, and sleeps until its turn's retry.
    const cmds = [
      take(0, 'exclusive', 'short', 0),
      take(0, 'shared', 'short', 'short'),
      take(2, 'exclusive', 'short', 'long'),
      take(0, 'shared', 'short', 'long'),
      releaseCommand(0, 0),
      command<LockModel>('Close(2)', (_m, w) => w.close(2)),
      command<LockModel>('Advance(1500)', (_m, w) => w.advance(1_500)),
    ];
    await showsDefect(spec(), cmds, /shared acquire 4 of #\d+ still waits though rwlock has been surely free/);
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
