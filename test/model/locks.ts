import fc from 'fast-check';
import type { Lock, TryAcquireOptions } from '../../src/index.js';
import {
  type Command,
  command,
  commonCommands,
  count,
  type Holder,
  type Kind,
  pick,
  type Size,
  type Slot,
  type Timing,
  type Tracked,
  type World,
} from './harness.js';
import { operation } from './store.js';

/**
 * The model of one lock name taken by a few instances as a mutex, a semaphore's permits or a
 * read-write lock's shared and exclusive holds: random acquisitions (acquire / tryAcquire, or
 * withLock / tryWithLock whose work the model ends), releases, extensions, aborted waits, beside
 * the world's common faults. Besides the world's invariants it expects: a release of a lock still
 * valid (its instance's net undisturbed) answers true; an extension of one succeeds; a refused try
 * (undisturbed) found the lock not surely free.
 */

export interface LockModelConfig {
  readonly name: string;
  /** The kinds of hold the commands ask for. */
  readonly kinds: readonly Kind[];
  /** A semaphore's permits (kind 'permit'). */
  readonly limit?: number;
}

interface Held {
  readonly holder: Holder;
  readonly slot: Slot;
  readonly lock: Lock;
  /** withLock: lets the work return; the call then releases. */
  readonly finish?: () => void;
  /** withLock: the call itself. */
  readonly call?: Promise<unknown>;
  /** The model released it (or let its withLock work return). */
  released?: true;
}

/** An acquisition that waits, with the operation id its store commands are logged under. */
interface Waiter {
  readonly tracked: Tracked;
  readonly op: number;
  readonly kind: Kind;
}

interface Waiting {
  readonly tracked: Tracked;
  readonly slot: Slot;
  readonly abort: AbortController;
  readonly reason: Error;
}

export class LockModel {
  readonly config: LockModelConfig;
  held: Held[] = [];
  waiting: Waiting[] = [];
  waiters: Waiter[] = [];
  seq = 0;

  constructor(config: LockModelConfig) {
    this.config = config;
  }

  /** End every work and release every lock a live instance holds. */
  async finish(world: World): Promise<void> {
    for (const h of this.held.splice(0)) {
      if (!h.slot.live) {
        h.finish?.();
        continue;
      }
      release(world, h);
    }
    await world.clock.settle();
  }
}

function optionsFor(kind: Kind, ttl: number, autoExtend: boolean, limit: number | undefined): TryAcquireOptions {
  if (kind === 'shared') return { ttl, autoExtend, mode: 'shared' };
  if (kind === 'permit') return { ttl, autoExtend, limit: limit ?? 1 };
  return { ttl, autoExtend };
}

const valid = (lock: Lock) => lock.expiresIn() > 0 && !lock.signal.aborted;

interface AcquireArgs {
  readonly slot: number;
  readonly kind: Kind;
  readonly ttl: Size;
  readonly autoExtend: boolean;
  readonly wait: 0 | Size;
  readonly via: 'acquire' | 'withLock';
  readonly abortable: boolean;
}

function showAcquire(a: AcquireArgs): string {
  const abort = a.abortable && a.wait !== 0 ? ', abortable' : '';
  return `Acquire(${a.slot}, ${a.kind}, ${a.via}, ttl ${a.ttl}${a.autoExtend ? '' : ' fixed'}, wait ${a.wait}${abort})`;
}

