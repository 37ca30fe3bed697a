import { describe, expect, it, vi } from 'vitest';
import { DEFAULTS } from '../../../src/core/defaults.js';
import type { HandOff } from '../../../src/core/engine.js';
import { type Subscribe, WaitQueues } from '../../../src/core/waiting.js';
import { onFakeTimers } from '../../harness/fake-timers.js';

/** A release channel whose first `failures` subscriptions fail; `deliver` reaches the live one. */
function channel(failures: number) {
  const state = { calls: 0, deliver: undefined as ((handOff: HandOff) => void) | undefined };
  const subscribe: Subscribe = async (onHandOff) => {
    state.calls++;
    if (state.calls <= failures) throw new Error(`subscription ${state.calls} failed`);
    state.deliver = onHandOff;
    return () => {
      state.deliver = undefined;
    };
  };
  return { state, subscribe };
}

describe('WaitQueues: the release subscription', () => {
  onFakeTimers();

  it('fails once: is tried again after resubscribeDelay while a waiter waits, then carries the hand-off that wakes it', async () => {
    const errors: unknown[] = [];
    const queues = new WaitQueues({ reservation: DEFAULTS.reservation, onError: (e) => errors.push(e) });
    const { state, subscribe } = channel(1);
    const waiter = queues.join('x', 'w1', subscribe);
    await waiter.ready();
    expect(waiter.liveSince).toBeUndefined();
    expect(errors).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(DEFAULTS.resubscribeDelay - 1);
    expect(state.calls).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(state.calls).toBe(2);
    expect(waiter.liveSince).toBeDefined();
    let woken = false;
    const parked = waiter.park(DEFAULTS.maxPark).then(() => {
      woken = true;
    });
    state.deliver?.({ woken: 'w1', next: [] });
    await parked;
    expect(woken).toBe(true);
    expect(errors).toHaveLength(1);
    waiter.leave();
    queues.close();
    expect(state.deliver).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('failing: is not tried again once its last waiter left, and leaves no timer', async () => {
    const errors: unknown[] = [];
    const queues = new WaitQueues({ reservation: DEFAULTS.reservation, onError: (e) => errors.push(e) });
    const { state, subscribe } = channel(Number.POSITIVE_INFINITY);
    const waiter = queues.join('x', 'w1', subscribe);
    await waiter.ready();
    await vi.advanceTimersByTimeAsync(DEFAULTS.resubscribeDelay);
    expect(state.calls).toBe(2);
    waiter.leave();
    expect(queues.listening('x')).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10 * DEFAULTS.maxPark);
    expect(state.calls).toBe(2);
    expect(errors).toHaveLength(2);
    queues.close();
  });
});

describe('WaitQueues: the waiters a hand-off names next', () => {
  onFakeTimers();

  /**
   * w2 and w3 park for maxPark; `handOff` names them next; when each is let out, in fake ms, and
   * `drift`: the real ms the run took. A park's timer is armed against the real monotonic clock, so
   * it fires up to that much fake time early.
   */
  async function retries(handOff: HandOff): Promise<{ w2: number; w3: number; drift: number }> {
    const queues = new WaitQueues({ reservation: DEFAULTS.reservation, onError: () => {} });
    const { state, subscribe } = channel(0);
    const waiters = ['w2', 'w3'].map((owner) => queues.join('x', owner, subscribe));
    for (const w of waiters) await w.ready();
    const out: number[] = [];
    let t = 0;
    const parked = waiters.map((w, i) =>
      w.park(DEFAULTS.maxPark).then(() => {
        out[i] = t;
      }),
    );
    const began = performance.now();
    state.deliver?.(handOff);
    for (; t < DEFAULTS.maxPark && out.filter((x) => x !== undefined).length < 2; t++) {
      await vi.advanceTimersByTimeAsync(1);
    }
    await Promise.all(parked);
    const drift = performance.now() - began;
    for (const w of waiters) w.leave();
    queues.close();
    return { w2: out[0] as number, w3: out[1] as number, drift };
  }

  it('after a reservation, the i-th retries once i + 1 reservations could have lapsed', async () => {
    const lapse = DEFAULTS.reservation + DEFAULTS.expiryMargin;
    const { w2, w3, drift } = await retries({ woken: 'w1', next: ['w2', 'w3'] });
    expect(w2).toBeGreaterThanOrEqual(lapse - drift - 1);
    expect(w2).toBeLessThanOrEqual(lapse + 1);
    expect(w3).toBeGreaterThanOrEqual(2 * lapse - drift - 1);
    expect(w3).toBeLessThanOrEqual(2 * lapse + 1);
  });

  it('after a grant outright, once its lease could have run out (then a reservation each), not at a lapse', async () => {
    const lapse = DEFAULTS.reservation + DEFAULTS.expiryMargin;
    const grantedFor = 1_000;
    const { w2, w3, drift } = await retries({ woken: 'w1', next: ['w2', 'w3'], grantedFor });
    expect(w2).toBeGreaterThanOrEqual(grantedFor - drift);
    expect(w2).toBeLessThanOrEqual(grantedFor + DEFAULTS.expiryMargin + 1);
    expect(w3).toBeGreaterThanOrEqual(grantedFor + lapse - drift);
    expect(w3).toBeLessThanOrEqual(grantedFor + DEFAULTS.expiryMargin + lapse + 1);
  });
});
