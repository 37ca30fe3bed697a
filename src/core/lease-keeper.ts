import { now } from './clock.js';

/**
 * Something the keeper wakes up at a deadline: a held lock's watchdog tick. `at` and `slot` are
 * the keeper's own (when, and where in its queue; -1 when not scheduled), kept on the object so
 * that a held lock costs no entry of its own besides.
 */
export interface Kept {
  tick(): void;
  at: number;
  slot: number;
}

/**
 * Owns every watchdog deadline of one `Leasehold` instance: a queue ordered by deadline (a binary
 * heap) under one unref'd timer, set for the earliest, so a held lock never keeps a process alive
 * and costs no timer of its own; `stopAll()` stops them all on close. Callbacks never throw into
 * the timer: a failure becomes a lost lease, never an uncaught exception. The timer stays set when
 * the last lease leaves, and fires once with nothing due: a lock taken before then (one loop's next
 * lock, its deadline later) sets and clears no timer at all.
 */
export class LeaseKeeper {
  readonly #queue: Kept[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The deadline the timer is set for. */
  #armedFor = Number.POSITIVE_INFINITY;

  /** Call `kept.tick()` at monotonic time `at` (replacing any earlier schedule). */
  schedule(kept: Kept, at: number): void {
    const slot = kept.slot;
    kept.at = at;
    if (slot >= 0) {
      this.#siftUp(slot);
      this.#siftDown(kept.slot);
    } else {
      kept.slot = this.#queue.length;
      this.#queue.push(kept);
      this.#siftUp(kept.slot);
    }
    if (at < this.#armedFor) this.#arm(at);
  }

  cancel(kept: Kept): void {
    const slot = kept.slot;
    if (slot < 0) return;
    kept.slot = -1;
    const last = this.#queue.pop() as Kept;
    if (last !== kept) {
      this.#queue[slot] = last;
      last.slot = slot;
      this.#siftUp(slot);
      this.#siftDown(last.slot);
    }
    // The timer stays set for a deadline now gone: it finds nothing due, and sets itself for the
    // earliest left, if any.
  }

  /** Leases currently kept (tests use this to prove nothing leaks). */
  get size(): number {
    return this.#queue.length;
  }

  stopAll(): Kept[] {
    const kept = this.#queue.splice(0);
    for (const k of kept) k.slot = -1;
    this.#disarm();
    return kept;
  }

  #arm(at: number): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#armedFor = at;
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, Math.ceil(at - now())));
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Number.POSITIVE_INFINITY;
  }

  /**
   * Tick every lease due (a timer may fire up to 1 ms before the deadline it was set for). They are
   * taken off the queue first: a tick that schedules its lease again, however soon, waits for a
   * timer of its own, as it would with a timer per lease.
   */
  #fire(): void {
    this.#timer = undefined;
    this.#armedFor = Number.POSITIVE_INFINITY;
    const due = now() + 1;
    const queue = this.#queue;
    const ready: Kept[] = [];
    while (queue.length > 0 && (queue[0] as Kept).at <= due) {
      const kept = queue[0] as Kept;
      this.cancel(kept);
      ready.push(kept);
    }
    for (const kept of ready) kept.tick();
    // A tick that scheduled its lease again set the timer for that lease, which may come after a
    // lease that was already waiting: the timer is for the earliest.
    const head = queue[0];
    if (head !== undefined && head.at < this.#armedFor) this.#arm(head.at);
  }

  #siftUp(slot: number): void {
    const queue = this.#queue;
    const kept = queue[slot] as Kept;
    while (slot > 0) {
      const parent = (slot - 1) >> 1;
      const above = queue[parent] as Kept;
      if (above.at <= kept.at) break;
      queue[slot] = above;
      above.slot = slot;
      slot = parent;
    }
    queue[slot] = kept;
    kept.slot = slot;
  }

  #siftDown(slot: number): void {
    const queue = this.#queue;
    const kept = queue[slot] as Kept;
    const n = queue.length;
    for (;;) {
      let child = 2 * slot + 1;
      if (child >= n) break;
      const right = child + 1;
      if (right < n && (queue[right] as Kept).at < (queue[child] as Kept).at) child = right;
      const below = queue[child] as Kept;
      if (below.at >= kept.at) break;
      queue[slot] = below;
      below.slot = slot;
      slot = child;
    }
    queue[slot] = kept;
    kept.slot = slot;
  }
}
