import { invalidArgument } from '../core/errors.js';
import { type LeaseStore, portsOf, type SharedStore } from '../store/port.js';
import type { Primitive } from './primitive.js';

/**
 * Locks of several holders, over the SharedStore capability: the counting semaphore (`limit: n`)
 * and the read-write lock's shared mode (`mode: 'shared'`, a limit of 0 at the store). The
 * read-write lock's exclusive mode is the mutex itself (mutex.ts): one lock per name, so an
 * exclusive holder (a mutex, a job lock) excludes every shared hold and any shared hold excludes it.
 * Each hold has its own lease, owner and fencing token; waiting, the watchdog and the Lock handle
 * are the mutex's. One store only: on Redlock's independent masters a majority vote bounds no
 * count (with 3 masters and 2 permits, three holders can each win two masters), and waiters do not
 * queue there, which writer preference rests on.
 */

/** How a lock is called in messages, by the limit it is held with at the store (-1: exclusively). */
export function describeLimit(limit: number): string {
  if (limit < 0) return "exclusively (a plain acquire, `mode: 'exclusive'` or a job's run)";
  return limit === 0
    ? 'in shared mode (a read-write lock)'
    : `as a semaphore of ${limit} permit${limit === 1 ? '' : 's'}`;
}

/** What a call that asked for one kind of lock (`asked`) is refused with, the name being held as another. */
export function kindMismatch(asked: string, name: string, heldAs: number): Error {
  return invalidArgument(`${asked} does not match lock "${name}", held ${describeLimit(heldAs)}`);
}

const shared = (store: LeaseStore) => store as LeaseStore & SharedStore;

/**
 * Holds of `limit` at the store (0: shared mode). `asked` names the option the caller gave, for the
 * message of a lock held as another kind.
 */
function holds(kind: string, limit: number, asked: string): Primitive {
  return {
    kind,
    supports: (store) => portsOf(store).shared !== undefined,
    acquire: async (store, name, { minFence: _, ...request }) => {
      const reply = await shared(store).acquireShared(name, { ...request, limit });
      if ('heldAs' in reply) throw kindMismatch(asked, name, reply.heldAs);
      return reply;
    },
    extend: (store, name, owner, ttl) => shared(store).extendShared(name, owner, ttl),
    release: (store, name, owner) => shared(store).releaseShared(name, owner),
    leave: (store, name, owner) => shared(store).leaveShared(name, owner),
  };
}

/** The counting semaphore: at most `limit` holders of a name at once, waiting FIFO. */
export function semaphore(limit: number): Primitive {
  return holds('semaphore', limit, `\`limit: ${limit}\``);
}

/** The read-write lock's shared mode: shared holders coexist; writers queued ahead are not overtaken. */
export function sharedMode(): Primitive {
  return holds('read-write lock', 0, "`mode: 'shared'`");
}
