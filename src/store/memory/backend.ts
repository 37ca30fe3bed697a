import type { BackendEntry } from '../backend.js';
import { isStore, type Store } from '../port.js';

/** A Store object (the memory store, or one of the caller's): bound to the Leasehold's settings where it can be. */
export const storeBackend: BackendEntry = {
  describe: 'a Store such as new MemoryStore()',
  detect: isStore,
  create: (input, { onError: _, ...settings }) => {
    const store = input as Store;
    return { store: store.bind?.(settings) ?? store, owned: false };
  },
};
