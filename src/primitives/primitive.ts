import type { AcquireReply, AcquireRequest, ExtendReply, LeaseStore, ReleaseReply, Store } from '../store/port.js';

/**
 * A primitive: one kind of lock, as the steps it takes on one store. A topology (one server, or a
 * quorum of independent masters; src/topology/) runs these steps on its store or stores and adds
 * what no primitive decides: commandTimeout, validity on the client's clock, late grants given back,
 * votes; the acquire loop (src/core/acquire-loop.ts) adds waiting. So a new primitive (a semaphore,
 * a read-write lock) is one file here, over the store capability it needs, and gets both
 * topologies, fair waiting, the watchdog and the Lock handle as they are.
 */
export interface Primitive {
  /** What it is, for messages ('mutex'). */
  readonly kind: string;
  /** Whether `store` has the capabilities this primitive needs; checked once, at construction. */
  supports(store: Store): boolean;
  /** Take it for `request.owner` if free (or join the queue when refused, per `request.queue`). */
  acquire(store: LeaseStore, name: string, request: AcquireRequest): Promise<AcquireReply>;
  extend(store: LeaseStore, name: string, owner: string, ttl: number): Promise<ExtendReply>;
  release(store: LeaseStore, name: string, owner: string): Promise<ReleaseReply>;
  /** A waiter gives up: leave the queue, passing on a reservation made for it. */
  leave(store: LeaseStore, name: string, owner: string): Promise<void>;
}
