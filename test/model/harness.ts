import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, it, describe as suite } from 'vitest';
import { DEFAULTS } from '../../src/core/defaults.js';
import {
  ErrorCode,
  Leasehold,
  LockError,
  LockLostError,
  LockTimeoutError,
  MemoryStore,
  StoreUnavailableError,
} from '../../src/index.js';
import type { HandOff, Store } from '../../src/store/port.js';
import { resolveStore } from '../../src/store/registry.js';
import { storeSettings } from '../../src/store/settings.js';
import { POSTGRES_SETTINGS, testPool } from '../contract/postgres.js';
import { type PostgresServer, randomPrefix, startPostgres } from '../harness/index.js';
import { leftBehind, TimerWatch } from '../harness/leaks.js';
import { suiteRedis } from '../unit/primitives/redis-fixture.js';
import { Actor, type Clock, currentActor, RealClock, VirtualClock } from './clock.js';
import { releaseContexts, trackContexts } from './contexts.js';
import { type Broken, type Entry, FaultyStore, type Inspectable, type Net, NORMAL, StoreLog } from './store.js';

/**
 * The world a model runs in: a few Leasehold instances (slots) over one store, each behind its own
 * FaultyStore, on a clock the run controls. It keeps what every invariant needs:
 *
 * - holders: every lock handed to user code, checked as it is handed out (validity left, not
 *   aborted; no more valid holders of the name than its kind admits; fencing tokens above those
 *   handed out before) — the number of valid holders only grows at a hand-out, so this is where
 *   it peaks;
 * - tracked calls: each must settle within its bound (its wait plus a margin from
 *   commandTimeout, plus the time its instance was stopped), with an outcome its situation allows;
 * - the store's log: grants in the store's order must carry increasing tokens, and a try must win
 *   a lock that is surely free;
 * - the end: every instance closed and every lease run out, the store holds nothing.
 *
 * A violation is recorded with the clock's time and fails the command that was running.
 *
 * Knobs for exploring (none is needed to run the tests): MODEL_RUNS sets the runs of each model's
 * main property, MODEL_SEED replays a seed, MODEL_STATS=1 prints what the runs came to,
 * MODEL_TRACE=1 prints each command as it runs, MODEL_SLOW=<ms> prints the runs that took longer.
 */

export interface Timing {
  readonly ttl: { readonly short: number; readonly long: number };
  readonly wait: { readonly short: number; readonly long: number };
  readonly commandTimeout: number;
  /** Network delays a `late` net picks from. */
  readonly delays: readonly number[];
  /** Steps of time an Advance picks from. */
  readonly steps: readonly number[];
  /** How long a Pause or a Block lasts. */
  readonly pauses: readonly number[];
  /** Slack in every bound: timer rounding (virtual), scheduling on a busy machine (real). */
  readonly epsilon: number;
  /** How long the end waits for every lease and waiter entry to run out. */
  readonly drain: number;
}

/** The memory store on the virtual clock: commandTimeout 200 ms, leases of 300 ms and 2 s. */
export const VIRTUAL: Timing = Object.freeze({
  ttl: { short: 300, long: 2_000 },
  wait: { short: 150, long: 1_000 },
  commandTimeout: 200,
  delays: [40, 120, 320],
  steps: [10, 100, 350, 1_500],
  pauses: [150, 400, 2_500],
  epsilon: 10,
  drain: 60_000,
});

/** A real redis-server in real time: shorter, and a wider slack for a busy machine. */
export const REAL: Timing = Object.freeze({
  ttl: { short: 120, long: 700 },
  wait: { short: 80, long: 400 },
  commandTimeout: 300,
  delays: [15, 60, 400],
  steps: [10, 60, 200],
  pauses: [60, 180],
  epsilon: 400,
  drain: 1_200,
});

/** Commands per real-time run: a real run spends real seconds. */
export const REAL_COMMANDS = 12;

export type Size = 'short' | 'long';
export type Kind = 'exclusive' | 'shared' | 'permit';

/** What the invariants read of a held lock: its public surface only. */
export interface LeaseView {
  readonly owner: string;
  readonly fencingToken: number;
  readonly signal: AbortSignal;
  expiresIn(): number;
}

export interface Holder {
  readonly id: number;
  readonly slot: Slot;
  readonly name: string;
  readonly kind: Kind;
  readonly lock: LeaseView;
  readonly label: string;
}

/** One instance's store: it counts the subscriptions the instance holds open through it. */
class SlotStore extends FaultyStore {
  listening = 0;

  override async watch(name: string, onHandOff: (handOff: HandOff) => void): Promise<() => void> {
    const unwatch = await super.watch(name, onHandOff);
    this.listening += 1;
    let open = true;
    return () => {
      if (open) this.listening -= 1;
      open = false;
      unwatch();
    };
  }
}

/** One Leasehold instance of the run. */
export class Slot {
  readonly index: number;
  readonly actor: Actor;
  readonly locks: Leasehold;
  readonly store: SlotStore;
  closed = false;
  /** The net was not normal, or it was stopped, at some point: calls may fail as unavailable. */
  disturbed = false;

  constructor(index: number, actor: Actor, locks: Leasehold, store: SlotStore) {
    this.index = index;
    this.actor = actor;
    this.locks = locks;
    this.store = store;
  }

  get live(): boolean {
    return !this.closed && !this.actor.dead;
  }

  /** Run `fn` as this instance. */
  run<T>(fn: () => T): T {
    return this.actor.run(fn);
  }

