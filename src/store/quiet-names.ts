/**
 * The names whose last release through one store found nobody behind it: their next acquire and
 * release may take the store's cheaper path, which answers only the common case and leaves the
 * rest to the full call. A name is forgotten as soon as the cheap path meets anything else; at
 * most `QUIET_NAMES` are kept, the one noted first giving way, and a forgotten name costs what
 * it did before.
 */
export const QUIET_NAMES = 1024;

export class QuietNames {
  readonly #names = new Set<string>();

  has(name: string): boolean {
    return this.#names.has(name);
  }

  /** `name`'s release found nobody behind it. */
  note(name: string): void {
    if (this.#names.has(name)) return;
    if (this.#names.size >= QUIET_NAMES) this.#names.delete(this.#names.values().next().value as string);
    this.#names.add(name);
  }

  /** `name` met a holder or a waiter: its calls go the full way until a release finds nobody again. */
  forget(name: string): void {
    this.#names.delete(name);
  }
}
