import { describe, expect, it, vi } from 'vitest';
import { DEFAULTS } from '../../../src/core/defaults.js';
import { lookUntilFirst } from '../../../src/store/etcd/tracker.js';
import { onFakeTimers } from '../../harness/fake-timers.js';

describe('etcd trackers: lookUntilFirst', () => {
  onFakeTimers();

  it('a first look that fails rejects ready and is tried again after resubscribeDelay; later failures go to onError', async () => {
    const errors: unknown[] = [];
    const outcomes: Array<Error | 'again' | 'first'> = [
      new Error('range failed'),
      'again',
      new Error('watch lost'),
      'first',
    ];
    let looks = 0;
    const { ready, looking } = lookUntilFirst(
      async (settle) => {
        const outcome = outcomes[looks++];
        if (outcome instanceof Error) throw outcome;
        settle();
        return outcome ?? 'first';
      },
      (e) => errors.push(e),
    );
    await expect(ready).rejects.toThrow('range failed');
    expect(looks).toBe(1);
    await vi.advanceTimersByTimeAsync(DEFAULTS.resubscribeDelay);
    // Tried again; after a deletion ('again') at once, and the failure after it waits the first delay again.
    expect(looks).toBe(3);
    expect(errors.map(String)).toEqual(['Error: watch lost']);
    await vi.advanceTimersByTimeAsync(DEFAULTS.resubscribeDelay);
    expect(looks).toBe(4);
    expect(vi.getTimerCount()).toBe(0);
    looking.stop();
  });
});
