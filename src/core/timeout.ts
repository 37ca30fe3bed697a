import { now } from './clock.js';

/** A call waiting on its deadline, linked in the order the calls of its duration began. */
interface Pending {
  readonly deadline: number;
  /** Rejects the call; never throws. */
  readonly expire: () => void;
  prev: Pending | undefined;
  next: Pending | undefined;
}

/**
 * The calls bounded by one duration, in the order they began, which is the order of their
 * deadlines, under one timer. A call that settles leaves the list and touches no timer. The timer
 * is armed for the head's deadline, and when it fires it expires every call whose deadline has
 * come and is armed again for the next; it is unreferenced while no call waits, so it never keeps
 * a process alive that a per-call timer would have let go.
 */
class Deadlines {
  readonly #ms: number;
  readonly #onIdle: () => void;
  #head: Pending | undefined;
  #tail: Pending | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The deadline the timer is armed for: reached when it fires, whatever a coarser clock says. */
  #armedFor = 0;
  /** Expiring: a call added by an expiry waits for the timer armed after it, for the head's deadline. */
  #firing = false;

  constructor(ms: number, onIdle: () => void) {
    this.#ms = ms;
    this.#onIdle = onIdle;
  }

  add(expire: () => void): Pending {
    const entry: Pending = { deadline: now() + this.#ms, expire, prev: this.#tail, next: undefined };
    if (this.#tail === undefined) this.#head = entry;
    else this.#tail.next = entry;
    this.#tail = entry;
    if (this.#timer !== undefined) {
      if (entry === this.#head) this.#timer.ref();
    } else if (!this.#firing) {
      this.#arm(entry.deadline, this.#ms);
    }
    return entry;
  }

  remove(entry: Pending): void {
    if (entry.prev === undefined) {
      if (this.#head !== entry) return; // gone already
      this.#head = entry.next;
    } else {
      entry.prev.next = entry.next;
    }
    if (entry.next === undefined) this.#tail = entry.prev;
    else entry.next.prev = entry.prev;
    entry.prev = undefined;
    entry.next = undefined;
    if (this.#head === undefined) this.#timer?.unref();
  }

  /** Clear the timer if no call waits (an instance closing); a list with calls keeps it. */
  stopIfIdle(): boolean {
    if (this.#head !== undefined) return false;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    return true;
  }

  #arm(deadline: number, ms: number): void {
    this.#armedFor = deadline;
    this.#timer = setTimeout(this.#fire, ms);
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    this.#firing = true;
    const reached = Math.max(now(), this.#armedFor);
    let head = this.#head;
    while (head !== undefined && head.deadline <= reached) {
      this.remove(head);
      head.expire();
      head = this.#head;
    }
    this.#firing = false;
    if (head === undefined) this.#onIdle();
    else this.#arm(head.deadline, Math.max(1, Math.ceil(head.deadline - reached)));
  };
}

/**
 * Deadlines for calls, one list per duration, each under one timer (Deadlines): a call that settles
 * in time costs no timer of its own. One per store (store/bounded.ts), so that the calls of one
 * client share timers and those of another never wait on them. A list leaves when its timer fires
 * with nothing waiting, or when `stopIdle()` finds nothing waiting (close()).
 */
export class Timeouts {
  readonly #lists = new Map<number, Deadlines>();

  /**
   * Settle with `promise`, or reject with `onTimeout()` (or what it throws) after `ms`. The promise
   * itself keeps running: callers that must undo a late success attach to it.
   */
  bound<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const list = this.#listFor(ms);
      const entry = list.add(() => {
        let error: unknown;
        try {
          error = onTimeout();
        } catch (thrown) {
          error = thrown;
        }
        reject(error);
      });
      promise.then(
        (value) => {
          list.remove(entry);
          resolve(value);
        },
        (error: unknown) => {
          list.remove(entry);
          reject(error);
        },
      );
    });
  }

  /** Clear the timers no call waits on: an idle instance closing leaves none behind. */
  stopIdle(): void {
    for (const [ms, list] of this.#lists) if (list.stopIfIdle()) this.#lists.delete(ms);
  }

  #listFor(ms: number): Deadlines {
    let list = this.#lists.get(ms);
    if (list === undefined) {
      list = new Deadlines(ms, () => this.#lists.delete(ms));
      this.#lists.set(ms, list);
    }
    return list;
  }
}

/** The deadlines of calls made for no store in particular (a connection, a worker's step). */
const unowned = new Timeouts();

/** `Timeouts.bound` for a call that belongs to no store. */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => unknown): Promise<T> {
  return unowned.bound(promise, ms, onTimeout);
}
