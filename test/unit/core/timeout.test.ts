import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Timeouts, withTimeout } from '../../../src/core/timeout.js';
import { TimerWatch } from '../../harness/leaks.js';
import { VirtualClock } from '../../model/clock.js';

/**
 * Call deadlines (core/timeout.ts): one timer per store and duration instead of one per call. Each
 * call ends with its own outcome if it settles in time, and with the timeout's error exactly at its
 * deadline if not; a waiting call holds a ref'd timer, and with nothing waiting no timer holds the
 * process. Examples, then a model (fast-check) over calls of several durations started, settled and
 * left to expire in any order, with negative controls it must catch.
 */

interface Bounds {
  bound<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown): Promise<T>;
  stopIdle(): void;
}

let clock: VirtualClock;
let timers: TimerWatch;

beforeEach(() => {
  clock = new VirtualClock();
  clock.install();
  timers = new TimerWatch();
});

afterEach(() => {
  timers.stop();
  clock.uninstall();
});

/** A promise settled from outside. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** How a bounded call ended, and when (virtual ms). */
interface Ended {
  readonly how: 'value' | 'error' | 'timeout';
  readonly what: unknown;
  readonly at: number;
}

function watch(bounded: Promise<unknown>): { ended?: Ended } {
  const call: { ended?: Ended } = {};
  bounded.then(
    (what) => {
      call.ended = { how: 'value', what, at: clock.now() };
    },
    (what: unknown) => {
      const how = what instanceof Expired ? 'timeout' : 'error';
      call.ended = { how, what, at: clock.now() };
    },
  );
  return call;
}

class Expired extends Error {}

describe('call deadlines', () => {
  it('a call that settles in time ends with its own outcome, and leaves no timer holding the process', async () => {
    const timeouts = new Timeouts();
    const ok = deferred<number>();
    const bad = deferred<number>();
    const a = watch(timeouts.bound(ok.promise, 100, () => new Expired()));
    const b = watch(timeouts.bound(bad.promise, 100, () => new Expired()));
    expect(timers.pending()).toEqual(['src/core/timeout.ts']);
    ok.resolve(7);
    bad.reject(new Error('refused'));
    await clock.settle();
    expect(a.ended).toMatchObject({ how: 'value', what: 7 });
    expect(b.ended).toMatchObject({ how: 'error', what: new Error('refused') });
    expect(timers.pending()).toEqual([]);
    expect(timers.pending(undefined, { idle: true })).toEqual(['src/core/timeout.ts']);
    await clock.advance(100);
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });

  it('calls left waiting end with the timeout at their own deadlines, whatever their order and duration', async () => {
    const timeouts = new Timeouts();
    const start = clock.now();
    const a = watch(timeouts.bound(deferred().promise, 100, () => new Expired('a')));
    await clock.advance(30);
    const settled = deferred<string>();
    const b = watch(timeouts.bound(settled.promise, 100, () => new Expired('b')));
    const c = watch(timeouts.bound(deferred().promise, 50, () => new Expired('c')));
    await clock.advance(30);
    const d = watch(timeouts.bound(deferred().promise, 100, () => new Expired('d')));
    await clock.advance(20);
    expect(c.ended).toMatchObject({ how: 'timeout', at: start + 80 });
    settled.resolve('in time');
    await clock.advance(19);
    expect(a.ended).toBeUndefined();
    await clock.advance(1);
    expect(a.ended).toMatchObject({ how: 'timeout', at: start + 100 });
    await clock.advance(100);
    expect(b.ended).toMatchObject({ how: 'value', what: 'in time', at: start + 80 });
    expect(d.ended).toMatchObject({ how: 'timeout', at: start + 160 });
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });

  it('a call made while others expire gets its own deadline', async () => {
    const timeouts = new Timeouts();
    const start = clock.now();
    let late: { ended?: Ended } | undefined;
    const first = watch(
      timeouts.bound(deferred().promise, 100, () => {
        late = watch(timeouts.bound(deferred().promise, 100, () => new Expired('late')));
        return new Expired('first');
      }),
    );
    await clock.advance(100);
    expect(first.ended).toMatchObject({ how: 'timeout', at: start + 100 });
    expect(late?.ended).toBeUndefined();
    await clock.advance(99);
    expect(late?.ended).toBeUndefined();
    await clock.advance(1);
    expect(late?.ended).toMatchObject({ how: 'timeout', at: start + 200 });
  });

  it('a timeout whose error cannot be built rejects with what building it threw', async () => {
    const call = watch(
      new Timeouts().bound(deferred().promise, 10, () => {
        throw new TypeError('no error for you');
      }),
    );
    await clock.advance(10);
    expect(call.ended).toMatchObject({ how: 'error', what: new TypeError('no error for you') });
  });

  it('stopIdle() clears the timers no call waits on and keeps the one a call still needs', async () => {
    const timeouts = new Timeouts();
    const quick = deferred<void>();
    timeouts.bound(quick.promise, 100, () => new Expired());
    const waiting = watch(timeouts.bound(deferred().promise, 200, () => new Expired('waiting')));
    quick.resolve();
    await clock.settle();
    timeouts.stopIdle();
    expect(timers.pending(undefined, { idle: true })).toEqual(['src/core/timeout.ts']);
    await clock.advance(200);
    expect(waiting.ended).toMatchObject({ how: 'timeout' });
    expect(timers.pending(undefined, { idle: true })).toEqual([]);
  });

  it('withTimeout bounds a call that belongs to no store the same way', async () => {
    const call = watch(withTimeout(deferred().promise, 25, () => new Expired()));
    await clock.advance(25);
    expect(call.ended).toMatchObject({ how: 'timeout' });
  });
});