  toString(): string {
    return `#${this.actor.id}`;
  }
}

/** A call of user code that must settle within a bound. */
export interface Tracked {
  readonly label: string;
  readonly slot: Slot;
  readonly started: number;
  deadline: number;
  settled: boolean;
  /** Its instance's net was not normal, or it was stopped, while it ran. */
  disturbed: boolean;
  /** What it waits for (an acquisition that waits), for the idle-waiter check. */
  readonly wants: readonly Want[];
  /** The model operation its store commands are logged under (store.ts operation()), if any. */
  readonly op: number | undefined;
}

/**
 * A lease by the store's log: when it ends (or ended), whether a release ended it, and the grant
 * that began it (its log entry's seq, and whether it went to a waiter queued already).
 */
interface Lease {
  end: number;
  readonly exclusive: boolean;
  released: boolean;
  readonly seq: number;
  readonly member: boolean;
}

interface Ledger {
  readonly leases: Map<string, Lease>;
  readonly queued: Map<string, number>;
  /** When the last command on the name ran. */
  readonly last: number;
}

/** A lock an acquisition waits for, and as what. */
export interface Want {
  readonly name: string;
  readonly kind: Kind;
}

export interface Backend {
  clock(): Clock;
  open(): Promise<Opened>;
}

export interface Opened {
  /** A store for one more instance. */
  inner(): Store;
  /** The store itself, for the final checks. */
  readonly inspect: Inspectable;
  /** Whether the log sees every grant (the memory store: yes; Redis grants some inside releases). */
  readonly exactLog: boolean;
  close(): Promise<void>;
}

/** The memory store on the virtual clock. */
export const memory: Backend = {
  clock: () => new VirtualClock(),
  open: async () => {
    const store = new MemoryStore().bind(storeSettings({ prefix: 'model' }));
    return { inner: () => store, inspect: store, exactLog: true, close: async () => {} };
  },
};

/** A server's connection for one instance (a client or a pool), with the store on it. */
interface Connected {
  readonly store: Store;
  end(): unknown;
}

/**
 * A real server: a connection of its own per instance (`connect`), a fresh prefix per run. The
 * first store makes the prefix's schema, where a backend has one, before the run's time begins.
 */
function perInstance(connect: (prefix: string) => Connected): Backend {
  return {
    clock: () => new RealClock(),
    open: async () => {
      const prefix = randomPrefix();
      const opened: Connected[] = [];
      const make = () => {
        const connected = connect(prefix);
        opened.push(connected);
        return connected.store;
      };
      const inspect = make() as Store & Inspectable;
      await inspect.inspect('warm-up');
      return {
        inner: make,
        inspect,
        exactLog: false,
        close: async () => {
          await Promise.all(opened.map((o) => o.store.close().catch(() => undefined)));
          await Promise.all(opened.map(async (o) => o.end()));
        },
      };
    },
  };
}

const settingsOf = (prefix: string) => ({ ...storeSettings({ prefix }), onError: () => {} });

/** A real redis-server: one ioredis client per instance. */
export function redis(server: () => { host: string; port: number }): Backend {
  return perInstance((prefix) => {
    const { host, port } = server();
    const client = new Redis(port, host);
    return { store: resolveStore(client, settingsOf(prefix)).store, end: () => client.disconnect() };
  });
}

/**
 * A real PostgreSQL: a pg pool of its own per instance, so each store keeps its own quiet names
 * (postgres-store.ts).
 */
export function postgres(server: () => PostgresServer): Backend {
  return perInstance((prefix) => {
    const pool = testPool(server(), { max: 2 });
    return { store: resolveStore(pool, settingsOf(prefix)).store, end: () => pool.end().catch(() => undefined) };
  });
}

export interface WorldOptions {
  readonly slots: number;
  readonly names: readonly string[];
  /** A semaphore's permits, for the count of valid holders of kind 'permit'. */
  readonly limit?: number;
  readonly broken?: Broken;
}

let actors = 0;

/** ms between two checks while time passes with no timer firing. */
const CHECK_EVERY = 50;

/** What the runs came to, summed over every run of a process: shows a model reaches what it means to. */
export const stats = new Map<string, number>();

export function count(what: string): void {
  stats.set(what, (stats.get(what) ?? 0) + 1);
}

/** The counts so far, for a test to print (MODEL_STATS=1) and then forget. */
export function takeStats(): string {
  const text = [...stats].map(([k, v]) => `${k}: ${v}`).join(', ');
  stats.clear();
  return text;
}

export class World {
  readonly clock: Clock;
  readonly timing: Timing;
  readonly log = new StoreLog();
  readonly slots: Slot[] = [];
  readonly everyone: Slot[] = [];
  readonly holders: Holder[] = [];
  readonly tracked: Tracked[] = [];
  readonly violations: string[] = [];
  readonly options: WorldOptions;
  /** The wall clock when the run began (fixed under the virtual clock). */
  readonly epoch = Date.now();
  /** The monotonic clock when the run began: violations say when, from here. */
  readonly #origin: number;
  readonly #opened: Opened;
  /** The library's timers, by the actor that set them. */
  readonly #timers = new TimerWatch(currentActor);
  #holderIds = 0;
  /** Per name: the highest token handed out, and the highest handed to an exclusive holder. */
  readonly #tokens = new Map<string, { all: number; exclusive: number }>();
  /** Per name, the token of each owner handed out (reentrant holds share one). */
  readonly #owners = new Map<string, Map<string, number>>();
  /** How far the log's token check has read. */
  #checked = 0;
  readonly #fences = new Map<string, { max: number; byOwner: Map<string, number> }>();

