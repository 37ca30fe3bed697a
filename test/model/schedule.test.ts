import fc from 'fast-check';
import { describe, it } from 'vitest';
import { DEFAULTS } from '../../src/core/defaults.js';
import type { JobRun } from '../../src/index.js';
import {
  type Command,
  command,
  commonCommands,
  count,
  expectCaught,
  type ModelSpec,
  memory,
  modelProperty,
  onRedisInRealTime,
  params,
  type Size,
  type Slot,
  type Timing,
  type Tracked,
  takeStats,
  VIRTUAL,
  type World,
} from './harness.js';
import { type Entry, operation } from './store.js';

/**
 * The scheduler's claim against a model: three instances call runOnce on one job, with or without
 * a tick (six ticks 700 ms apart), lockAtMostFor short or long, lockAtLeastFor or not, keepAlive
 * or not; the model ends each task (returns or throws), beside the world's faults.
 *
 * Invariants:
 * - each tick's task runs at most once, and ticks start in increasing order;
 * - never two valid holders of the job's lock; a task starts with validity left and its signal
 *   not aborted; tokens increase in the store's claim order;
 * - lockAtLeastFor: a claim made inside the previous claim's lockAtLeastFor is for a later tick
 *   than that run's, and comes after that run finished;
 * - a skip says why truly: `already-ran` only when this tick or a later one was claimed before,
 *   `clock-skew` only for a tick ahead of the clock by more than clockTolerance, `locked` never
 *   when the lock was surely free, `unavailable` only under a disturbed net (in real time, a
 *   busy machine counts as one: a call may outlast commandTimeout);
 * - every call settles within 3 × commandTimeout of its claim or of its task's end; a finished
 *   run of an undisturbed instance is in the history with its outcome;
 * - once everyone closed and every lease ran out: the job's lock is neither held nor queued.
 *
 * Negative control: a finish that, finding the lock not its own, deletes it whoever holds it.
 */

const NAME = 'job';
const SLOTS = 3;
const TICKS = 6;
/** ms between two ticks: from a little before the run's start to beyond clockTolerance ahead of it. */
const TICK_SPACING = 700;

interface Run {
  readonly op: number;
  readonly slot: Slot;
  readonly label: string;
  readonly tick: number | null;
  readonly lockAtLeastFor: number;
  run?: JobRun;
  end?: (ok: boolean) => void;
  call?: Promise<unknown>;
  /** How the task ended, once it did: ok, failed. */
  ended?: 'ok' | 'failed';
  disturbed: boolean;
}

class Model {
  runs: Run[] = [];
  seq = 0;
  /** Ticks whose task started, in order. */
  started: number[] = [];
}

interface RunArgs {
  readonly slot: number;
  /** Index of the tick (a second apart from the run's start), or null: a run without a tick. */
  readonly tick: number | null;
  readonly ttl: Size;
  readonly atLeast: boolean;
  readonly keepAlive: boolean;
}

/** Claims granted before entry `seq` (the store's order), with what the model knows of each. */
function claimsBefore(world: World, model: Model, seq: number): { entry: Entry; run: Run | undefined }[] {
  return world.log.entries
    .filter((e) => e.seq < seq && e.op === 'claimTick' && (e.reply as { claimed?: boolean })?.claimed === true)
    .map((entry) => ({ entry, run: model.runs.find((r) => r.op === entry.operation) }));
}

/** lockAtLeastFor, by the store's log: a claim inside an earlier run's window is a later tick's, after that run's finish. */
function checkAtLeast(world: World, model: Model, run: Run): void {
  if (!world.exactLog) return;
  const mine = world.log.entries.find(
    (e) => e.operation === run.op && e.op === 'claimTick' && (e.reply as { claimed?: boolean })?.claimed === true,
  );
  if (!mine) return;
  // The claim just before this one (a later tick's claim ends an earlier run's lockAtLeastFor).
  const previous = claimsBefore(world, model, mine.seq).filter((c) => c.entry.owner !== mine.owner);
  for (const { entry, run: earlier } of previous.slice(-1)) {
    // Its finish says how long it keeps the lock (none for a claim abandoned as confirmed too
    // late); unfinished, its lease ran out at lockAtMostFor, beyond its lockAtLeastFor.
    const finish = world.log.entries.find((e) => e.op === 'finishTick' && e.owner === entry.owner && e.seq < mine.seq);
    const atLeast = finish ? (finish.atLeast ?? 0) : (earlier?.lockAtLeastFor ?? 0);
    if (!earlier || mine.at >= entry.at + atLeast) continue;
    const later = run.tick !== null && earlier.tick !== null && run.tick > earlier.tick;
    if (!later || finish === undefined) {
      const after = Math.round(mine.at - entry.at);
      world.fail(
        `${run.label} was claimed ${after} ms after ${earlier.label}, inside its lockAtLeastFor of ${atLeast} ms`,
      );
    }
  }
}

