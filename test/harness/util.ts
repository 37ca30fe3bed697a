import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { decodeLockRecord, encodeLockValue } from '../../src/store/formats.js';

/** A key prefix unique to one test: `t` followed by 8 random hex characters. */
export function randomPrefix(): string {
  return `t${randomBytes(4).toString('hex')}`;
}

export interface WaitForOptions {
  /** Give up after this many milliseconds. Default 5000. */
  timeout?: number | undefined;
  /** Milliseconds between two evaluations of the predicate. Default 25. */
  interval?: number | undefined;
  /** Describes what was awaited, for the error thrown on timeout. */
  message?: string | undefined;
}

/**
 * Polls `predicate` until it returns true, for test setup only (never as an assertion about
 * speed). A predicate that throws counts as "not yet"; its last error becomes the timeout's cause.
 */
export async function waitFor(predicate: () => boolean | Promise<boolean>, opts: WaitForOptions = {}): Promise<void> {
  const timeout = opts.timeout ?? 5000;
  const interval = opts.interval ?? 25;
  const deadline = performance.now() + timeout;
  let lastError: unknown;
  for (;;) {
    try {
      if (await predicate()) return;
    } catch (error) {
      lastError = error;
    }
    const left = deadline - performance.now();
    if (left <= 0) break;
    await sleep(Math.min(interval, left));
  }
  const what = opts.message ?? 'condition';
  throw new Error(
    `waitFor: ${what} not met within ${timeout} ms`,
    lastError === undefined ? undefined : { cause: lastError },
  );
}

/**
 * A lock key's value read as the scripts read it (lua/lib/lease.lua): '<lease end ms> <state>\n<fence record>'.
 * `state` is the lease's while it lasts by `now` (this machine's clock, which the test servers share), `pttl`
 * the ms it has left (-2 with none), `fence` the fencing record ('<token> <taken-at µs> <instance>' or
 * '<token>=<instance>', then '|<owner>' once released), or null. A value with no newline is a lease
 * as the layout before kept it (the owner alone, ended by the key's PX), read as held (its pttl -1:
 * not known from the value).
 */
export function lockRecord(
  value: string | null | undefined,
  now = Date.now(),
): { state: string | null; pttl: number; fence: string | null } {
  if (!value) return { state: null, pttl: -2, fence: null };
  if (!value.includes('\n')) return { state: value, pttl: -1, fence: null };
  const { lease } = decodeLockRecord(value);
  const fence = value.slice(value.indexOf('\n') + 1) || null;
  return lease && lease.end >= now
    ? { state: encodeLockValue(lease.value), pttl: lease.end - now, fence }
    : { state: null, pttl: -2, fence };
}

/** Calls of `command` a server ran since its stats were reset, scripts' own included (INFO commandstats). */
export async function commandCalls(
  server: { info(section: string): Promise<string> },
  command: string,
): Promise<number> {
  const stats = await server.info('commandstats');
  return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0);
}

/** The fencing token a lock key's record holds (a whole lock value, or the record alone), or 0. */
export function counterToken(value: string | null | undefined): number {
  if (!value) return 0;
  const record = value.includes('\n') ? lockRecord(value).fence : value;
  return record ? Number(record.split(/[ |=]/)[0]) : 0;
}

/** Spin the CPU for `ms`: the event loop is blocked, as by a long GC pause or a busy task. */
export function blockFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // Nothing: no timer can fire meanwhile.
  }
}

/**
 * Resolves once `signal` aborts, or at once if it has already: work that awaits something first
 * may find its lease lost meanwhile, and a listener added after the abort never hears it.
 */
export function untilAborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}
