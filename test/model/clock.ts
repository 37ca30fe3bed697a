import { AsyncLocalStorage, AsyncResource } from 'node:async_hooks';
import { setTimeout as realSleep } from 'node:timers/promises';
import { blockFor } from '../harness/index.js';

/**
 * Time for the models. A VirtualClock replaces the timers, `performance.now()` and `Date.now()`
 * of the process while a run lasts, so a run is deterministic and a minute of leases costs
 * microseconds; a RealClock is the machine's own, for the runs against a real redis-server.
 *
 * Each Leasehold instance of a model is an Actor: its calls are started inside `actor.run()`, so
 * the timers its code creates carry it (AsyncLocalStorage). A frozen actor's timers do not fire
 * and its store replies wait (see store.ts): the process is stopped while the others go on.
 */

/** One Leasehold instance as the clock and the store wrapper see it. */
export class Actor {
  readonly id: number;
  /** Stopped (SIGSTOP): no timer of its fires, no reply reaches it, until thawed. */
  frozen = false;
  /** Killed: nothing of it ever runs again. */
  dead = false;
  #thawed: Promise<void> = Promise.resolve();
  #thaw: (() => void) | undefined;

  constructor(id: number) {
    this.id = id;
  }

  /** Run `fn` as this actor: everything it starts (timers, promise chains) belongs to it. */
  run<T>(fn: () => T): T {
    return actorContext.run(this, fn);
  }

  freeze(): void {
    if (this.frozen) return;
    this.frozen = true;
    this.#thawed = new Promise((resolve) => {
      this.#thaw = resolve;
    });
  }

  thaw(): void {
    this.frozen = false;
    this.#thaw?.();
    this.#thaw = undefined;
  }

  kill(): void {
    this.dead = true;
    this.freeze();
  }

  /** Resolves once this actor runs (at once unless frozen); never for a dead one. */
  gate(): Promise<void> {
    if (this.dead) return new Promise(() => {});
    return this.frozen ? this.#thawed.then(() => this.gate()) : Promise.resolve();
  }

  toString(): string {
    return `#${this.id}`;
  }
}

const actorContext = new AsyncLocalStorage<Actor>();

/** The actor whose code is running, if any. */
export function currentActor(): Actor | undefined {
  return actorContext.getStore();
}

/** Run `fn` as no actor: what the network or the server does goes on while an actor is frozen. */
export function asNobody<T>(fn: () => T): T {
  return actorContext.exit(fn);
}

export interface Clock {
  readonly virtual: boolean;
  /** ms on the monotonic clock the library reads. */
  now(): number;
  /** Let everything that can run without time passing run. */
  settle(): Promise<void>;
  /** Let `ms` pass with every timer firing when due. */
  advance(ms: number): Promise<void>;
  /**
   * Stop `actor` for `ms` while the others go on; on waking, its overdue timers fire before or
   * after the replies that waited for it. The real clock cannot stop one actor: it stops them all.
   */
  pause(actor: Actor, ms: number, wake: 'timers-first' | 'replies-first'): Promise<void>;
  /** Block the event loop for `ms`: time passes and nothing runs (a long synchronous task, a GC pause). */
  block(ms: number): void;
  /** A timer of the harness itself (a network delay): it belongs to no actor. */
  sleep(ms: number): Promise<void>;
  install(): void;
  uninstall(): void;
}

interface Timer {
  readonly id: number;
  at: number;
  seq: number;
  readonly delay: number;
  readonly fn: () => void;
  readonly repeat: number | undefined;
  readonly actor: Actor | undefined;
}