function acquire(model: LockModel, world: World, a: AcquireArgs): void {
  const { name, limit } = model.config;
  const slot = world.slot(a.slot);
  const t = world.timing;
  const ttl = t.ttl[a.ttl];
  const wait = a.wait === 0 ? 0 : t.wait[a.wait];
  const op = ++model.seq;
  const label = `${a.kind} ${a.via} ${op} of ${slot}`;
  const options = optionsFor(a.kind, ttl, a.autoExtend, limit);
  const abort = a.abortable && wait > 0 ? new AbortController() : undefined;
  const reason = new Error(`aborted ${label}`);
  const signal = abort ? { signal: abort.signal } : {};
  // Judged as the try is sent: its own attempt then counts as activity on the name.
  const free = wait === 0 && world.surelyFree(name, a.kind);
  const refused = (tracked: Tracked) => {
    count('try refused');
    if (!tracked.disturbed && free) world.fail(`${label} was refused while ${name} was surely free for it`);
  };
  const wants = [{ name, kind: a.kind }];
  const allowed = { timeout: wait > 0, abort: abort ? reason : undefined };
  let tracked: Tracked;
  if (a.via === 'acquire') {
    const call = slot.run(() =>
      operation(op, () =>
        wait === 0 ? slot.locks.tryAcquire(name, options) : slot.locks.acquire(name, { ...options, wait, ...signal }),
      ),
    );
    tracked = world.track(
      label,
      slot,
      world.acquireBound(wait),
      call,
      (r, tr) => {
        model.waiting = model.waiting.filter((w) => w.tracked !== tr);
        if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, allowed);
        if (r.value === null) return refused(tr);
        const holder = world.handOut(slot, name, a.kind, r.value, label);
        if (a.kind === 'shared') writerFirst(model, world, op, label);
        model.held.push({ holder, slot, lock: r.value });
      },
      { wants, op },
    );
  } else {
    let started!: (lock: Lock | undefined) => void;
    const start = new Promise<Lock | undefined>((resolve) => {
      started = resolve;
    });
    let finish!: () => void;
    const done = new Promise<void>((resolve) => {
      finish = resolve;
    });
    let call: Promise<unknown> | undefined;
    const work = async (_signal: AbortSignal, lock: Lock) => {
      // The check inside the work: the lock it runs on has validity left.
      const holder = world.handOut(slot, name, a.kind, lock, label);
      if (a.kind === 'shared') writerFirst(model, world, op, label);
      model.held.push({ holder, slot, lock, finish, call: call as Promise<unknown> });
      started(lock);
      await done;
    };
    call = slot.run(() =>
      operation(op, () =>
        wait === 0
          ? slot.locks.tryWithLock(name, options, work)
          : slot.locks.withLock(name, { ...options, wait, ...signal }, work),
      ),
    );
    // The acquisition ends when the work starts, or when the call settles without running it.
    const acquired = Promise.race([start, call]);
    tracked = world.track(
      label,
      slot,
      world.acquireBound(wait),
      acquired,
      (r, tr) => {
        model.waiting = model.waiting.filter((w) => w.tracked !== tr);
        if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, allowed);
        const value = r.value as Lock | { ran: boolean } | undefined;
        if (value && 'ran' in value && !value.ran) refused(tr);
      },
      { wants, op },
    );
  }
  if (abort) model.waiting.push({ tracked, slot, abort, reason });
  if (wait > 0) model.waiters.push({ tracked, op, kind: a.kind });
}

/**
 * Writers are not starved: a shared hold is never granted to a request that came after an
 * exclusive waiter had queued (its attempt refused and queued), while that waiter still waits
 * (it has not left the queue), undisturbed. By the store's log, so on the virtual clock only.
 */
function writerFirst(model: LockModel, world: World, op: number, label: string): void {
  if (!world.exactLog) return;
  const entries = world.log.entries;
  const mine = entries.find((e) => e.operation === op);
  if (!mine) return;
  model.waiters = model.waiters.filter((w) => !w.tracked.settled);
  for (const w of model.waiters) {
    if (w.kind !== 'exclusive' || w.tracked.disturbed || !w.tracked.slot.live) continue;
    // Gave up: it left the queue (its leave may wake the shared waiters behind it at once).
    if (entries.some((e) => e.operation === w.op && e.op === 'leave')) continue;
    const queued = entries.find(
      (e) => e.operation === w.op && e.queues && e.done && (e.reply as { acquired?: boolean }).acquired === false,
    );
    if (queued && queued.seq < mine.seq) {
      world.fail(`${label} was granted past ${w.tracked.label}, an exclusive waiter queued before it asked`);
    }
  }
}

