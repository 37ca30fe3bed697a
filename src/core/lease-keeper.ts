import { now } from './clock.js';

/** Something the keeper wakes up at a deadline: a held lock's watchdog tick. */
export interface Kept {
  tick(): void;
}

/**
 * Owns every watchdog timer of one `Leasehold` instance: one timer per held lock, unref'd so a
 * held lock never keeps a process alive, and all stopped by `stopAll()` on close. Callbacks
 * never throw into the timer: a failure becomes a lost lease, never an uncaught exception.
 */
export class LeaseKeeper {
  readonly #timers = new Map<Kept, ReturnType<typeof setTimeout>>();

  /** Call `kept.tick()` at monotonic time `at` (replacing any earlier schedule). */
  schedule(kept: Kept, at: number): void {
    const existing = this.#timers.get(kept);
    if (existing) clearTimeout(existing);
    const timer = setTimeout(
      () => {
        this.#timers.delete(kept);
        kept.tick();
      },
      Math.max(0, Math.ceil(at - now())),
    );
    timer.unref();
    this.#timers.set(kept, timer);
  }

  cancel(kept: Kept): void {
    const timer = this.#timers.get(kept);
    if (timer) clearTimeout(timer);
    this.#timers.delete(kept);
  }

  /** Leases currently kept (tests use this to prove nothing leaks). */
  get size(): number {
    return this.#timers.size;
  }

  stopAll(): Kept[] {
    const kept = [...this.#timers.keys()];
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
    return kept;
  }
}