function runOnce(model: Model, world: World, a: RunArgs, tickAt: (i: number) => number): void {
  const slot = world.slot(a.slot);
  const t = world.timing;
  const lockAtMostFor = t.ttl[a.ttl];
  const lockAtLeastFor = a.atLeast ? Math.min(t.ttl.short, lockAtMostFor) : 0;
  const op = ++model.seq;
  const tick = a.tick === null ? null : tickAt(a.tick);
  const label = `run ${op} of ${slot}${a.tick === null ? '' : ` (tick ${a.tick})`}`;
  const run: Run = { op, slot, label, tick, lockAtLeastFor, disturbed: false };
  model.runs.push(run);
  // Judged as the claim is sent: the store's clock is at or past this when it runs the claim.
  const free = world.surelyFree(NAME, 'exclusive');
  const sentAt = Date.now();
  const options = { lockAtMostFor, lockAtLeastFor, keepAlive: a.keepAlive, ...(tick === null ? {} : { tick }) };
  let started!: (value: 'started') => void;
  const start = new Promise<'started'>((resolve) => {
    started = resolve;
  });
  const task = async (signal: AbortSignal, jobRun: JobRun) => {
    const lock = jobRun.lock;
    if (!lock) {
      world.fail(`${label} ran without its lock`);
      return;
    }
    world.handOut(slot, NAME, 'exclusive', lock, label);
    if (signal.aborted) world.fail(`${label}: its task started with its signal aborted`);
    if (tick !== null) {
      const after = model.started.filter((s) => s >= tick);
      if (after.length > 0) world.fail(`${label} started after a run of the same or a later tick did`);
      model.started.push(tick);
    }
    run.run = jobRun;
    checkAtLeast(world, model, run);
    count('task');
    started('started');
    await new Promise<void>((resolve, reject) => {
      run.end = (ok) => {
        run.ended = ok ? 'ok' : 'failed';
        if (ok) resolve();
        else reject(new Error(`${label} failed`));
      };
    });
    return op;
  };
  const call = slot.run(() => operation(op, () => slot.locks.runOnce(NAME, task, options)));
  run.call = call;
  world.track(label, slot, world.acquireBound(0), Promise.race([start, call]), (r, tr) => {
    if (tr.disturbed) run.disturbed = true;
    if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, {});
    if (r.value === 'started') return;
    skipped(world, model, run, r.value as { ran: boolean; reason?: string }, tr, { free, sentAt });
  });
}

/** A run that did not start: was its reason true? */
function skipped(
  world: World,
  model: Model,
  run: Run,
  result: { ran: boolean; reason?: string },
  tracked: Tracked,
  { free, sentAt }: { free: boolean; sentAt: number },
): void {
  count(`skipped ${result.reason}`);
  if (result.ran) {
    world.fail(`${run.label} says it ran, and its task never started`);
    return;
  }
  if (result.reason === 'unavailable' && !world.mayBeUnavailable(tracked))
    world.fail(`${run.label} skipped as unavailable, undisturbed`);
  const slack = world.clock.virtual ? 0 : world.timing.epsilon;
  if (result.reason === 'clock-skew' && (run.tick === null || run.tick <= sentAt + DEFAULTS.clockTolerance - slack)) {
    world.fail(`${run.label} skipped as clock-skew, its tick not ahead of the clock`);
  }
  if (result.reason === 'already-ran' && world.exactLog) {
    // Every claim is a model run's (an abandoned one too: a claim confirmed too late still moves the tick on).
    const claimed = claimsBefore(world, model, Number.POSITIVE_INFINITY).some(
      ({ run: r }) => r !== undefined && r !== run && r.tick !== null && run.tick !== null && r.tick >= run.tick,
    );
    if (!claimed) world.fail(`${run.label} skipped as already-ran with no claim of its tick or a later one`);
  }
  if (result.reason === 'locked' && free && !tracked.disturbed) {
    world.fail(`${run.label} skipped as locked while the job's lock was surely free`);
  }
}

