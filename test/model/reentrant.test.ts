import { AsyncLocalStorage } from 'node:async_hooks';
import fc from 'fast-check';
import { describe, it, vi } from 'vitest';
import type { Leasehold, Lock } from '../../src/index.js';
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
import { operation } from './store.js';

// Each run's Leaseholds' AsyncLocalStorage disabled after it (contexts.ts).
vi.mock('node:async_hooks', async (real) => (await import('./contexts.js')).trackingAsyncHooks(await real()));

/**
 * Reentrant holds against a model. Each reentrant withLock's work is a frame the model drives:
 * from inside it (its own async context) a nested reentrant withLock of the name, possibly right
 * after the event loop was blocked past the lease; its exit (the work returns); an extension.
 * Outer holds are entered from each instance's own context, so an instance's second outer hold
 * is another async context and must wait like anyone else.
 *
 * Invariants:
 * - never two valid leases of the name (holds of one lease share its owner and count once);
 * - no work starts on a lease with no validity left: a nested call on a lease that ran out (a
 *   blocked event loop, no timer ran) or was lost rejects with LockLostError, at once;
 * - a nested hold shares its parent's owner and fencing token, its holdCount is the lease's open
 *   holds; an outer hold is a new lease (holdCount 1, an owner no valid holder has);
 * - the lease ends only when every hold is released: while a frame of it remains the store still
 *   has it (if valid), after the last one it does not;
 * - plus the world's: tokens, bounds, lost wake-ups, an empty store at the end.
 *
 * Negative control: a re-implementation that re-enters a hold not yet released without checking
 * its validity at the call (only a lease already marked lost is refused).
 */

const NAME = 'reentrant';
const SLOTS = 3;

interface HoldOptions {
  readonly ttl: number;
  readonly autoExtend: boolean;
  readonly wait: number;
}

type Work = (signal: AbortSignal, lock: Lock) => Promise<void>;

/** How the model takes a reentrant hold: the library's, or a broken variant. */
type Reentrant = (slot: Slot, options: HoldOptions, work: Work) => Promise<unknown>;

const library: Reentrant = (slot, o, work) => slot.locks.withLock(NAME, { ...o, reentrant: true }, work);

/**
 * Broken: the same reentrancy (a hold carried in the async context, another hold of the lease
 * for a nested call, the lease released with its last hold, a lease marked lost rejected), except
 * that it does not check the lease's validity at the call: "reenter if lock.held" before validity
 * was checked there.
 */
function validityBlind(): Reentrant {
  interface Lease {
    readonly lock: Lock;
    holds: number;
  }
  const contexts = new WeakMap<Leasehold, AsyncLocalStorage<Lease>>();
  /** What the work sees: the lease's lock, with the lease's hold count. */
  const handle = (lease: Lease): Lock =>
    new Proxy(lease.lock, {
      get: (lock, key) => {
        if (key === 'holdCount') return lease.holds;
        const value = Reflect.get(lock, key, lock) as unknown;
        return typeof value === 'function' ? value.bind(lock) : value;
      },
    });
  const run = async (lease: Lease, work: Work): Promise<void> => {
    try {
      await work(lease.lock.signal, handle(lease));
    } finally {
      lease.holds -= 1;
      if (lease.holds === 0) await lease.lock.release().catch(() => undefined);
    }
  };
  return async (slot, o, work) => {
    let context = contexts.get(slot.locks);
    if (!context) {
      context = new AsyncLocalStorage<Lease>();
      contexts.set(slot.locks, context);
    }
    const held = context.getStore();
    if (held && held.holds > 0 && !held.lock.handleReleased) {
      // A lease already marked lost rejects, as the library's; one whose validity ran out unseen does not.
      if (held.lock.lostError) throw held.lock.lostError;
      held.holds += 1;
      return run(held, work);
    }
    const lease: Lease = { lock: await slot.locks.acquire(NAME, o), holds: 1 };
    return context.run(lease, () => run(lease, work));
  };
}

type Instruction = { kind: 'exit' } | { kind: 'nest'; block: number } | { kind: 'extend' };

class Frame {
  readonly id: number;
  readonly slot: Slot;
  readonly lock: Lock;
  readonly parent: Frame | undefined;
  /** The reentrant call of this frame; settles once its work returned and its hold was released. */
  call: Promise<unknown> | undefined;
  exited = false;
  readonly #queue: Instruction[] = [];
  #waiting: ((i: Instruction) => void) | undefined;

