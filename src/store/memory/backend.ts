import type { BackendEntry } from '../backend.js';
import { isStore, type Store } from '../port.js';

/** A Store object (the memory store, or one of the caller's): used as it is, under the Leasehold's prefix. */
export const storeBackend: BackendEntry = {
  describe: 'a Store such as new MemoryStore()',
  detect: isStore,
  create: (input, { prefix }) => {
    const store = input as Store;
    return { store: store.scope?.(prefix) ?? store, owned: false };
  },
};
