import { relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { onTestFinished } from 'vitest';
import { DEFAULTS } from '../../src/core/defaults.js';
import type { Leasehold } from '../../src/index.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The library's own code; a store's files keep its backend's session and live as long as it does. */
const LIBRARY = `${ROOT}src/`;
const STORES = `${ROOT}src/store/`;
/** Where the calls' deadline timers are set (see TimerWatch.pending). */
const DEADLINES = 'src/core/timeout.ts';
/** Where the watchdogs' one timer is set (see TimerWatch.pending). */
const WATCHDOGS = 'src/core/lease-keeper.ts';

type Timers = Pick<typeof globalThis, 'setTimeout' | 'setInterval' | 'clearTimeout' | 'clearInterval'>;

/** The file that called the timer function the wrapper stands for, if it is the library's (stores aside). */
function libraryCaller(): string | undefined {
  const prepare = Error.prepareStackTrace;
  const limit = Error.stackTraceLimit;
  Error.prepareStackTrace = (_error, sites) => sites;
  Error.stackTraceLimit = 3;
  try {
    // [0] this function, [1] the wrapper, [2] its caller.
    const sites = new Error().stack as unknown as NodeJS.CallSite[];
    const file = sites[2]?.getFileName() ?? '';
    const path = file.startsWith('file://') ? fileURLToPath(file) : file;
    return path.startsWith(LIBRARY) && !path.startsWith(STORES) ? relative(ROOT, path) : undefined;
  } finally {
    Error.prepareStackTrace = prepare;
    Error.stackTraceLimit = limit;
  }
}

/**
 * The library's pending timers, seen from outside: while a watch lasts, the global timer functions
 * (Node's, or a virtual clock's) are wrapped, and each timer the library's code sets (a watchdog, a
 * park, a subscription's linger, a deadline, a job's next tick) counts until it fires or is
 * cleared. Unref'd timers count too: `process.getActiveResourcesInfo()` leaves them out, and every
 * watchdog timer is unref'd. A store's own timers (an etcd session's keepalive) do not count.
 */
export class TimerWatch {
  readonly #saved: Timers;
  readonly #pending = new Map<unknown, { file: string; owner: unknown }>();

  /** `owner()`: whom a timer set now belongs to (a model's actor); every timer counts for `pending()` either way. */
  constructor(owner: () => unknown = () => undefined) {
    const g = globalThis as Timers;
    const saved: Timers = {
      setTimeout: g.setTimeout,
      setInterval: g.setInterval,
      clearTimeout: g.clearTimeout,
      clearInterval: g.clearInterval,
    };
    this.#saved = saved;
    const pending = this.#pending;
    const wrap = (set: typeof setTimeout, once: boolean) =>
      Object.assign(
        (fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
          const file = libraryCaller();
          if (file === undefined) return set(fn, ms, ...args);
          const handle = set(() => {
            if (once) pending.delete(handle);
            fn(...args);
          }, ms);
          pending.set(handle, { file, owner: owner() });
          return handle;
        },
        { [promisify.custom]: (set as unknown as Record<symbol, unknown>)[promisify.custom] },
      );
    const clear = (real: (handle: never) => void) => (handle: unknown) => {
      pending.delete(handle);
      real(handle as never);
    };
    g.setTimeout = wrap(saved.setTimeout, true) as unknown as typeof setTimeout;
    g.setInterval = wrap(saved.setInterval as unknown as typeof setTimeout, false) as unknown as typeof setInterval;
    g.clearTimeout = clear(saved.clearTimeout);
    g.clearInterval = clear(saved.clearInterval);
  }

  /**
   * The files of the library's timers still pending (of `owner` only, if given). An idle deadline
   * timer does not count: the one timer of a store's calls of one duration (src/core/timeout.ts),
   * unref'd while no call waits on it, lasts at most that duration after the last call, or until
   * close(). While a call waits it is ref'd, and counts. Nor does the watchdogs' one timer
   * (src/core/lease-keeper.ts), always unref'd: while locks are held it is theirs (`held` counts
   * them), and after the last it lasts until its deadline or close(). `idle`: count both too.
   */
  pending(owner?: unknown, { idle = false }: { readonly idle?: boolean } = {}): string[] {
    const files: string[] = [];
    for (const [handle, timer] of this.#pending) {
      if (owner !== undefined && timer.owner !== owner) continue;
      if (!idle && timer.file === DEADLINES && !(handle as { hasRef(): boolean }).hasRef()) continue;
      if (!idle && timer.file === WATCHDOGS) continue;
      files.push(timer.file);
    }
    return files.sort();
  }

  /** Put the timer functions back as they were. */
  stop(): void {
    Object.assign(globalThis, this.#saved);
    this.#pending.clear();
  }
}

/** A TimerWatch for the rest of the running test: stopped when it finishes. */
export function watchTimers(): TimerWatch {
  const watch = new TimerWatch();
  onTestFinished(() => watch.stop());
  return watch;
}

/** Nothing left behind. */
export const NOTHING: Leftovers = Object.freeze({ held: 0, timers: [], listeners: 0 });

/** What instances leave behind, each part counted from outside the library. */
export interface Leftovers {
  /** Locks the instances still hold (`heldCount`). */
  readonly held: number;
  /** The files of the library's timers still pending. */
  readonly timers: readonly string[];
  /** Listeners the backend still has for the locks' hand-offs. */
  readonly listeners: number;
}

export interface LeftoverCheck {
  readonly timers: TimerWatch;
  /** Only the timers of this owner (see TimerWatch). */
  readonly owner?: unknown;
  /** The backend's listeners for the hand-offs of the locks concerned (Redis: PUBSUB NUMSUB of their channels). */
  readonly listeners?: () => number | Promise<number>;
  /**
   * ms the listeners get to reach 0. Default: a subscription's linger after its last waiter left,
   * plus the one command that drops it. 0 where time passes only when a virtual clock is advanced.
   */
  readonly wait?: number;
}

/**
 * What `instances` leave behind once their calls are over: held locks, the library's pending
 * timers and the backend's listeners. Listeners get `wait` ms to reach 0 (a waiter that never left
 * keeps its listener and fails the check); timers and held locks are read once they have, with no
 * time given to fire.
 */
export async function leftBehind(
  instances: Leasehold | readonly Leasehold[],
  { timers, owner, listeners = () => 0, wait = DEFAULTS.subscriptionLinger + DEFAULTS.commandTimeout }: LeftoverCheck,
): Promise<Leftovers> {
  const deadline = performance.now() + wait;
  let listening = await listeners();
  while (listening > 0 && performance.now() < deadline) {
    await sleep(10);
    listening = await listeners();
  }
  const all: readonly Leasehold[] = Array.isArray(instances) ? instances : [instances];
  return {
    held: all.reduce((sum, locks) => sum + locks.heldCount, 0),
    timers: timers.pending(owner),
    listeners: listening,
  };
}
