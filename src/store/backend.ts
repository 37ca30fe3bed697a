import type { Store, StoreSettings } from './port.js';

/** What a backend is built with: the Leasehold's settings and where background failures go. */
export interface BackendOptions extends StoreSettings {
  readonly onError: (error: unknown) => void;
}

/** One kind of backend: how to recognise its client, and how to build a Store over it. */
export interface BackendEntry {
  /** What the backend is, for the message when nothing matches. */
  readonly describe: string;
  detect(input: unknown): boolean;
  /** The store, and whether we opened it (so `close()` closes only what is ours). */
  create(input: unknown, options: BackendOptions): { readonly store: Store; readonly owned: boolean };
}