  private constructor(clock: Clock, timing: Timing, opened: Opened, options: WorldOptions) {
    this.clock = clock;
    this.timing = timing;
    this.#opened = opened;
    this.options = options;
    this.#origin = clock.now();
  }

  static async open(backend: Backend, timing: Timing, options: WorldOptions): Promise<World> {
    const clock = backend.clock();
    clock.install();
    trackContexts();
    let world: World | undefined;
    try {
      world = new World(clock, timing, await backend.open(), options);
      const opened = world;
      if (clock instanceof VirtualClock) {
        clock.onTimer = () => opened.checkBounds();
        clock.onError = (error) => opened.fail(`a timer threw: ${String(error)}`);
      }
      for (let i = 0; i < options.slots; i++) opened.slots.push(opened.#newSlot(i));
      return opened;
    } catch (error) {
      if (world) world.#timers.stop();
      clock.uninstall();
      throw error;
    }
  }

  /** The store itself, not through any wrapper. */
  get store(): Inspectable {
    return this.#opened.inspect;
  }

  get exactLog(): boolean {
    return this.#opened.exactLog && this.clock.virtual;
  }

  #newSlot(index: number): Slot {
    const actor = new Actor(++actors);
    const store = new SlotStore(this.#opened.inner(), actor, this.clock, this.log, this.options.broken);
    const t = this.timing;
    const locks = actor.run(
      () =>
        new Leasehold(store, {
          commandTimeout: t.commandTimeout,
          ttl: t.ttl.long,
          wait: t.wait.long,
          instance: `slot${index}:${actor.id}`,
        }),
    );
    const slot = new Slot(index, actor, locks, store);
    this.everyone.push(slot);
    return slot;
  }

  /** The instance in slot `i` now (a closed or killed one is replaced by a new one). */
  slot(i: number): Slot {
    return this.slots[i % this.slots.length] as Slot;
  }

  /** ms since the run began. */
  elapsed(): number {
    return Math.round(this.clock.now() - this.#origin);
  }

  fail(message: string): void {
    this.violations.push(`at ${this.elapsed()} ms: ${message}`);
  }

  /** Throw the first violation, if any. */
  throwIfViolated(): void {
    if (this.violations.length > 0) throw new Error(this.violations.join('\n'));
  }

  // --- holders ---------------------------------------------------------------------------------

  /** A lock reaches user code: check it, and every other holder of its name, now. */
  handOut(slot: Slot, name: string, kind: Kind, lock: LeaseView, label: string): Holder {
    const holder: Holder = { id: ++this.#holderIds, slot, name, kind, lock, label };
    const now = `${label} (token ${lock.fencingToken})`;
    if (!(lock.expiresIn() > 0) || lock.signal.aborted) {
      this.fail(
        `${now} reached user code with no validity left (expiresIn ${lock.expiresIn()}, aborted ${lock.signal.aborted})`,
      );
    }
    count(`handed out ${kind}`);
    this.#checkToken(holder);
    this.holders.push(holder);
    this.checkHolders(name, `as ${now} was handed out`);
    return holder;
  }

  #checkToken(h: Holder): void {
    let owners = this.#owners.get(h.name);
    if (!owners) {
      owners = new Map();
      this.#owners.set(h.name, owners);
    }
    const earlier = owners.get(h.lock.owner);
    if (earlier !== undefined) {
      if (earlier !== h.lock.fencingToken) {
        this.fail(
          `${h.label}: another hold of owner ${h.lock.owner} has token ${earlier}, this one ${h.lock.fencingToken}`,
        );
      }
      return;
    }
    owners.set(h.lock.owner, h.lock.fencingToken);
    const seen = this.#tokens.get(h.name) ?? { all: 0, exclusive: 0 };
    const floor = h.kind === 'exclusive' ? seen.all : seen.exclusive;
    if (h.lock.fencingToken <= floor) {
      this.fail(`${h.label}: token ${h.lock.fencingToken} not above ${floor}, handed out before for ${h.name}`);
    }
    seen.all = Math.max(seen.all, h.lock.fencingToken);
    if (h.kind === 'exclusive') seen.exclusive = Math.max(seen.exclusive, h.lock.fencingToken);
    this.#tokens.set(h.name, seen);
  }

  /** Holders of `name` whose lease is valid on their own view, one per owner. */
  validHolders(name: string): Holder[] {
    const byOwner = new Map<string, Holder>();
    for (const h of this.holders) {
      if (h.name !== name || byOwner.has(h.lock.owner)) continue;
      if (h.lock.expiresIn() > 0 && !h.lock.signal.aborted) byOwner.set(h.lock.owner, h);
    }
    return [...byOwner.values()];
  }

  /** Never more valid holders of `name` than its kind admits. */
  checkHolders(name: string, when: string): void {
    const valid = this.validHolders(name);
    const exclusive = valid.filter((h) => h.kind === 'exclusive');
    const permits = valid.filter((h) => h.kind === 'permit');
    const list = () =>
      valid.map((h) => `${h.label} (token ${h.lock.fencingToken}, ${h.lock.expiresIn()} ms left)`).join(', ');
    if (exclusive.length > 0 && valid.length > 1) {
      this.fail(`${valid.length} valid holders of ${name} with an exclusive one among them ${when}: ${list()}`);
    }
    const limit = this.options.limit;
    if (limit !== undefined && permits.length > limit) {
      this.fail(`${permits.length} valid holders of the ${limit} permits of ${name} ${when}: ${list()}`);
    }
  }

  // --- tracked calls ---------------------------------------------------------------------------

  /**
   * Track `promise`, a call of `slot` that must settle within `bound` ms (plus epsilon and any
   * time its instance is stopped meanwhile). `onSettled` judges the outcome.
   */
  track<T>(
    label: string,
    slot: Slot,
    bound: number,
    promise: Promise<T>,
    onSettled: (result: PromiseSettledResult<T>, tracked: Tracked) => void,
    { wants = [], op }: { wants?: readonly Want[]; op?: number } = {},
  ): Tracked {
    const now = this.clock.now();
    const tracked: Tracked = {
      label,
      slot,
      started: now,
      deadline: now + bound + this.timing.epsilon,
      settled: false,
      disturbed: slot.store.net.kind !== 'normal',
      wants,
      op,
    };
    this.tracked.push(tracked);
    promise.then(
      (value) => this.#settled(tracked, { status: 'fulfilled', value }, onSettled),
      (reason: unknown) => this.#settled(tracked, { status: 'rejected', reason }, onSettled),
    );
    return tracked;
  }

  #settled<T>(
    tracked: Tracked,
    result: PromiseSettledResult<T>,
    onSettled: (result: PromiseSettledResult<T>, tracked: Tracked) => void,
  ): void {
    tracked.settled = true;
    const late = this.clock.now() - tracked.deadline;
    if (late > 0) this.fail(`${tracked.label} settled ${Math.round(late)} ms past its bound`);
    try {
      onSettled(result, tracked);
    } catch (error) {
      this.fail(`${tracked.label}: ${String(error)}`);
    }
  }

  /**
   * Calls of live instances still unsettled past their bound; and waiters still parked while
   * what they wait for has been surely free for a reservation's length (only they wait for it,
   * so a release would have woken them, an expiry their timer): a lost wake-up.
   */
  checkBounds(): void {
    const now = this.clock.now();
    for (const t of this.tracked) {
      if (t.settled || t.slot.actor.dead) continue;
      if (now > t.deadline) {
        t.settled = true;
        const took = Math.round(now - t.started);
        this.fail(
          `${t.label} still unsettled ${took} ms after it began (bound ${Math.round(t.deadline - t.started)} ms)`,
        );
        continue;
      }
      if (t.wants.length === 0 || t.disturbed || t.slot.closed) continue;
      if (t.wants.every((w) => this.surelyFree(w.name, w.kind, t))) {
        t.disturbed = true;
        const names = t.wants.map((w) => w.name).join(', ');
        this.fail(`${t.label} still waits though ${names} has been surely free for ${DEFAULTS.reservation} ms`);
      }
    }
  }

  /**
   * Whether a lease with `expiresIn` ms of validity left outlasts the timing's slack: only then must
   * an extension sent now be confirmed before it runs out (on a busy machine, in real time, a
   * round trip may take that slack).
   */
  outlastsSlack(expiresIn: number): boolean {
    return expiresIn > this.timing.epsilon;
  }

  /**
   * What a call may take beyond its own wait: an attempt in flight, the give-back of a grant
   * nobody will use, and the leave of the queue, each bounded by commandTimeout.
   */
  get margin(): number {
    return 3 * this.timing.commandTimeout;
  }

  /** The bound of an acquisition that waits `wait` ms (its first attempt and its subscription come first). */
  acquireBound(wait: number): number {
    return Math.max(wait, 2 * this.timing.commandTimeout) + this.margin;
  }

  /** An error an acquisition may reject with, given what happened to it; otherwise a violation. */
  judgeError(
    label: string,
    error: unknown,
    tracked: Tracked,
    allowed: { timeout?: boolean; abort?: unknown; lost?: boolean },
  ): void {
    count(error instanceof LockError ? error.code : error === allowed.abort ? 'aborted' : 'other error');
    if (allowed.timeout && error instanceof LockTimeoutError) return;
    if (allowed.abort !== undefined && error === allowed.abort) return;
    if (allowed.lost && error instanceof LockError && error.code === ErrorCode.LOCK_LOST) return;
    if (error instanceof LockError && error.code === ErrorCode.CLOSED && tracked.slot.closed) return;
    if (error instanceof StoreUnavailableError && this.mayBeUnavailable(tracked)) return;
    this.fail(`${label} rejected with ${describe(error)}`);
  }

  /**
   * An extension that was rejected. A hold valid when extended, its call undisturbed, must not be
   * refused, unless the hold was released while the extension waited: an extension waits for the
   * watchdog's one in flight, a release sent meanwhile goes first, and the extension then finds the
   * lease released (`released`: the model released it before the extension settled).
   */
  judgeExtend(label: string, error: unknown, tracked: Tracked, wasValid: boolean, released: boolean): void {
    const releasedFirst = released && error instanceof LockLostError && error.reason === 'released';
    if (wasValid && !tracked.disturbed && !releasedFirst) {
      this.fail(`${label}, valid when extended, rejected with ${describe(error)}`);
    } else this.judgeError(label, error, tracked, { lost: true });
  }

  /**
   * Whether the store may have been unavailable to a call: its net was disturbed, or the clock is
   * real, where a busy machine is a disturbance of its own (a call may outlast commandTimeout).
   */
  mayBeUnavailable(tracked: Tracked): boolean {
    return tracked.disturbed || !this.clock.virtual;
  }

  // --- disturbances ----------------------------------------------------------------------------

  #disturb(slots: readonly Slot[], ms: number): void {
    for (const slot of slots) slot.disturbed = true;
    for (const t of this.tracked) {
      if (t.settled || !slots.includes(t.slot)) continue;
      t.disturbed = true;
      t.deadline += ms;
    }
  }

