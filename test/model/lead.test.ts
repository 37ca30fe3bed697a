import { EventEmitter } from 'node:events';
import fc from 'fast-check';
import { describe, it, vi } from 'vitest';
import { type Lock, LockTimeoutError, StoreUnavailableError } from '../../src/index.js';
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
  takeStats,
  VIRTUAL,
  type World,
} from './harness.js';

// Leadership sleeps between failed campaigns with timers/promises: on the virtual clock's timers.
vi.mock('node:timers/promises', async () => (await import('./virtual-sleep.js')).timersPromises);
// Each run's Leaseholds' AsyncLocalStorage disabled after it (contexts.ts).
vi.mock('node:async_hooks', async (real) => (await import('./contexts.js')).trackingAsyncHooks(await real()));

/**
 * Leader election (`lead`) against a model: three instances campaign for one name; each term's
 * work is driven by the model: cooperative (it settles some time after its signal aborts, perhaps
 * later than stopTimeout) or stubborn (it settles when the model says, or fails). Beside stops,
 * finishing works and the world's faults.
 *
 * Invariants:
 * - never two valid leases (each term's lock judged on its own validity); at most one instance
 *   says isLeader, and only with a valid lease and a live term;
 * - a term's work starts with validity left and its signal not aborted; each term's token is
 *   above the last;
 * - at most one term's work at a time: a new term's work never starts beside an earlier one
 *   still running, unless that term's lease was lost (a pause, a close) or it overran stopTimeout;
 *   one instance never runs two terms' works at once;
 * - stop() resolves within stopTimeout plus 3 × commandTimeout, and by then its works have settled
 *   unless it reported `overran`;
 * - candidates do not sit idle while the lock is surely free and no term runs (a lost wake-up);
 * - once every instance stopped and closed and every lease ran out: nothing held or queued.
 *
 * Negative control: a leader loop whose term ends by releasing the lock at once, before its work
 * has settled (what stop() did before it waited for the work).
 */

const NAME = 'leader';
const SLOTS = 3;

interface Leader {
  readonly isLeader: boolean;
  stop(): Promise<void>;
  on(event: 'overran', listener: (e: { fencingToken: number }) => void): unknown;
}

type Work = (signal: AbortSignal, lock: Lock) => Promise<void>;

interface LeadOptions {
  readonly ttl: number;
  readonly autoExtend: boolean;
  readonly stopTimeout: number;
}

/** How the model starts a leader: the library's, or a broken loop. */
type Lead = (slot: Slot, work: Work, options: LeadOptions) => Leader;

const library: Lead = (slot, work, o) => slot.locks.lead(NAME, work, o);

/**
 * Broken: campaigns in the lock's queue and runs a term like the library, but ends the term by
 * releasing the lock at once, its work perhaps still running, and campaigns again.
 */
const releasesAtOnce: Lead = (slot, work, o) => {
  const stopping = new AbortController();
  const aborted = (signal: AbortSignal) =>
    new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', () => resolve(), { once: true });
    });
  let leading: { lock: Lock; signal: AbortSignal } | undefined;
  const loop = async () => {
    while (!stopping.signal.aborted) {
      let lock: Lock;
      try {
        lock = await slot.locks.acquire(NAME, { ttl: o.ttl, autoExtend: o.autoExtend, signal: stopping.signal });
      } catch (error) {
        if (stopping.signal.aborted) return;
        if (error instanceof LockTimeoutError || error instanceof StoreUnavailableError) continue;
        return;
      }
      const term = new AbortController();
      const end = () => term.abort();
      lock.signal.addEventListener('abort', end, { once: true });
      stopping.signal.addEventListener('abort', end, { once: true });
      leading = { lock, signal: term.signal };
      const ran = Promise.resolve()
        .then(() => work(term.signal, lock))
        .catch(() => undefined);
      await Promise.race([ran, aborted(term.signal)]);
      term.abort();
      leading = undefined;
      await lock.release().catch(() => undefined);
    }
  };
  const done = slot.run(loop);
  return Object.assign(new EventEmitter(), {
    get isLeader() {
      return leading !== undefined && !leading.signal.aborted && leading.lock.expiresIn() > 0;
    },
    stop: async () => {
      stopping.abort();
      await done;
    },
  });
};

