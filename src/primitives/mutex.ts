import type { Primitive } from './primitive.js';
import { kindMismatch } from './shared.js';

/** The exclusive lock: one holder at a time, each with its own fencing token; every store has it. */
export const mutex: Primitive = {
  kind: 'mutex',
  supports: () => true,
  acquire: async (store, name, request) => {
    const reply = await store.acquire(name, request);
    if ('heldAs' in reply) throw kindMismatch("a plain acquire (`mode: 'exclusive'`)", name, reply.heldAs);
    return reply;
  },
  extend: (store, name, owner, ttl) => store.extend(name, owner, ttl),
  release: (store, name, owner) => store.release(name, owner),
  leave: (store, name, owner) => store.leave(name, owner),
};
