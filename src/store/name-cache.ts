/**
 * Values built from a lock's name, kept for the latest names used so a call and the next on the
 * same name build them once; past `kept` names it starts over (it only saves building strings).
 */
export class NameCache<V> {
  readonly #built = new Map<string, V>();
  readonly #build: (name: string) => V;
  readonly #kept: number;

  constructor(build: (name: string) => V, kept = 1024) {
    this.#build = build;
    this.#kept = kept;
  }

  get(name: string): V {
    let value = this.#built.get(name);
    if (value === undefined) {
      if (this.#built.size >= this.#kept) this.#built.clear();
      value = this.#build(name);
      this.#built.set(name, value);
    }
    return value;
  }
}