  setNet(slot: Slot, net: Net): void {
    slot.store.net = net;
    if (net.kind !== 'normal') this.#disturb([slot], 0);
  }

  async pause(slot: Slot, ms: number, wake: 'timers-first' | 'replies-first'): Promise<void> {
    // The real clock stops the whole process: every instance.
    this.#disturb(this.clock.virtual ? [slot] : this.everyone, ms);
    await this.clock.pause(slot.actor, ms, wake);
  }

  /** The event loop blocked for `ms`: time passes for everyone and nothing runs. */
  async block(ms: number): Promise<void> {
    this.blockNow(ms);
    await this.clock.advance(0);
  }

  /** The synchronous part of a block: user code that runs on at once afterwards sees the time passed and no timer run. */
  blockNow(ms: number): void {
    this.#disturb(this.everyone, ms);
    this.clock.block(ms);
  }

  /** Let `ms` pass, checking at least every CHECK_EVERY ms (a waiter left idle is seen when it is). */
  async advance(ms: number): Promise<void> {
    let left = ms;
    do {
      const waiting = this.tracked.some((t) => !t.settled && t.wants.length > 0 && !t.slot.actor.dead);
      const step = waiting ? Math.min(left, CHECK_EVERY) : left;
      await this.clock.advance(step);
      this.checkBounds();
      left -= step;
    } while (left > 0);
  }

