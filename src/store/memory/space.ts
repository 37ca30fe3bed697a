import type { HandOff } from '../port.js';
import { LockRecord } from './record.js';

type Listener = (handOff: HandOff) => void;

/**
 * The locks of one prefix: a record per lock name, and the watchers of each name. A record with
 * nothing left in it is dropped after the step that emptied it, as Redis drops expired keys.
 */
export class Space {
  readonly #records = new Map<string, LockRecord>();
  readonly #watchers = new Map<string, Set<Listener>>();

  /** Run one step on the record of `name` (made empty if there is none). */
  step<T>(name: string, step: (record: LockRecord) => T): T {
    let record = this.#records.get(name);
    if (!record) {
      record = new LockRecord((handOff) => this.#publish(name, handOff));
      this.#records.set(name, record);
    }
    try {
      return step(record);
    } finally {
      if (record.empty) this.#records.delete(name);
    }
  }

  /** The names that have a record now (a snapshot). */
  names(): string[] {
    return [...this.#records.keys()];
  }

  /** Tell every watcher of `name`, after the step's reply, as Redis delivers a PUBLISH after the script's. */
  #publish(name: string, handOff: HandOff): void {
    setImmediate(() => {
      for (const listener of [...(this.#watchers.get(name) ?? [])]) listener(handOff);
    });
  }

  /** Hear the hand-offs of `name` until the returned function is called (once is enough). */
  watch(name: string, onHandOff: Listener): () => void {
    // A listener of its own per call, so one function watching twice is two watchers.
    const listener: Listener = (handOff) => onHandOff(handOff);
    let listeners = this.#watchers.get(name);
    if (!listeners) {
      listeners = new Set();
      this.#watchers.set(name, listeners);
    }
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0 && this.#watchers.get(name) === listeners) this.#watchers.delete(name);
    };
  }

  /** Watchers of `name`. */
  watching(name: string): number {
    return this.#watchers.get(name)?.size ?? 0;
  }

  /** Names with at least one watcher. */
  get watched(): number {
    return this.#watchers.size;
  }

  unwatchAll(): void {
    this.#watchers.clear();
  }
}
