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