  /** Close the instance in slot `i` without releasing anything it holds; a new one takes its place. */
  close(i: number, replace = true): void {
    const slot = this.slot(i);
    slot.closed = true;
    if (replace) this.slots[slot.index] = this.#newSlot(slot.index);
    // Parked waiters reject at once; one attempt in flight, its give-back and its leave remain.
    this.track(
      `close of ${slot}`,
      slot,
      this.margin,
      slot.run(() => slot.locks.close()),
      (r) => {
        if (r.status === 'rejected') this.fail(`close of ${slot} rejected with ${describe(r.reason)}`);
      },
    );
  }

  /** Kill the instance in slot `i`: nothing of it runs again, its locks and queue entries stay until they run out. */
  crash(i: number): void {
    const slot = this.slot(i);
    slot.actor.kill();
    this.slots[slot.index] = this.#newSlot(slot.index);
  }

  /** After each command: let things settle, then check the bounds and throw any violation. */
  async afterCommand(): Promise<void> {
    await this.clock.settle();
    this.checkBounds();
    if (this.exactLog) this.#checkLogTokens();
    this.throwIfViolated();
  }

  // --- the store's log ---------------------------------------------------------------------------

  /** Grants in the store's order: each token above every earlier one of the name, or the same owner's again. */
  #checkLogTokens(): void {
    const entries = this.log.entries;
    for (; this.#checked < entries.length; this.#checked++) {
      const e = entries[this.#checked] as Entry;
      if (!e.done) break;
      const fence = grantedFence(e);
      if (fence === undefined || e.owner === undefined) continue;
      let seen = this.#fences.get(e.name);
      if (!seen) {
        seen = { max: 0, byOwner: new Map() };
        this.#fences.set(e.name, seen);
      }
      if (seen.byOwner.get(e.owner) === fence) continue;
      if (fence <= seen.max) {
        this.fail(
          `the store granted ${e.name} to ${e.actor} with token ${fence}, not above ${seen.max} granted before`,
        );
      }
      seen.max = Math.max(seen.max, fence);
      seen.byOwner.set(e.owner, fence);
    }
  }

  /**
   * Whether a try for `name` as `kind` must win, by the store's log: nothing in flight, no
   * acquisition of a live instance waiting, no lease that can still be live (fewer than `limit`
   * for permits), no command on the name for a reservation's length (a hand-off may have
   * reserved it), and no queue entry left behind that can still be live: a killed instance's
   * waiter, or a queued attempt answered after its caller gave up (it never leaves the queue;
   * the store drops it after waiterLease). `campaigning`: instances whose waiters are expected in
   * the queue (leaders' campaigns, which the world does not track). Only on the virtual clock,
   * where the log is exact.
   */
  surelyFree(name: string, kind: Kind, self?: Tracked, campaigning?: ReadonlySet<Actor>): boolean {
    if (!this.exactLog || this.log.inFlight > 0) return false;
    const now = this.clock.now();
    const waiting = (t: Tracked) =>
      t !== self && !t.settled && !t.slot.actor.dead && t.wants.some((w) => w.name === name);
    if (this.tracked.some(waiting)) return false;
    const ledger = this.#ledger(name, self, campaigning);
    if (!ledger || now < ledger.last + DEFAULTS.reservation + 1) return false;
    // Every live instance's waiter that gave up has left (or is in flight): what is left was left behind.
    if ([...ledger.queued.values()].some((at) => now < at + DEFAULTS.waiterLease + 1)) return false;
    const leases = [...ledger.leases.values()];
    // A lease that ran out is a change too: a waiter hears of it by its timer, a little later.
    if (leases.some((l) => l.end <= now && now < l.end + DEFAULTS.reservation + 1)) return false;
    const live = leases.filter((l) => l.end > now);
    if (kind === 'exclusive') return live.length === 0;
    if (kind === 'shared') return !live.some((l) => l.exclusive);
    return !live.some((l) => l.exclusive) && live.length < (this.options.limit ?? 1);
  }

