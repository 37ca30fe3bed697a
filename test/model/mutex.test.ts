import fc from 'fast-check';
import { describe, it } from 'vitest';
import {
  command,
  expectCaught,
  type ModelSpec,
  memory,
  modelProperty,
  onPostgresInRealTime,
  onRedisInRealTime,
  params,
  runCommands,
  type Size,
  takeStats,
  VIRTUAL,
} from './harness.js';
import { acquireCommand, type LockModel, lockCommands, LockModel as Model, releaseCommand } from './locks.js';

/**
 * The mutex against a model: three instances take one name with acquire / tryAcquire / withLock /
 * tryWithLock, release, extend and abort, while time passes, instances are stopped past their
 * leases, the event loop blocks, replies come late or twice, and instances close or die.
 *
 * Invariants (harness.ts, locks.ts):
 * - never two valid holders (each judged by its own lock.expiresIn() > 0 and signal not aborted);
 * - no lock reaches user code, nor a withLock work, with no validity left;
 * - fencing tokens strictly increase in the store's grant order, and per hand-out;
 * - every acquisition settles within max(wait, 2 × commandTimeout) + 3 × commandTimeout (plus any
 *   stop of its instance), rejecting only as its situation allows (timeout, its abort, CLOSED,
 *   unavailable under a disturbed net); no undisturbed waiter stays parked while the lock has been
 *   surely free for a reservation's length (a lost wake-up);
 * - a try refused finds the lock not surely free; a valid lock's release answers true;
 * - once everyone closed and every lease ran out: nothing held, queued or reserved in the store.
 *
 * Negative control: a store whose release is a plain DEL (forceRelease, whoever holds the lock).
 *
 * The property runs on the memory store (virtual clock), then in real time on a redis-server and on
 * PostgreSQL (each instance a pg pool of its own, so each store keeps its own quiet names).
 *
 * Found by the model, and fixed: a waiter slept on its last refusal's fallback (the lease it was
 * refused by) after the lock came free without a release, when the waiters ahead of it gave up;
 * now a leave by the first waiter wakes the new first to ask again. And: a queued waiter that
 * took the lock when no hand-off reserved it told no one behind it, so when its lease ran out
 * unreleased, the waiter first in line after it slept on while the lock was free; now it wakes
 * that waiter to ask again (ask_first). The tests below keep both sequences.
 */

const NAME = 'mutex';
const SLOTS = 3;
const config = { name: NAME, kinds: ['exclusive' as const] };

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

describe('the mutex checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 500);
    await fc.assert(modelProperty(spec()), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it('a waiter is woken when the waiters ahead give up while the holder runs out (found by the model)', async () => {
    // The shrunk sequence: #0 holds for 2 s; five waiters queue (the last waits 1 s); #0 releases,
    // the first waiter takes the lock for 300 ms (no watchdog) and lets it run out; the three
    // named next give up at 150 ms; the last one slept until its wait ended at 1 s.
    const take = (slot: number, ttl: Size, wait: 0 | Size) =>
      acquireCommand({ slot, kind: 'exclusive', via: 'acquire', ttl, autoExtend: false, wait, abortable: false });
    const cmds = [
      take(0, 'long', 0),
      ...[1, 1, 1, 2].map((slot) => take(slot, 'short', 'short')),
      take(2, 'short', 'long'),
      releaseCommand(0, 0),
      command<LockModel>('Advance(1500)', (_m, w) => w.advance(1_500)),
    ];
    await runCommands(spec(), cmds);
  });

  it('a waiter is woken when a queued waiter ahead takes the lock outside a hand-off and lets it run out (found by the model)', async () => {
    // #2 holds for 2 s; five waiters queue, refused with 2 s. #2 releases: the first waiter takes
    // the lock for 300 ms and lets it run out; the release named the next three, the last two of
    // which give up at 150 ms. The second retries, takes the free lock at 305 ms (no hand-off) and
    // lets it run out at 605 ms; the fifth, named by no message, slept until its wait ended at 1 s.
    const take = (slot: number, ttl: Size, wait: 0 | Size) =>
      acquireCommand({ slot, kind: 'exclusive', via: 'acquire', ttl, autoExtend: false, wait, abortable: false });
    const cmds = [
      take(2, 'long', 0),
      take(0, 'short', 'long'),
      take(0, 'short', 'long'),
      take(1, 'short', 'short'),
      take(1, 'short', 'short'),
      take(0, 'short', 'long'),
      releaseCommand(2, 0),
      command<LockModel>('Advance(1500)', (_m, w) => w.advance(1_500)),
    ];
    await runCommands(spec(), cmds);
  });

  it('negative control: a plain-DEL release is caught', async () => {
    const broken = spec({ world: { slots: SLOTS, names: [NAME], broken: { plainDel: true } } });
    await expectCaught(
      modelProperty(broken),
      300,
      /valid holders of mutex|valid when released|valid when extended/,
      'plain-DEL release (mutex)',
    );
  });

  onRedisInRealTime((real) => spec(real));
  onPostgresInRealTime((real) => spec(real));
});