function release(world: World, h: Held): void {
  const { slot } = h;
  const wasValid = valid(h.lock);
  const label = `release of ${h.holder.label}`;
  h.released = true;
  if (h.finish) {
    h.finish();
    world.track(label, slot, world.margin, h.call as Promise<unknown>, (r, tr) => {
      if (r.status === 'rejected') world.judgeError(label, r.reason, tr, {});
    });
    return;
  }
  world.track(
    label,
    slot,
    world.margin,
    slot.run(() => h.lock.release()),
    (r, tr) => {
      if (r.status === 'rejected') return world.judgeError(label, r.reason, tr, {});
      if (wasValid && !tr.disturbed && r.value !== true)
        world.fail(`${label}, valid when released, answered ${r.value}`);
    },
  );
}

export function acquireCommand(a: AcquireArgs): Command<LockModel> {
  return command<LockModel>(showAcquire(a), (m, w) => acquire(m, w, a));
}

export function releaseCommand(i: number, k: number): Command<LockModel> {
  return command<LockModel>(`Release(${i}, ${k})`, (m, w) => {
    const h = pick(m.held, w.slot(i), k);
    if (!h) return;
    m.held = m.held.filter((x) => x !== h);
    release(w, h);
  });
}

export function lockCommands(
  config: LockModelConfig,
  slots: number,
  timing: Timing,
  virtual: boolean,
): fc.Arbitrary<Command<LockModel>>[] {
  const slot = fc.nat({ max: slots - 1 });
  const size = fc.constantFrom<Size>('short', 'long');
  const acquireArb = fc
    .record({
      slot,
      kind: fc.constantFrom(...config.kinds),
      ttl: size,
      autoExtend: fc.boolean(),
      wait: fc.constantFrom<0 | Size>(0, 'short', 'long'),
      via: fc.constantFrom<'acquire' | 'withLock'>('acquire', 'withLock'),
      abortable: fc.boolean(),
    })
    .map(acquireCommand);
  const releaseArb = fc.tuple(slot, fc.nat(3)).map(([i, k]) => releaseCommand(i, k));
  const extendArb = fc.tuple(slot, fc.nat(3)).map(([i, k]) =>
    command<LockModel>(`Extend(${i}, ${k})`, (m, w) => {
      const h = pick(m.held, w.slot(i), k);
      if (!h) return;
      const wasValid = valid(h.lock) && w.outlastsSlack(h.lock.expiresIn());
      const label = `extend of ${h.holder.label}`;
      w.track(
        label,
        h.slot,
        w.margin,
        h.slot.run(() => h.lock.extend()),
        (r, tr) => {
          if (r.status === 'rejected') w.judgeExtend(label, r.reason, tr, wasValid, h.released === true);
        },
      );
    }),
  );
  const abortArb = fc.tuple(slot, fc.nat(3)).map(([i, k]) =>
    command<LockModel>(`Abort(${i}, ${k})`, (m, w) => {
      const waiting = pick(
        m.waiting.filter((x) => !x.tracked.settled),
        w.slot(i),
        k,
      );
      if (!waiting) return;
      // Aborted, it settles within the margin: an attempt in flight, a give-back, a leave.
      waiting.tracked.deadline = Math.min(waiting.tracked.deadline, w.clock.now() + w.margin + w.timing.epsilon);
      waiting.abort.abort(waiting.reason);
    }),
  );
  const common = commonCommands<LockModel>(slots, timing, { crash: virtual });
  return [
    fc.oneof(
      { weight: 6, arbitrary: acquireArb },
      { weight: 4, arbitrary: releaseArb },
      { weight: 1, arbitrary: extendArb },
      { weight: 1, arbitrary: abortArb },
      ...common.map((arbitrary, i) => ({ weight: i === 0 ? 4 : 1, arbitrary })),
    ),
  ];
}