type Step =
  | { readonly kind: 'call'; readonly ms: number }
  | { readonly kind: 'settle'; readonly pick: number; readonly ok: boolean }
  | { readonly kind: 'advance'; readonly by: number };

const DURATIONS = [50, 100, 250];

const steps = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constant('call' as const), ms: fc.constantFrom(...DURATIONS) }),
    fc.record({ kind: fc.constant('settle' as const), pick: fc.nat(), ok: fc.boolean() }),
    fc.record({
      kind: fc.constant('advance' as const),
      by: fc.oneof(fc.integer({ min: 0, max: 60 }), fc.constant(100)),
    }),
  ),
  { maxLength: 60 },
);

interface Modelled {
  readonly deadline: number;
  readonly source: ReturnType<typeof deferred<number>>;
  readonly seen: { ended?: Ended };
  /** When the test settled it and how, if it did. */
  settled?: { readonly at: number; readonly ok: boolean };
}

/**
 * Every timer set while a model runs, from any file (the negative controls' too), until it fires
 * or is cleared: `holding()` counts those that hold the process (ref'd).
 */
class AllTimers {
  readonly #pending = new Set<ReturnType<typeof setTimeout>>();
  readonly #set = globalThis.setTimeout;
  readonly #clear = globalThis.clearTimeout;

  constructor() {
    const pending = this.#pending;
    const set = this.#set;
    const clear = this.#clear;
    globalThis.setTimeout = ((fn: () => void, ms?: number) => {
      const handle: ReturnType<typeof setTimeout> = set(() => {
        pending.delete(handle);
        fn();
      }, ms);
      pending.add(handle);
      return handle;
    }) as typeof setTimeout;
    globalThis.clearTimeout = ((handle: ReturnType<typeof setTimeout>) => {
      pending.delete(handle);
      clear(handle);
    }) as typeof clearTimeout;
  }

