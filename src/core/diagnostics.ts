import { channel, type TracingChannel, tracingChannel } from 'node:diagnostics_channel';

/**
 * What leasehold tells `node:diagnostics_channel`, for tracing and metrics (leasehold/otel
 * subscribes to these; so can anything else). Nothing is built or published while nobody
 * subscribes: every publisher checks `hasSubscribers` first. The tracing channels (acquire,
 * extend, release) publish start / end / asyncStart / asyncEnd / error, as Node defines them,
 * each with the context object below; the `result` of asyncEnd is filled in before it fires.
 * The others are plain channels.
 */
export const CHANNELS = Object.freeze({
  /** Tracing: one acquisition, its wait included. */
  acquire: 'leasehold:acquire',
  /** Tracing: one extension (the watchdog's or the caller's). */
  extend: 'leasehold:extend',
  /** Tracing: one release. */
  release: 'leasehold:release',
  /** A held lease was lost. */
  lost: 'leasehold:lost',
  /** A hand-off reached this instance (the waiter it names, and those next). */
  handoff: 'leasehold:handoff',
  /** A Redlock round was decided (each node's outcome). */
  quorum: 'leasehold:quorum',
  /** A scheduled job's tick ran, failed, was lost or was skipped. */
  job: 'leasehold:job',
  /** A background backend failure (as the `backendError` event). */
  backendError: 'leasehold:backend-error',
});

/** What every message names. */
export interface LockMessage {
  readonly name: string;
  /** The Leasehold's instance label. */
  readonly instance: string;
}

/** The context of one traced acquisition; `fencingToken`, `owner` and `waited` are set once it is granted. */
export interface AcquireContext extends LockMessage {
  /** ms it may wait. */
  readonly wait: number;
  readonly ttl: number;
  /** 'mutex', or the primitive's kind. */
  readonly kind: string;
  owner?: string;
  fencingToken?: number;
  /** ms from the call to the grant (or to the error). */
  waited?: number;
  /** How it ended: acquired, or the error's code / 'timeout' / 'aborted'. */
  outcome?: string;
}

export interface ExtendContext extends LockMessage {
  readonly owner: string;
  readonly fencingToken: number;
  readonly ttl: number;
  outcome?: 'extended' | 'lost' | 'failed';
}

export interface ReleaseContext extends LockMessage {
  readonly owner: string;
  readonly fencingToken: number;
  /** ms the lease was held, acquisition to release. */
  readonly heldFor: number;
  released?: boolean;
}

export interface LostMessage extends LockMessage {
  readonly owner: string;
  readonly fencingToken: number;
  readonly reason: string;
  readonly heldFor: number;
}

export interface HandOffMessage {
  readonly name: string;
  readonly woken: string | null;
  readonly next: readonly string[];
}

export interface QuorumMessage {
  readonly name: string;
  readonly operation: 'acquire' | 'extend' | 'release';
  readonly quorum: number;
  readonly verdict: string;
  readonly outcomes: readonly { readonly node: number; readonly outcome: string }[];
}

export interface JobMessage extends LockMessage {
  readonly tick: Date | null;
  /** ran, failed, lost or skipped. */
  readonly outcome: 'ran' | 'failed' | 'lost' | 'skipped';
  /** Why it was skipped (locked, already-ran, unavailable, error, clock-skew). */
  readonly reason?: string;
  readonly duration?: number;
  readonly fencingToken?: number | null;
}

export interface BackendErrorMessage {
  readonly instance: string;
  readonly operation: string;
  readonly error: unknown;
}

export const tracing: {
  readonly acquire: TracingChannel<AcquireContext, AcquireContext>;
  readonly extend: TracingChannel<ExtendContext, ExtendContext>;
  readonly release: TracingChannel<ReleaseContext, ReleaseContext>;
} = {
  acquire: tracingChannel(CHANNELS.acquire),
  extend: tracingChannel(CHANNELS.extend),
  release: tracingChannel(CHANNELS.release),
};

export const channels = {
  lost: channel(CHANNELS.lost),
  handoff: channel(CHANNELS.handoff),
  quorum: channel(CHANNELS.quorum),
  job: channel(CHANNELS.job),
  backendError: channel(CHANNELS.backendError),
};

/** Whether anyone listens on a tracing channel (any of its five events). */
export function traced<C extends object>(tc: TracingChannel<C, C>): boolean {
  const t = tc as unknown as {
    hasSubscribers?: boolean;
    start: { hasSubscribers: boolean };
    asyncEnd: { hasSubscribers: boolean };
    error: { hasSubscribers: boolean };
  };
  if (typeof t.hasSubscribers === 'boolean') return t.hasSubscribers;
  return t.start.hasSubscribers || t.asyncEnd.hasSubscribers || t.error.hasSubscribers;
}

/**
 * Run `fn` traced on `tc` with `context` when anyone listens; else just run it. `settle` fills in
 * the context from the result before asyncEnd fires.
 */
export function trace<T, C extends object>(
  tc: TracingChannel<C, C>,
  context: () => C,
  fn: () => Promise<T>,
  settle: (context: C, result: T) => void,
  fail: (context: C, error: unknown) => void = () => {},
): Promise<T> {
  if (!traced(tc)) return fn();
  const ctx = context();
  return tc.tracePromise(async () => {
    try {
      const result = await fn();
      settle(ctx, result);
      return result;
    } catch (error) {
      fail(ctx, error);
      throw error;
    }
  }, ctx);
}

/** What an error is called in a message's outcome: its LockError code, or 'error'. */
export function outcomeOf(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : 'error';
}
