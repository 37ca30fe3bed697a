import type { Primitive } from './primitive.js';

/** The exclusive lock: one holder at a time, each with its own fencing token; every store has it. */
export const mutex: Primitive = {
  kind: 'mutex',
  supports: () => true,
  acquire: (store, name, request) => store.acquire(name, request),
  extend: (store, name, owner, ttl) => store.extend(name, owner, ttl),
  release: (store, name, owner, handOn) => store.release(name, owner, handOn),
  leave: (store, name, owner, handOn) => store.leave(name, owner, handOn),
};