  constructor(id: number, slot: Slot, lock: Lock, parent: Frame | undefined) {
    this.id = id;
    this.slot = slot;
    this.lock = lock;
    this.parent = parent;
  }

  send(instruction: Instruction): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    if (waiting) waiting(instruction);
    else this.#queue.push(instruction);
  }

  take(): Promise<Instruction> {
    const next = this.#queue.shift();
    if (next) return Promise.resolve(next);
    return new Promise((resolve) => {
      this.#waiting = resolve;
    });
  }

  toString(): string {
    return `frame ${this.id} of ${this.slot}`;
  }
}

class Model {
  readonly reentrant: Reentrant;
  frames: Frame[] = [];
  seq = 0;

  constructor(reentrant: Reentrant) {
    this.reentrant = reentrant;
  }

  open(slot: Slot): Frame[] {
    return this.frames.filter((f) => f.slot === slot && !f.exited);
  }

  /** Frames of `owner` not exited yet. */
  holds(owner: string): Frame[] {
    return this.frames.filter((f) => !f.exited && f.lock.owner === owner);
  }
}

const valid = (lock: Lock) => lock.expiresIn() > 0 && !lock.signal.aborted;

/** Take a hold (outer from `parent` undefined, nested from inside `parent`'s work). */
function hold(model: Model, world: World, slot: Slot, options: HoldOptions, parent: Frame | undefined): void {
  const id = ++model.seq;
  const label = parent ? `nested hold ${id} in ${parent}` : `outer hold ${id} of ${slot}`;
  // An outer hold must be a new lease: no valid holder's owner, whatever this instance holds. (Not
  // read for a nested call: reading validity would mark a lease that ran out lost before the call.)
  const before = new Set(parent ? [] : world.validHolders(NAME).map((h) => h.lock.owner));
  let started!: (frame: Frame | undefined) => void;
  const start = new Promise<Frame | undefined>((resolve) => {
    started = resolve;
  });
  const work: Work = async (_signal, lock) => {
    world.handOut(slot, NAME, 'exclusive', lock, label);
    const frame = new Frame(id, slot, lock, parent);
    model.frames.push(frame);
    if (parent) {
      if (lock.owner !== parent.lock.owner)
        world.fail(`${label} has owner ${lock.owner}, its parent ${parent.lock.owner}`);
      const open = model.holds(lock.owner).length;
      if (lock.holdCount !== open) world.fail(`${label}: holdCount ${lock.holdCount}, ${open} holds open`);
    } else {
      if (before.has(lock.owner)) world.fail(`${label} re-entered a lease held in another async context`);
      if (lock.holdCount !== 1) world.fail(`${label}: holdCount ${lock.holdCount} on a new lease`);
    }
    started(frame);
    for (;;) {
      const instruction = await frame.take();
      if (instruction.kind === 'exit') return;
      if (instruction.kind === 'extend') {
        const wasValid = valid(lock) && world.outlastsSlack(lock.expiresIn());
        const what = `extend of ${frame}`;
        world.track(what, slot, world.margin, lock.extend(), (r, tr) => {
          // The lease is released once every frame holding it exited.
          const released = model.holds(lock.owner).length === 0;
          if (r.status === 'rejected') world.judgeExtend(what, r.reason, tr, wasValid, released);
        });
        continue;
      }
      // The event loop blocks inside the work, then the work goes on at once: no timer ran.
      if (instruction.block > 0) world.blockNow(instruction.block);
      hold(model, world, slot, options, frame);
    }
  };
  const call = slot.run(() => operation(id, () => model.reentrant(slot, options, work)));
  // Settled without its work starting: a rejection (the race must see it, not a start).
  const settled = call.then(() => undefined);
  // A nested call settles at once (re-entered, or rejected); an outer one within its wait.
  const bound = parent ? 0 : world.acquireBound(options.wait);
  const tracked = world.track(
    label,
    slot,
    bound,
    Promise.race([start, settled]),
    (r, tr) => {
      if (r.status === 'rejected') {
        count(`${parent ? 'nested' : 'outer'} ${(r.reason as { code?: string }).code ?? 'error'}`);
        return world.judgeError(label, r.reason, tr, { timeout: !parent, lost: parent !== undefined });
      }
      const frame = r.value;
      if (frame) frame.call = call;
      count(parent ? 'nested hold' : 'outer hold');
    },
    { wants: parent ? [] : [{ name: NAME, kind: 'exclusive' }], op: id },
  );
  if (parent) tracked.disturbed = true;
}