function end(world: World, run: Run, ok: boolean): void {
  const label = `end of ${run.label}`;
  const ending = run.end;
  delete run.end;
  ending?.(ok);
  world.track(label, run.slot, world.margin, run.call ?? Promise.resolve(), (r, tr) => {
    if (tr.disturbed) run.disturbed = true;
    if (r.status === 'rejected') {
      if (!ok && String(r.reason).includes(`${run.label} failed`)) return;
      return world.judgeError(label, r.reason, tr, { lost: true });
    }
    if (!ok) world.fail(`${label}: its task threw, runOnce resolved`);
  });
}

function commands(timing: Timing, virtual: boolean): fc.Arbitrary<Command<Model>>[] {
  const slot = fc.nat({ max: SLOTS - 1 });
  const size = fc.constantFrom<Size>('short', 'long');
  const tick = fc.option(fc.nat({ max: TICKS - 1 }), { nil: null, freq: 4 });
  const runArb = fc
    .record({ slot, tick, ttl: size, atLeast: fc.boolean(), keepAlive: fc.boolean() })
    .map((a) =>
      command<Model>(
        `RunOnce(${a.slot}, ${a.tick === null ? 'no tick' : `tick ${a.tick}`}, lockAtMostFor ${a.ttl}${a.atLeast ? ', lockAtLeastFor' : ''}${a.keepAlive ? '' : ', no keepAlive'})`,
        (m, w) => runOnce(m, w, a, (i) => w.epoch + (i - 1) * TICK_SPACING),
      ),
    );
  const endArb = fc.tuple(slot, fc.nat(3), fc.boolean()).map(([i, k, ok]) =>
    command<Model>(`${ok ? 'Return' : 'Throw'}(${i}, ${k})`, (m, w) => {
      const mine = m.runs.filter((r) => r.slot === w.slot(i) && r.end);
      const run = mine[k % Math.max(1, mine.length)];
      if (run) end(w, run, ok);
    }),
  );
  const common = commonCommands<Model>(SLOTS, timing, { crash: virtual });
  return [
    fc.oneof(
      { weight: 6, arbitrary: runArb },
      { weight: 5, arbitrary: endArb },
      ...common.map((arbitrary, i) => ({ weight: i === 0 ? 4 : 1, arbitrary })),
    ),
  ];
}

function spec(overrides: Partial<ModelSpec<Model>> = {}): ModelSpec<Model> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME] },
    model: () => new Model(),
    commands,
    finish: async (model, world) => {
      for (const run of model.runs) if (run.end && run.slot.live) end(world, run, true);
      await world.until(() => world.tracked.every((t) => t.settled || !t.slot.live), world.margin);
      // A finished run of an undisturbed, live instance is in the history as it ended.
      if (!world.exactLog) return;
      const history = (await world.store.readJob?.(NAME, 100))?.runs ?? [];
      for (const run of model.runs) {
        if (!run.ended || !run.run || run.disturbed || !run.slot.live) continue;
        const record = history.find((h) => h.fence === run.run?.fencingToken);
        const lost = run.run.lock?.lostError !== undefined;
        const expected = lost ? 'lost' : run.ended;
        if (record?.outcome !== expected)
          world.fail(`${run.label} ended ${expected}, the history says ${record?.outcome}`);
      }
    },
    ...overrides,
  };
}

describe('the scheduler’s claim checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 500);
    await fc.assert(modelProperty(spec()), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it('negative control: a plain-DEL finish is caught', async () => {
    const broken = spec({ world: { slots: SLOTS, names: [NAME], broken: { plainDel: true } } });
    // Caught after 68 runs on average (4,000 seeds: at most 557): it needs a lease run out, a
    // claim by another instance, and then the late finish.
    await expectCaught(modelProperty(broken), 2000, /valid holders of job/, 'plain-DEL finish (scheduler)');
  });

  onRedisInRealTime((real) => spec(real));
});