  holding(): number {
    return [...this.#pending].filter((h) => h.hasRef()).length;
  }

  get count(): number {
    return this.#pending.size;
  }

  stop(): void {
    globalThis.setTimeout = this.#set;
    globalThis.clearTimeout = this.#clear;
  }
}

/**
 * Run `script` against the bounds `make()` gives, checking after every step: a call settled before
 * its deadline ends with that outcome then; one still waiting at its deadline ends with the timeout
 * then (virtual time: exactly); none is left waiting past its deadline; a timer holds the process
 * while a call waits, as a call's own timer would, and none once nothing waits; stopIdle() leaves
 * no timer once nothing waits.
 */
async function runModel(make: () => Bounds, script: readonly Step[], all: AllTimers): Promise<void> {
  const bounds = make();
  const calls: Modelled[] = [];
  const check = (where: string) => {
    const t = clock.now();
    for (const [i, call] of calls.entries()) {
      const { ended } = call.seen;
      const inTime = call.settled !== undefined && call.settled.at < call.deadline;
      if (inTime) {
        const { at, ok } = call.settled as { at: number; ok: boolean };
        if (ended?.how !== (ok ? 'value' : 'error') || ended.at !== at) {
          throw new Error(`${where}: call ${i} settled at ${at} but ended ${JSON.stringify(ended)}`);
        }
      } else if (call.deadline <= t) {
        if (ended?.how !== 'timeout' || ended.at !== call.deadline) {
          throw new Error(`${where}: call ${i} due at ${call.deadline} ended ${JSON.stringify(ended)} (now ${t})`);
        }
      } else if (ended !== undefined) {
        throw new Error(`${where}: call ${i} due at ${call.deadline} ended early: ${JSON.stringify(ended)}`);
      }
    }
    const waiting = calls.some((c) => c.seen.ended === undefined);
    if (!waiting && all.holding() > 0) throw new Error(`${where}: nothing waits, yet a timer holds the process`);
    if (waiting && all.holding() === 0) throw new Error(`${where}: a call waits, and no timer holds the process`);
  };
  for (const [n, step] of script.entries()) {
    if (step.kind === 'call') {
      const source = deferred<number>();
      const seen = watch(bounds.bound(source.promise, step.ms, () => new Expired()));
      calls.push({ deadline: clock.now() + step.ms, source, seen });
    } else if (step.kind === 'settle') {
      const open = calls.filter((c) => c.settled === undefined);
      const call = open[step.pick % Math.max(1, open.length)];
      if (call !== undefined) {
        call.settled = { at: clock.now(), ok: step.ok };
        if (step.ok) call.source.resolve(n);
        else call.source.reject(new Error(`refused ${n}`));
      }
    } else {
      await clock.advance(step.by);
    }
    await clock.settle();
    check(`step ${n} (${step.kind})`);
  }
  for (const call of calls) {
    if (call.settled === undefined) {
      call.settled = { at: clock.now(), ok: true };
      call.source.resolve(-1);
    }
  }
  await clock.settle();
  check('all settled');
  bounds.stopIdle();
  if (all.count > 0) throw new Error(`stopIdle() with nothing waiting left ${all.count} timers`);
  await clock.advance(Math.max(...DURATIONS));
  check('after the longest duration');
}

/** The model's property over `make`, each run on a fresh virtual clock. */
function property(make: () => Bounds) {
  return fc.asyncProperty(steps, async (script) => {
    timers.stop();
    clock.uninstall();
    clock = new VirtualClock();
    clock.install();
    timers = new TimerWatch();
    const all = new AllTimers();
    try {
      await runModel(make, script, all);
    } finally {
      all.stop();
    }
  });
}

/** Deadlines one step away from right ones: the model must catch each. */
const BROKEN: Record<string, () => Bounds> = {
  // One timer, armed for the first call: when it fires every waiting call expires, due or not.
  'every waiting call expires when the first does': () => {
    const waiting = new Set<() => void>();
    let timer: ReturnType<typeof setTimeout> | undefined;
    return {
      bound<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown) {
        return new Promise<T>((resolve, reject) => {
          const expire = () => reject(onTimeout());
          waiting.add(expire);
          if (timer === undefined) {
            timer = setTimeout(() => {
              timer = undefined;
              for (const e of [...waiting]) e();
              waiting.clear();
            }, ms);
          } else timer.ref();
          const leave = () => {
            waiting.delete(expire);
            if (waiting.size === 0) timer?.unref();
          };
          promise.then(resolve, reject);
          promise.then(leave, leave);
        });
      },
      stopIdle() {
        if (waiting.size === 0 && timer !== undefined) clearTimeout(timer);
        timer = undefined;
      },
    };
  },
  // The timer fires once, for the first call's deadline, and is never armed again for the rest.
  'the timer is not armed again after it fires': () => {
    const queue: { deadline: number; expire: () => void; done: boolean }[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    let armed = false;
    const waiting = () => queue.some((e) => !e.done);
    return {
      bound<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown) {
        return new Promise<T>((resolve, reject) => {
          const entry = { deadline: clock.now() + ms, expire: () => reject(onTimeout()), done: false };
          queue.push(entry);
          if (!armed) {
            armed = true;
            timer = setTimeout(() => {
              timer = undefined;
              for (const e of queue) {
                if (!e.done && e.deadline <= clock.now()) {
                  e.done = true;
                  e.expire();
                }
              }
            }, ms);
          } else timer?.ref();
          const done = () => {
            entry.done = true;
            if (!waiting()) timer?.unref();
          };
          promise.then(resolve, reject);
          promise.then(done, done);
        });
      },
      stopIdle() {
        if (!waiting() && timer !== undefined) clearTimeout(timer);
        timer = undefined;
      },
    };
  },
  // A timer per call, not cleared when the call settles: it holds the process for nothing.
  'a settled call keeps its timer': () => ({
    bound<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown) {
      return new Promise<T>((resolve, reject) => {
        setTimeout(() => reject(onTimeout()), ms);
        promise.then(resolve, reject);
      });
    },
    stopIdle() {},
  }),
};

describe('call deadlines against a model', () => {
  it('Timeouts keeps every deadline, in any interleaving of calls, settlements and time', async () => {
    await fc.assert(
      property(() => new Timeouts()),
      { numRuns: 300 },
    );
  });

  for (const [name, make] of Object.entries(BROKEN)) {
    it(`negative control: ${name} is caught`, async () => {
      await expect(fc.assert(property(make), { numRuns: 300 })).rejects.toThrow(/Property failed/);
    });
  }
});