function exit(model: Model, world: World, frame: Frame): void {
  frame.exited = true;
  const owner = frame.lock.owner;
  const rest = model.holds(owner);
  const label = `exit of ${frame}`;
  frame.send({ kind: 'exit' });
  world.track(label, frame.slot, world.margin, frame.call ?? Promise.resolve(), async (r, tr) => {
    if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, {});
    if (tr.disturbed || world.store === undefined) return;
    const state = await world.store.inspect(NAME);
    if (rest.length === 0 && state.owner === owner)
      world.fail(`${label}: its last hold released, the store still has its lease`);
    const stillValid = rest.some((f) => valid(f.lock));
    if (rest.length > 0 && stillValid && state.owner !== owner) {
      world.fail(`${label}: ${rest.length} holds of its lease remain valid, the store no longer has it`);
    }
  });
}

function commands(timing: Timing, virtual: boolean): fc.Arbitrary<Command<Model>>[] {
  const slot = fc.nat({ max: SLOTS - 1 });
  const size = fc.constantFrom<Size>('short', 'long');
  const options = (ttl: Size, autoExtend: boolean, wait: Size): HoldOptions => ({
    ttl: timing.ttl[ttl],
    autoExtend,
    wait: timing.wait[wait],
  });
  const enter = fc
    .record({ slot, ttl: size, autoExtend: fc.boolean(), wait: size })
    .map(({ slot: i, ttl, autoExtend, wait }) =>
      command<Model>(`Enter(${i}, ttl ${ttl}${autoExtend ? '' : ' fixed'}, wait ${wait})`, (m, w) =>
        hold(m, w, w.slot(i), options(ttl, autoExtend, wait), undefined),
      ),
    );
  const frameOf = (m: Model, w: World, i: number, k: number) => {
    const open = m.open(w.slot(i));
    return open[k % Math.max(1, open.length)];
  };
  const nest = fc
    .tuple(slot, fc.nat(3), fc.constantFrom(0, 0, ...timing.pauses))
    .map(([i, k, block]) =>
      command<Model>(`Nest(${i}, ${k}${block ? `, after a ${block} ms block` : ''})`, (m, w) =>
        frameOf(m, w, i, k)?.send({ kind: 'nest', block }),
      ),
    );
  const leave = fc.tuple(slot, fc.nat(3)).map(([i, k]) =>
    command<Model>(`Exit(${i}, ${k})`, (m, w) => {
      const frame = frameOf(m, w, i, k);
      if (frame) exit(m, w, frame);
    }),
  );
  const extend = fc
    .tuple(slot, fc.nat(3))
    .map(([i, k]) => command<Model>(`Extend(${i}, ${k})`, (m, w) => frameOf(m, w, i, k)?.send({ kind: 'extend' })));
  const common = commonCommands<Model>(SLOTS, timing, { crash: virtual });
  return [
    fc.oneof(
      { weight: 4, arbitrary: enter },
      { weight: 5, arbitrary: nest },
      { weight: 4, arbitrary: leave },
      { weight: 1, arbitrary: extend },
      ...common.map((arbitrary, i) => ({ weight: i === 0 ? 4 : 1, arbitrary })),
    ),
  ];
}

function spec(reentrant: () => Reentrant, overrides: Partial<ModelSpec<Model>> = {}): ModelSpec<Model> {
  return {
    backend: memory,
    timing: VIRTUAL,
    world: { slots: SLOTS, names: [NAME] },
    model: () => new Model(reentrant()),
    commands,
    finish: async (model, world) => {
      // Innermost first: every work of a live instance returns.
      for (const frame of [...model.frames].reverse()) if (!frame.exited && frame.slot.live) exit(model, world, frame);
      await world.clock.settle();
    },
    ...overrides,
  };
}

describe('reentrant holds checked against a model', () => {
  it('memory store, virtual clock', async () => {
    const numRuns = Number(process.env.MODEL_RUNS ?? 300);
    await fc.assert(modelProperty(spec(() => library)), params(numRuns));
    if (process.env.MODEL_STATS) console.info(takeStats());
  });

  it('negative control: re-entering a hold without checking its validity is caught', async () => {
    await expectCaught(
      modelProperty(spec(validityBlind)),
      200,
      /reached user code with no validity left/,
      'reentrant hold re-entered without its validity',
    );
  });

  onRedisInRealTime((real) => spec(() => library, real));
});
