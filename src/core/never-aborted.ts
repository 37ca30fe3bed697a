/** A signal that never aborts: what work run without a lock is given. */
export const NEVER_ABORTED: AbortSignal = new AbortController().signal;
