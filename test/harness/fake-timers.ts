import { afterEach, beforeEach, vi } from 'vitest';

/** Each test of the calling suite runs on vitest's fake timers, and real timers come back after it. */
export function onFakeTimers(): void {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });
}