type Style = { readonly kind: 'stubborn' } | { readonly kind: 'cooperative'; readonly delay: number };

interface Term {
  readonly id: number;
  readonly slot: Slot;
  readonly campaign: Campaign;
  readonly lock: Lock;
  settled: boolean;
  overran: boolean;
  finish?: (ok: boolean) => void;
}

interface Campaign {
  readonly slot: Slot;
  readonly leader: Leader;
  readonly label: string;
  stopped: boolean;
}

class Model {
  readonly lead: Lead;
  campaigns: Campaign[] = [];
  terms: Term[] = [];
  seq = 0;

  constructor(lead: Lead) {
    this.lead = lead;
  }

  running(): Term[] {
    return this.terms.filter((t) => !t.settled);
  }
}

/** A term whose lease was lost (a pause, a close) or that overran stopTimeout may run beside the next. */
function excused(term: Term): boolean {
  term.lock.expiresIn();
  return term.overran || term.lock.lostError !== undefined;
}

function startTerm(model: Model, world: World, campaign: Campaign, signal: AbortSignal, lock: Lock): Term {
  const term: Term = { id: ++model.seq, slot: campaign.slot, campaign, lock, settled: false, overran: false };
  const label = `term ${term.id} of ${campaign.label}`;
  world.handOut(campaign.slot, NAME, 'exclusive', lock, label);
  if (signal.aborted) world.fail(`${label}: its work started with its signal aborted`);
  for (const other of model.running()) {
    if (other.campaign === campaign) world.fail(`${label} started while its own term ${other.id} still runs`);
    else if (!excused(other))
      world.fail(`${label} started while term ${other.id} of ${other.campaign.label} still runs`);
  }
  model.terms.push(term);
  count('term');
  return term;
}

function work(model: Model, world: World, campaign: () => Campaign, style: Style): Work {
  return async (signal, lock) => {
    const term = startTerm(model, world, campaign(), signal, lock);
    try {
      await new Promise<void>((resolve, reject) => {
        term.finish = (ok) => (ok ? resolve() : reject(new Error(`term ${term.id} failed`)));
        if (style.kind === 'stubborn') return;
        const onAbort = () => setTimeout(resolve, style.delay);
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      });
    } finally {
      term.settled = true;
    }
  };
}

function campaign(model: Model, world: World, i: number, options: LeadOptions, style: Style): void {
  const slot = world.slot(i);
  if (model.campaigns.some((c) => c.slot === slot && !c.stopped)) return;
  const label = `leader ${++model.seq} of ${slot}`;
  let self: Campaign | undefined;
  const leader = slot.run(() =>
    model.lead(
      slot,
      work(model, world, () => self as Campaign, style),
      options,
    ),
  );
  const c: Campaign = { slot, leader, label, stopped: false };
  self = c;
  leader.on('overran', ({ fencingToken }) => {
    count('overran');
    for (const t of model.terms) if (t.campaign === c && t.lock.fencingToken === fencingToken) t.overran = true;
  });
  model.campaigns.push(c);
}

function stop(model: Model, world: World, c: Campaign): void {
  c.stopped = true;
  const label = `stop of ${c.label}`;
  const bound = stopTimeout(world.timing) + world.margin;
  world.track(
    label,
    c.slot,
    bound,
    c.slot.run(() => c.leader.stop()),
    (r, tr) => {
      if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, {});
      for (const t of model.terms) {
        if (t.campaign === c && !t.settled && !t.overran)
          world.fail(`${label} resolved while term ${t.id}'s work runs`);
      }
    },
  );
}

function stopTimeout(timing: Timing): number {
  return timing.wait.long;
}

