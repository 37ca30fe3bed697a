import { type NodeOutcome, StoreUnavailableError } from '../core/errors.js';
import { type Counting, countVote, emptyTally, pending, type Tally, type Vote } from '../core/quorum.js';
import type { StoreInfo } from '../store/port.js';

/**
 * One round of a quorum: one call sent to several nodes at once, each bounded by the per-node
 * timeout, counted as votes as the answers come in.
 */
export type Outcome = NodeOutcome['outcome'];

type Slot<T> =
  | { readonly state: 'pending' }
  | { readonly state: 'answered'; readonly value: T }
  | { readonly state: 'failed'; readonly error: unknown; readonly timedOut: boolean };

export type Test = (tally: Tally) => boolean;

/**
 * One call sent to several nodes at once, bounded by the per-node timeout. `until` resolves as
 * soon as a condition on the tally holds (or every node is in), so a decision never waits on nodes
 * it does not need. The raw calls keep running: a late answer can still be acted on.
 */
export class Round<T, S extends StoreInfo = StoreInfo> {
  readonly nodes: readonly number[];
  readonly calls: readonly Promise<T>[];
  readonly slots: Slot<T>[];
  readonly #counts: Counting;
  readonly #action: string;
  readonly #stores: readonly S[];
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The verdict of a timer that fired, due once the event loop has read its sockets. */
  #verdict: ReturnType<typeof setImmediate> | undefined;
  #waiters: { readonly test: Test; readonly resolve: () => void }[] = [];
  #onLateFailure: ((error: unknown, action: string) => void) | undefined;

  constructor(
    stores: readonly S[],
    nodes: readonly number[],
    quorum: number,
    action: string,
    timeout: number,
    call: (store: S) => Promise<T>,
    vote: (value: T) => Vote,
  ) {
    this.nodes = nodes;
    this.#stores = stores;
    this.#action = action;
    this.#counts = emptyTally(nodes.length, quorum);
    this.slots = nodes.map(() => ({ state: 'pending' }));
    this.calls = nodes.map((node, i) => {
      let raw: Promise<T>;
      try {
        const store = stores[node];
        if (!store) throw new RangeError(`no Redlock node #${node}`);
        raw = call(store);
      } catch (error) {
        raw = Promise.reject(error);
      }
      raw.then(
        (value) => this.#settle(i, { state: 'answered', value }, vote(value)),
        (error: unknown) => this.#settle(i, { state: 'failed', error, timedOut: false }, 'error'),
      );
      return raw;
    });
    // Every call went out just now with the same bound, so one timer serves the whole round.
    // The verdict waits one turn of the event loop past the timer: a loop that was blocked runs
    // timers before it reads sockets, and answers already there must not count as none.
    if (nodes.length > 0) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#verdict = setImmediate(() => this.#expire(timeout));
      }, timeout);
    }
  }

  get tally(): Tally {
    return this.#counts;
  }

  /** Resolves once `test` holds for the tally, or every node has answered, failed or timed out. */
  until(test: Test): Promise<void> {
    if (test(this.#counts) || pending(this.#counts) === 0) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ test, resolve }));
  }

  /** Resolves once node `i` of this round has answered, failed or timed out. */
  settled(i: number): Promise<void> {
    return this.until(() => this.slots[i]?.state !== 'pending');
  }

  /**
   * From now on, hand every node failure to `onFailure`: the ones already in when `existing` is set
   * (they are reported nowhere else), and every later one (they come after the decision).
   */
  reportFailures(onFailure: (error: unknown, action: string) => void, existing: boolean): void {
    if (existing && this.#counts.errors > 0) {
      for (const slot of this.slots) if (slot.state === 'failed') onFailure(slot.error, this.#action);
    }
    this.#onLateFailure = onFailure;
  }

  #expire(timeout: number): void {
    this.#verdict = undefined;
    this.slots.forEach((slot, i) => {
      if (slot.state !== 'pending') return;
      const node = this.nodes[i];
      const kind = node === undefined ? 'unknown' : (this.#stores[node]?.kind ?? 'unknown');
      const error = new StoreUnavailableError(
        `node #${node} (${kind}): ${this.#action} got no answer within ${timeout} ms (nodeTimeout)`,
      );
      this.#settle(i, { state: 'failed', error, timedOut: true }, 'error');
    });
  }

  #settle(i: number, slot: Slot<T>, vote: Vote): void {
    // A node that timed out is settled; its late answer is left to whoever holds `calls`.
    if (this.slots[i]?.state !== 'pending') return;
    this.slots[i] = slot;
    const counts = this.#counts;
    countVote(counts, vote);
    if (slot.state === 'failed') this.#onLateFailure?.(slot.error, this.#action);
    const done = pending(counts) === 0;
    if (done) {
      clearTimeout(this.#timer);
      clearImmediate(this.#verdict);
      this.#timer = undefined;
      this.#verdict = undefined;
    }
    if (this.#waiters.length === 0) return;
    let kept = 0;
    for (const waiter of this.#waiters) {
      if (!done && !waiter.test(counts)) this.#waiters[kept++] = waiter;
      else waiter.resolve();
    }
    this.#waiters.length = kept;
  }

  /** Each node's outcome, with `answer` naming what an answer means. */
  outcomes(answer: (value: T) => Outcome): NodeOutcome[] {
    return this.nodes.map((node, i): NodeOutcome => {
      const slot = this.slots[i] ?? { state: 'pending' };
      if (slot.state === 'answered') return { node, outcome: answer(slot.value) };
      if (slot.state === 'failed') return { node, outcome: slot.timedOut ? 'no-answer' : 'error', cause: slot.error };
      return { node, outcome: 'no-answer' };
    });
  }
}