/** What `setTimeout` returns under the virtual clock: enough of Node's Timeout for the library. */
class Handle {
  readonly id: number;
  readonly #clock: VirtualClock;
  constructor(id: number, clock: VirtualClock) {
    this.id = id;
    this.#clock = clock;
  }
  /** As Node's: a timer holds the process until unref'd (nothing here waits on it, the state is kept). */
  #refed = true;
  unref(): this {
    this.#refed = false;
    return this;
  }
  ref(): this {
    this.#refed = true;
    return this;
  }
  hasRef(): boolean {
    return this.#refed;
  }
  refresh(): this {
    this.#clock.refresh(this.id);
    return this;
  }
  [Symbol.toPrimitive](): number {
    return this.id;
  }
}

type Global = Record<string, unknown>;

/** Timer firings in one advance beyond which the run counts as a livelock. */
const MAX_FIRINGS = 200_000;
/** Rounds of setImmediate after which a settle that never goes quiet is a livelock. */
const MAX_ROUNDS = 20_000;
/** The wall clock's epoch under the virtual clock: fixed, so runs are the same every time. */
const EPOCH = Date.UTC(2030, 0, 1);
/** performance.now() when a virtual run starts. */
const ORIGIN = 1_000_000;

/**
 * The virtual clock: timers in a list ordered by due time (then creation), fired one at a time by
 * `advance`, with microtasks and setImmediate callbacks (the memory store's hand-off messages)
 * drained after each. Each timer runs in the async context it was created in, as Node's do.
 */
export class VirtualClock implements Clock {
  readonly virtual = true;
  #now = 0;
  #seq = 0;
  readonly #timers = new Map<number, Timer>();
  readonly #immediates = new Set<unknown>();
  #saved: Global | undefined;
  readonly #realImmediate = setImmediate;
  /** Called after each timer fired and everything settled: a model's checks. */
  onTimer: (() => void) | undefined;
  /** A timer callback threw: the library promises nothing throws from a timer. */
  onError: ((error: unknown) => void) | undefined;

  now(): number {
    return ORIGIN + this.#now;
  }