/** At most one instance says it leads, and only on a valid lease of a running term. */
function checkLeaders(model: Model, world: World): void {
  const leading = model.campaigns.filter((c) => c.slot.live && c.leader.isLeader);
  if (leading.length > 1) world.fail(`${leading.map((c) => c.label).join(' and ')} both say isLeader`);
  for (const c of leading) {
    const term = model.running().find((t) => t.campaign === c);
    if (!term) world.fail(`${c.label} says isLeader with no term's work running`);
  }
  // Candidates idle while the lock is surely free and no term runs: a lost wake-up.
  const candidates = model.campaigns.filter((c) => !c.stopped && c.slot.live && !c.slot.disturbed);
  const running = model.running().filter((t) => t.slot.live);
  const waiting = new Set(candidates.map((c) => c.slot.actor));
  const idle = candidates.length > 0 && running.length === 0 && world.surelyFree(NAME, 'exclusive', undefined, waiting);
  if (idle) {
    world.fail(`${candidates.map((c) => c.label).join(', ')} campaign, no term runs, and ${NAME} has been surely free`);
  }
}

function commands(timing: Timing, virtual: boolean): fc.Arbitrary<Command<Model>>[] {
  const slot = fc.nat({ max: SLOTS - 1 });
  const size = fc.constantFrom<Size>('short', 'long');
  const style: fc.Arbitrary<Style> = fc.oneof(
    fc.constant({ kind: 'stubborn' as const }),
    fc.constantFrom(0, 100, 2 * stopTimeout(timing)).map((delay) => ({ kind: 'cooperative' as const, delay })),
  );
  const showStyle = (s: Style) => (s.kind === 'stubborn' ? 'stubborn' : `settles ${s.delay} ms after its signal`);
  const campaignArb = fc
    .record({ slot, ttl: size, autoExtend: fc.boolean(), style })
    .map(({ slot: i, ttl, autoExtend, style: s }) =>
      command<Model>(`Campaign(${i}, ttl ${ttl}${autoExtend ? '' : ' fixed'}, ${showStyle(s)})`, (m, w) =>
        campaign(m, w, i, { ttl: timing.ttl[ttl], autoExtend, stopTimeout: stopTimeout(timing) }, s),
      ),
    );
  const stopArb = slot.map((i) =>
    command<Model>(`Stop(${i})`, (m, w) => {
      const c = m.campaigns.find((x) => x.slot === w.slot(i) && !x.stopped);
      if (c) stop(m, w, c);
    }),
  );
  const finishArb = fc.tuple(slot, fc.boolean()).map(([i, ok]) =>
    command<Model>(`${ok ? 'Return' : 'Throw'}(${i})`, (m, w) => {
      for (const t of m.running()) if (t.slot === w.slot(i)) t.finish?.(ok);
    }),
  );
  const common = commonCommands<Model>(SLOTS, timing, { crash: virtual });
  const arb = fc.oneof(
    { weight: 4, arbitrary: campaignArb },
    { weight: 3, arbitrary: stopArb },
    { weight: 3, arbitrary: finishArb },
    ...common.map((arbitrary, i) => ({ weight: i === 0 ? 4 : 1, arbitrary })),
  );
  // The leaders' own checks after every command, beside the world's.
  return [
    arb.map((c) => ({
      ...c,
      run: async (m: Model, w: World) => {
        await c.run(m, w);
        checkLeaders(m, w);
        w.throwIfViolated();
      },
      toString: () => c.toString(),
    })),
  ];
}

function spec(lead: Lead, overrides: Partial<ModelSpec<Model>> = {}): ModelSpec<Model> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME] },
    model: () => new Model(lead),
    commands,
    finish: async (model, world) => {
      for (const c of model.campaigns) if (!c.stopped && c.slot.live) stop(model, world, c);
      const bound = stopTimeout(world.timing) + world.margin + world.timing.epsilon;
      await world.until(() => world.tracked.every((t) => t.settled || !t.slot.live), bound);
      for (const t of model.terms) t.finish?.(true);
      await world.clock.settle();
    },
    ...overrides,
  };
}

describe('leader election checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 300);
    await fc.assert(modelProperty(spec(library)), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it('negative control: a leader that releases before its work settled is caught', async () => {
    await expectCaught(
      modelProperty(spec(releasesAtOnce)),
      200,
      /started while term \d+ of leader \d+ of #\d+ still runs|resolved while term \d+.s work runs/,
      'leader releasing before its work settled',
    );
  });

  onRedisInRealTime((real) => spec(library, real));
});
