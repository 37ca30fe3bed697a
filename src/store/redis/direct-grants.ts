/** A lock a release of this store granted outright to one of this instance's waiters. */
export interface DirectGrant {
  readonly fence: number;
  /** Monotonic time the release was sent: the lease began after it. */
  readonly since: number;
}

/**
 * The direct grants of one Redis store, kept until the waiter each names makes its next call:
 * its acquire answers from here without a round trip, its leave gives the grant back on the
 * server (leave.lua). Core never sees them: to the waiting code a direct grant is a plain
 * hand-off that names the waiter.
 */
export class DirectGrants {
  readonly #byName = new Map<string, Map<string, DirectGrant>>();

  get size(): number {
    return this.#byName.size;
  }

  keep(name: string, owner: string, grant: DirectGrant): void {
    let owners = this.#byName.get(name);
    if (!owners) {
      owners = new Map();
      this.#byName.set(name, owners);
    }
    owners.set(owner, grant);
  }

  /** The grant kept for `owner` on `name`, taken out. */
  take(name: string, owner: string): DirectGrant | undefined {
    const owners = this.#byName.get(name);
    if (owners === undefined) return undefined;
    const grant = owners.get(owner);
    if (grant !== undefined && owners.delete(owner) && owners.size === 0) this.#byName.delete(name);
    return grant;
  }

  /**
   * Drop what is kept for `name` (when a watch of it stops). Never given back here: an entry left
   * is a grant its waiter also took by an attempt of its own (sent before the release's reply
   * came), and a waiter still waiting finds the lock its own on its next acquire.
   */
  forget(name: string): void {
    this.#byName.delete(name);
  }
}