  install(): void {
    const g = globalThis as unknown as Global;
    this.#saved = {
      setTimeout: g.setTimeout,
      clearTimeout: g.clearTimeout,
      setInterval: g.setInterval,
      clearInterval: g.clearInterval,
      setImmediate: g.setImmediate,
      clearImmediate: g.clearImmediate,
      dateNow: Date.now,
    };
    const clear = (handle: unknown) => {
      if (handle === undefined || handle === null) return;
      this.#timers.delete(Number(handle));
    };
    g.setTimeout = (fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) =>
      this.#add(() => fn(...args), ms, undefined);
    g.setInterval = (fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) =>
      this.#add(() => fn(...args), ms, Math.max(1, Number(ms) || 1));
    g.clearTimeout = clear;
    g.clearInterval = clear;
    const realSet = this.#saved.setImmediate as typeof setImmediate;
    const realClear = this.#saved.clearImmediate as typeof clearImmediate;
    g.setImmediate = (fn: (...a: unknown[]) => void, ...args: unknown[]) => {
      const handle = realSet(() => {
        this.#immediates.delete(handle);
        fn(...args);
      });
      this.#immediates.add(handle);
      return handle;
    };
    g.clearImmediate = (handle: NodeJS.Immediate) => {
      this.#immediates.delete(handle);
      realClear(handle);
    };
    Date.now = () => EPOCH + this.#now;
    performance.now = () => this.now();
  }

  uninstall(): void {
    const saved = this.#saved;
    if (!saved) return;
    const g = globalThis as unknown as Global;
    for (const key of [
      'setTimeout',
      'clearTimeout',
      'setInterval',
      'clearInterval',
      'setImmediate',
      'clearImmediate',
    ]) {
      g[key] = saved[key];
    }
    Date.now = saved.dateNow as () => number;
    delete (performance as { now?: unknown }).now;
    this.#timers.clear();
    this.#saved = undefined;
  }

  #add(fn: () => void, ms: number | undefined, repeat: number | undefined): Handle {
    const id = ++this.#seq;
    // As Node: a delay below 1 ms (or none) is 1 ms.
    const delay = Math.max(Number(ms) || 0, 1);
    this.#timers.set(id, {
      id,
      at: this.#now + delay,
      seq: id,
      delay,
      fn: AsyncResource.bind(fn),
      repeat,
      actor: currentActor(),
    });
    return new Handle(id, this);
  }

  refresh(id: number): void {
    const timer = this.#timers.get(id);
    if (timer) {
      timer.at = this.#now + timer.delay;
      timer.seq = ++this.#seq;
    }
  }

  #runnable(timer: Timer): boolean {
    return timer.actor === undefined || !timer.actor.frozen;
  }

  /** The timer `pick` accepts that is due first (then made first). */
  #earliest(pick: (timer: Timer) => boolean): Timer | undefined {
    let best: Timer | undefined;
    for (const timer of this.#timers.values()) {
      if (!pick(timer)) continue;
      if (!best || timer.at < best.at || (timer.at === best.at && timer.seq < best.seq)) best = timer;
    }
    return best;
  }

  /** Fire one timer at its time (or now, if it is overdue), then let everything settle. */
  async #fire(timer: Timer): Promise<void> {
    if (timer.at > this.#now) this.#now = timer.at;
    if (timer.repeat === undefined) this.#timers.delete(timer.id);
    else {
      timer.at = this.#now + timer.repeat;
      timer.seq = ++this.#seq;
    }
    try {
      timer.fn();
    } catch (error) {
      this.onError?.(error);
    }
    await this.settle();
    // The model's checks: they record what they find, they never throw into the clock.
    try {
      this.onTimer?.();
    } catch (error) {
      this.onError?.(error);
    }
  }

  /** Fire the timers `pick` accepts, in order, until none is left. */
  async #fireAll(pick: (timer: Timer) => boolean, what: string): Promise<void> {
    for (let fired = 0; ; fired++) {
      if (fired > MAX_FIRINGS) throw new Error(`livelock: ${MAX_FIRINGS} timers fired ${what}`);
      const timer = this.#earliest(pick);
      if (!timer) return;
      await this.#fire(timer);
    }
  }

  async settle(): Promise<void> {
    for (let quiet = 0, rounds = 0; quiet < 3; rounds++) {
      if (rounds > MAX_ROUNDS) throw new Error('livelock: setImmediate callbacks never stop');
      await new Promise((resolve) => this.#realImmediate(resolve));
      quiet = this.#immediates.size === 0 ? quiet + 1 : 0;
    }
  }

  async advance(ms: number): Promise<void> {
    await this.settle();
    const target = this.#now + ms;
    await this.#fireAll((t) => t.at <= target && this.#runnable(t), `within ${ms} ms`);
    if (target > this.#now) this.#now = target;
    await this.settle();
  }

  async pause(actor: Actor, ms: number, wake: 'timers-first' | 'replies-first'): Promise<void> {
    actor.freeze();
    try {
      await this.advance(ms);
      // Its overdue timers fire while its replies still wait, or after them.
      if (wake === 'timers-first') await this.#fireAll((t) => t.actor === actor && t.at <= this.#now, 'on waking');
    } finally {
      actor.thaw();
    }
    await this.advance(0);
  }

  block(ms: number): void {
    this.#now += ms;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => asNobody(() => setTimeout(resolve, ms)));
  }
}

/** The machine's clock: the runs against a real redis-server. */
export class RealClock implements Clock {
  readonly virtual = false;

  now(): number {
    return performance.now();
  }

  async settle(): Promise<void> {
    await realSleep(15);
  }

  async advance(ms: number): Promise<void> {
    await realSleep(ms);
    await this.settle();
  }

  async pause(_actor: Actor, ms: number): Promise<void> {
    // One process holds every instance: stopping one stops them all (the server goes on).
    blockFor(ms);
    await this.settle();
  }

  block(ms: number): void {
    blockFor(ms);
  }

  sleep(ms: number): Promise<void> {
    return realSleep(ms);
  }

  install(): void {}
  uninstall(): void {}
}