  /**
   * The leases of `name` by the store's log (each owner's end, and whether a release ended it), the
   * queue entries left behind (each owner's latest, until it leaves or is granted), and when the
   * last command on the name ran; undefined while one is unanswered. `self`'s own commands count
   * only as activity (acquireAll's names taken already do not keep it out); `campaigning`:
   * instances whose waiters are expected in the queue (leaders' campaigns, which are not tracked).
   */
  #ledger(name: string, self?: Tracked, campaigning?: ReadonlySet<Actor>): Ledger | undefined {
    const leases = new Map<string, Lease>();
    const queued = new Map<string, number>();
    let last = Number.NEGATIVE_INFINITY;
    for (const e of this.log.entries) {
      if (e.name !== name) continue;
      if (!e.done) return undefined;
      last = Math.max(last, e.at);
      if (e.owner === undefined || (self?.op !== undefined && e.operation === self.op)) continue;
      if (e.op === 'leave' || e.op === 'leaveShared' || grantedFence(e) !== undefined) queued.delete(e.owner);
      else if (e.queues && !campaigning?.has(e.actor)) queued.set(e.owner, e.at);
      const r = e.reply as Record<string, unknown> | string | undefined;
      const ttl = e.ttl ?? 0;
      const lease = leases.get(e.owner);
      if (grantedFence(e) !== undefined) {
        const end = Math.max(lease?.end ?? 0, e.at + ttl);
        const exclusive = e.op !== 'acquireShared';
        leases.set(e.owner, { end, exclusive, released: false, seq: lease?.seq ?? e.seq, member: e.member });
      } else if (lease && r === 'extended') {
        lease.end = e.at + ttl;
      } else if (lease && (r === 'released' || (typeof r === 'object' && r?.lease === 'released'))) {
        if (e.at < lease.end) Object.assign(lease, { end: e.at, released: true });
      } else if (lease && typeof r === 'object' && r?.lease === 'kept') {
        lease.end = e.at + Number(r.remaining);
      }
    }
    return { leases, queued, last };
  }

  // --- the end ---------------------------------------------------------------------------------

  /**
   * Everyone goes: every live instance closes (abandoning what it holds), then time runs until
   * every lease, reservation and waiter entry has run out. Every call of a live instance has
   * settled, no instance keeps a timer or a queue, and the store holds nothing. In real time the
   * wait ends early only with no command on its way: one sent before a close (a late net) may
   * still take the lock when it lands, and that lease must run out too.
   */
  async finish(): Promise<void> {
    for (const slot of this.slots) if (slot.live) this.close(slot.index, false);
    if (this.clock.virtual) await this.advance(this.timing.drain);
    else
      await this.until(
        async () =>
          this.tracked.every((t) => t.settled) && this.log.inFlight === 0 && (await this.#leftovers()).length === 0,
        this.timing.drain,
      );
    this.checkBounds();
    for (const t of this.tracked) {
      if (!t.settled && !t.slot.actor.dead) this.fail(`${t.label} never settled`);
    }
    for (const slot of this.everyone) {
      if (slot.actor.dead) continue;
      const listeners = () => slot.store.listening;
      const left = await leftBehind(slot.locks, { timers: this.#timers, owner: slot.actor, listeners, wait: 0 });
      if (left.held + left.timers.length + left.listeners > 0) {
        const timers = left.timers.length === 0 ? '' : ` (${left.timers.join(', ')})`;
        this.fail(
          `${slot} closed still keeps ${left.timers.length} timers${timers}, ${left.listeners} subscriptions, ${left.held} held locks`,
        );
      }
    }
    await this.#checkStoreEmpty();
    this.throwIfViolated();
  }

  async #checkStoreEmpty(): Promise<void> {
    for (const found of await this.#leftovers()) this.fail(`after everyone left, ${found}`);
  }

  /** What the store still keeps of the run's names. */
  async #leftovers(): Promise<string[]> {
    const store = this.#opened.inspect;
    const found: string[] = [];
    for (const name of this.options.names) {
      const state = await store.inspect(name);
      if (state.owner !== null) found.push(`${name} is still held by ${state.owner} (${state.pttl} ms left)`);
      const queue = await store.queued(name, 10);
      if (queue.count > 0 || queue.reserved !== null) {
        found.push(`${name} still has ${queue.count} waiters queued, reserved ${JSON.stringify(queue.reserved)}`);
      }
      const shared = await store.inspectShared(name);
      if (shared.mode !== 'free' || shared.holds.length > 0 || shared.reserved.length > 0) {
        found.push(
          `${name} is ${shared.mode} with ${shared.holds.length} holds, reserved ${shared.reserved.join(' ')}`,
        );
      }
    }
    for await (const name of store.scanLocks('*', 100)) found.push(`the store still lists lock ${name}`);
    return found;
  }

  /** Let time pass until `done()` holds, for at most `max` ms (real time: no longer than needed). */
  async until(done: () => boolean | Promise<boolean>, max: number): Promise<void> {
    const step = this.clock.virtual ? CHECK_EVERY : 25;
    for (let waited = 0; waited < max && !(await done()); waited += step) await this.advance(step);
  }

  /**
   * After a run, whichever way it ended. A run cut short by a violation may leave calls that
   * only virtual time would settle: its instances are killed instead of closed (nothing of them
   * runs again; the run's memory store goes with them). Real instances are closed, briefly.
   */
  async dispose(): Promise<void> {
    try {
      if (this.clock.virtual) {
        for (const slot of this.everyone) slot.actor.kill();
      } else {
        const closing = Promise.all(this.everyone.map((slot) => slot.locks.close().catch(() => undefined)));
        await Promise.race([closing, this.clock.sleep(3 * this.timing.commandTimeout)]);
      }
      await this.#opened.close();
    } finally {
      this.#timers.stop();
      this.clock.uninstall();
      if (this.clock.virtual) releaseContexts();
    }
  }
}

/** The fencing token a store reply granted, if it is a grant. */
function grantedFence(e: Entry): number | undefined {
  const r = e.reply as { acquired?: boolean; claimed?: boolean; fence?: number } | undefined;
  if (typeof r !== 'object' || r === null) return undefined;
  if ((r.acquired === true || r.claimed === true) && typeof r.fence === 'number') return r.fence;
  return undefined;
}

export function describe(error: unknown): string {
  if (error instanceof LockError) return `${error.name} ${error.code}: ${error.message}`;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

// --- commands ------------------------------------------------------------------------------------

/** A command of a model: the world it acts on is the "real" side; the model keeps its own state. */
export type Command<M extends object> = fc.AsyncCommand<M, World>;

/** A command that runs `act`, then lets the world settle and checks it. */
export function command<M extends object>(
  label: string,
  act: (model: M, world: World) => Promise<void> | void,
): Command<M> {
  return {
    check: () => true,
    run: async (model, world) => {
      count('commands');
      if (process.env.MODEL_TRACE) console.info(`${world.elapsed()} ${label}`);
      await act(model, world);
      await world.afterCommand();
    },
    toString: () => label,
  };
}

const slotArb = (slots: number) => fc.nat({ max: slots - 1 });

/** The k-th of `slot`'s entries of `list` (k wrapping round them), if it has any: what a command picks. */
export function pick<T extends { slot: Slot }>(list: readonly T[], slot: Slot, k: number): T | undefined {
  const mine = list.filter((x) => x.slot === slot);
  return mine[k % Math.max(1, mine.length)];
}

/**
 * The commands every model shares: time, pauses, blocks, the network, closing and killing
 * instances. Kills only on the virtual clock: a killed waiter's queue entry outlives a real run's
 * short drain (it lapses after waiterLease), and test/faults kills real processes.
 */
export function commonCommands<M extends object>(
  slots: number,
  timing: Timing,
  { crash = true } = {},
): fc.Arbitrary<Command<M>>[] {
  const step = fc.constantFrom(...timing.steps);
  const pause = fc.constantFrom(...timing.pauses);
  const delay = fc.constantFrom(0, ...timing.delays);
  const net: fc.Arbitrary<Net> = fc.oneof(
    fc.constant(NORMAL),
    fc.record({ kind: fc.constant('late' as const), before: delay, after: delay }),
    fc.constant({ kind: 'resend' as const }),
  );
  const list: fc.Arbitrary<Command<M>>[] = [
    step.map((ms) => command<M>(`Advance(${ms})`, (_m, w) => w.advance(ms))),
    fc
      .tuple(slotArb(slots), pause, fc.constantFrom('timers-first' as const, 'replies-first' as const))
      .map(([i, ms, wake]) => command<M>(`Pause(${i}, ${ms}, ${wake})`, (_m, w) => w.pause(w.slot(i), ms, wake))),
    pause.map((ms) => command<M>(`Block(${ms})`, (_m, w) => w.block(ms))),
    fc
      .tuple(slotArb(slots), net)
      .map(([i, n]) => command<M>(`Net(${i}, ${showNet(n)})`, (_m, w) => w.setNet(w.slot(i), n))),
    slotArb(slots).map((i) => command<M>(`Close(${i})`, (_m, w) => w.close(i))),
  ];
  if (crash) list.push(slotArb(slots).map((i) => command<M>(`Crash(${i})`, (_m, w) => w.crash(i))));
  return list;
}

function showNet(net: Net): string {
  if (net.kind === 'late') return `late ${net.before}/${net.after}`;
  return net.kind;
}

// --- running a model -----------------------------------------------------------------------------

export interface ModelSpec<M extends object> {
  readonly backend: Backend;
  readonly timing: Timing;
  readonly world: WorldOptions;
  /** The model's own state for one run. */
  model(world: World): M;
  /** The commands, given the timing; `virtual`: on the virtual clock (kills only there: see commonCommands). */
  commands(timing: Timing, virtual: boolean): fc.Arbitrary<Command<M>>[];
  /** Before the world finishes: let every piece of user work end, release what the model holds. */
  finish?(model: M, world: World): Promise<void>;
  readonly maxCommands?: number;
}

/** The property: a fresh world per run, the commands, then the end's checks. */
export function modelProperty<M extends object>(
  spec: ModelSpec<M>,
): fc.IAsyncPropertyWithHooks<[Iterable<Command<M>>]> {
  const virtual = spec.backend.clock().virtual;
  const commands = fc.commands(spec.commands(spec.timing, virtual), {
    maxCommands: spec.maxCommands ?? 30,
    size: 'max',
  });
  return fc.asyncProperty(commands, (cmds) => runCommands(spec, cmds));
}

/** One run: a fresh world, `cmds` in order, then the end's checks. Throws the first violation. */
export async function runCommands<M extends object>(spec: ModelSpec<M>, cmds: Iterable<Command<M>>): Promise<void> {
  const world = await World.open(spec.backend, spec.timing, spec.world);
  const t0 = process.hrtime.bigint();
  try {
    const model = spec.model(world);
    await fc.asyncModelRun(() => ({ model, real: world }), cmds);
    await spec.finish?.(model, world);
    await world.clock.settle();
    world.throwIfViolated();
    await world.finish();
  } finally {
    await world.dispose();
    const took = Number(process.hrtime.bigint() - t0) / 1e6;
    if (process.env.MODEL_SLOW && took > Number(process.env.MODEL_SLOW)) {
      console.info(`slow run ${Math.round(took)} ms: ${[...cmds].map(String).join(',')}`);
    }
  }
}

/** fast-check's parameters for `numRuns` runs: the error in the report, and MODEL_SEED if set (to replay a run). */
export function params(numRuns: number): fc.Parameters<unknown> {
  const seed = process.env.MODEL_SEED;
  return { numRuns, includeErrorInReport: true, ...(seed === undefined ? {} : { seed: Number(seed) }) };
}

/**
 * The longest one real-time run may take: each command's own sleep at most, then the end (every
 * call settled within its bound, the drain) and the closing, each with the timing's slack.
 */
export function realRunBound(timing: Timing, maxCommands: number): number {
  const command = Math.max(...timing.steps, ...timing.pauses, ...timing.delays) + timing.epsilon;
  const settle = Math.max(timing.wait.long, 2 * timing.commandTimeout) + 3 * timing.commandTimeout + timing.epsilon;
  return maxCommands * command + settle + timing.drain + 3 * timing.commandTimeout;
}

/**
 * A real-time property's runs (MODEL_REAL_RUNS, 4 unless set) and the test's time limit. fast-check
 * fails a run that outlasts its bound (a hang names its commands), and stops shrinking a failure
 * when the limit nears, reporting the smallest counterexample found so far.
 */
export function realTime(
  timing: Timing = REAL,
  maxCommands = REAL_COMMANDS,
): { params: fc.Parameters<unknown>; limit: number } {
  const numRuns = Number(process.env.MODEL_REAL_RUNS ?? 4);
  const run = realRunBound(timing, maxCommands);
  const shrinking = 10 * run;
  const limit = numRuns * run + shrinking;
  return { params: { ...params(numRuns), timeout: run, interruptAfterTimeLimit: limit }, limit: limit + run };
}

/**
 * A negative control: the broken variant must be caught within `numRuns`, by the violation
 * `expected` names. Returns fast-check's report (seed, path, shrunk command list), also printed.
 * The search stops at the first catch, so a bound costs nothing until it is needed: each is at
 * least 20 times the mean number of runs the control takes to be caught (over seeds 1–100), and
 * a catch by chance missed is then rarer than e^-20. A miss names its seed, to replay it.
 */
export async function expectCaught(
  property: fc.IAsyncPropertyWithHooks<[Iterable<Command<object>>]> | fc.IAsyncProperty<[Iterable<Command<object>>]>,
  numRuns: number,
  expected: RegExp,
  label: string,
): Promise<string> {
  let report = '';
  const seed = Number(process.env.MODEL_SEED ?? Math.floor(Math.random() * 2 ** 32) - 2 ** 31);
  try {
    await fc.assert(property, { ...params(numRuns), seed });
  } catch (error) {
    report = error instanceof Error ? error.message : String(error);
  }
  console.info(`negative control "${label}":\n${report}`);
  if (!/Counterexample/.test(report))
    throw new Error(`negative control "${label}" was not caught in ${numRuns} runs (MODEL_SEED=${seed})`);
  if (!expected.test(report)) throw new Error(`negative control "${label}" failed otherwise than expected:\n${report}`);
  return report;
}

/** What a real-time run on a redis-server sets in a model's spec. */
export type RealTimeOverrides = Pick<ModelSpec<object>, 'backend' | 'timing' | 'maxCommands'>;

/**
 * The suite every model ends with: its property on a real redis-server in real time, one ioredis
 * client per instance, with the runs and the time limit of realTime(). `spec` applies the overrides.
 */
export function onRedisInRealTime<M extends object>(spec: (real: RealTimeOverrides) => ModelSpec<M>): void {
  suite('redis-server, real time', () => {
    const server = suiteRedis();
    const time = realTime();
    it(
      'ioredis, one client per instance',
      async () => {
        const real = spec({ backend: redis(() => server.server), timing: REAL, maxCommands: REAL_COMMANDS });
        await fc.assert(modelProperty(real), time.params);
        if (process.env.MODEL_STATS) console.info(takeStats());
      },
      time.limit,
    );
  });
}

/** The same property on a PostgreSQL of the file's own, in real time, a pg pool per instance. */
export function onPostgresInRealTime<M extends object>(spec: (real: RealTimeOverrides) => ModelSpec<M>): void {
  suite('PostgreSQL, real time', () => {
    let server: PostgresServer | undefined;
    beforeAll(async () => {
      server = await startPostgres({ settings: POSTGRES_SETTINGS });
    });
    afterAll(async () => {
      await server?.stop();
    });
    const started = () => {
      if (!server) throw new Error('the server starts in beforeAll');
      return server;
    };
    const time = realTime();
    it(
      'a pg pool per instance',
      async () => {
        const real = spec({ backend: postgres(started), timing: REAL, maxCommands: REAL_COMMANDS });
        await fc.assert(modelProperty(real), time.params);
        if (process.env.MODEL_STATS) console.info(takeStats());
      },
      time.limit,
    );
  });
}
