import { describe, expect, it, vi } from 'vitest';
import { exponential } from '../../../src/core/backoff.js';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { Retrying } from '../../../src/core/retrying.js';
import { onFakeTimers } from '../../harness/fake-timers.js';

/** The wait before the n-th retry of one outage (n from 0). */
const delay = (n: number) => exponential(n, DEFAULTS.resubscribeDelay, DEFAULTS.maxPark);

/** A Retrying whose tries answer from `outcomes` in turn (an Error rejects), logging when each began. */
function scripted(outcomes: readonly unknown[], going?: () => boolean) {
  const tries: number[] = [];
  const errors: unknown[] = [];
  let i = 0;
  const retrying = new Retrying({
    attempt: async () => {
      tries.push(Date.now());
      const outcome = outcomes[Math.min(i++, outcomes.length - 1)];
      if (outcome instanceof Error) throw outcome;
      return outcome;
    },
    onError: (error) => errors.push(error),
    ...(going ? { going } : {}),
  });
  return { retrying, tries, errors };
}

const gaps = (times: readonly number[]) => times.slice(1).map((t, i) => t - times[i]!);

describe('Retrying', () => {
  onFakeTimers();

  it('a try that fails once is tried again after the first delay, then stops; the failure is reported', async () => {
    const failure = new Error('down');
    const { retrying, tries, errors } = scripted([failure, undefined]);
    retrying.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(tries).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(delay(0) - 1);
    expect(tries).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(tries).toHaveLength(2);
    expect(errors).toEqual([failure]);
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(tries).toHaveLength(2);
  });

  it('a try that always fails waits twice as long each time up to maxPark, and reports every failure', async () => {
    const { retrying, tries, errors } = scripted([new Error('down')]);
    retrying.start();
    await vi.advanceTimersByTimeAsync(30 * DEFAULTS.maxPark);
    const waits = gaps(tries);
    // Not jittered: one loop serves one lock or one session, and its delays are DEFAULTS' own.
    expect(waits.slice(0, 8)).toEqual([0, 1, 2, 3, 4, 5, 6, 7].map(delay));
    expect(waits[0]).toBe(DEFAULTS.resubscribeDelay);
    expect(Math.max(...waits)).toBe(DEFAULTS.maxPark);
    expect(waits.slice(-3)).toEqual([DEFAULTS.maxPark, DEFAULTS.maxPark, DEFAULTS.maxPark]);
    expect(errors).toHaveLength(tries.length);
    expect(vi.getTimerCount()).toBe(1);
    retrying.stop();
  });

  it('a success starts the backoff over', async () => {
    const down = new Error('down');
    const { retrying, tries } = scripted([down, down, down, 'again', down, down]);
    retrying.start();
    await vi.advanceTimersByTimeAsync(delay(0) + delay(1) + delay(2) + delay(0) + delay(1));
    expect(gaps(tries)).toEqual([delay(0), delay(1), delay(2), 0, delay(0), delay(1)]);
    retrying.stop();
  });

  it('stop() during a pending retry leaves no timer, and a try that fails after stop() is neither reported nor retried', async () => {
    const { retrying, tries, errors } = scripted([new Error('down')]);
    retrying.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(vi.getTimerCount()).toBe(1);
    retrying.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(tries).toHaveLength(1);
    expect(errors).toHaveLength(1);

    let fail: (error: Error) => void = () => {};
    const reported: unknown[] = [];
    const inFlight = new Retrying({
      attempt: () => new Promise((_, reject) => (fail = reject)),
      onError: (error) => reported.push(error),
    });
    inFlight.start();
    inFlight.stop();
    fail(new Error('closed under it'));
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(reported).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('going() false ends the loop before a retry, and when the retry is due', async () => {
    let going = true;
    const { retrying, tries } = scripted([new Error('down')], () => going);
    retrying.start();
    await vi.advanceTimersByTimeAsync(delay(0));
    expect(tries).toHaveLength(2);
    going = false;
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(tries).toHaveLength(2);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("'again' tries at once; later() waits the backoff first, and after a running try", async () => {
    const { retrying, tries } = scripted(['again', 'again', undefined]);
    retrying.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(gaps(tries)).toEqual([0, 0]);

    const lost = scripted([undefined]);
    lost.retrying.later();
    lost.retrying.later();
    await vi.advanceTimersByTimeAsync(delay(0) - 1);
    expect(lost.tries).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(lost.tries).toHaveLength(1);

    let finish: () => void = () => {};
    const times: number[] = [];
    const running = new Retrying({
      attempt: () => {
        times.push(Date.now());
        return new Promise<void>((resolve) => (finish = resolve));
      },
      onError: () => undefined,
    });
    running.start();
    running.later();
    await vi.advanceTimersByTimeAsync(DEFAULTS.maxPark);
    expect(times).toHaveLength(1);
    finish();
    await vi.advanceTimersByTimeAsync(delay(0));
    expect(times).toHaveLength(2);
    expect(times[1]! - times[0]!).toBe(DEFAULTS.maxPark + delay(0));
    finish();
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(times).toHaveLength(2);
  });

  it('a try that throws at once counts as a failure', async () => {
    const errors: unknown[] = [];
    let n = 0;
    const retrying = new Retrying({
      attempt: () => {
        if (n++ === 0) throw new Error('sync');
        return Promise.resolve();
      },
      onError: (error) => errors.push(error),
    });
    retrying.start();
    await vi.advanceTimersByTimeAsync(delay(0));
    expect(n).toBe(2);
    expect(errors).toHaveLength(1);
  });
});

describe('Retrying, on real timers', () => {
  it('its retry timer does not hold the process open', async () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    try {
      const retrying = new Retrying({ attempt: () => Promise.reject(new Error('down')), onError: () => undefined });
      retrying.start();
      await new Promise((resolve) => setImmediate(resolve));
      const timer = spy.mock.results.at(-1)?.value as NodeJS.Timeout;
      expect(timer.hasRef()).toBe(false);
      retrying.stop();
    } finally {
      spy.mockRestore();
    }
  });
});
