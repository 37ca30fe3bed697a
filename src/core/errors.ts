/**
 * Every error leasehold throws is a {@link LockError} with a stable `code`.
 * Subclasses exist only where a caller branches on the kind of failure.
 */

/**
 * Stable machine-readable codes carried by every {@link LockError}: each key is the code it stands
 * for, so `error.code === ErrorCode.LOCK_TIMEOUT` reads as the README's table does.
 */
export const ErrorCode = Object.freeze({
  /** An argument or option was invalid; the message names it and the value given. */
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  /** The `wait` budget ran out while another owner held the lock. */
  LOCK_TIMEOUT: 'LOCK_TIMEOUT',
  /** The lease is no longer ours: it expired, or another owner holds the lock. */
  LOCK_LOST: 'LOCK_LOST',
  /** The backend (Redis, PostgreSQL, etcd) did not answer in time, or its connection failed. */
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  /** Redlock: too few nodes agreed. */
  LOCK_QUORUM: 'LOCK_QUORUM',
  /** The backend answered with an error that is not about reachability (e.g. WRONGTYPE). */
  STORE_ERROR: 'STORE_ERROR',
  /** A call was made on a `Leasehold` after `close()`. */
  CLOSED: 'CLOSED',
  /** `assertLocked()` was called outside a held job lock. */
  NOT_LOCKED: 'NOT_LOCKED',
  /** The backend is configured so that it can lose locks (an eviction policy), and `unsafeConfig` is `'refuse'`. */
  UNSAFE_CONFIG: 'UNSAFE_CONFIG',
  /** Fewer replicas than `replicas` confirmed a grant or an extension within `replicaTimeout`. */
  NOT_REPLICATED: 'NOT_REPLICATED',
  /** @deprecated Use `ErrorCode.LOCK_TIMEOUT`. */
  TIMEOUT: 'LOCK_TIMEOUT',
  /** @deprecated Use `ErrorCode.LOCK_LOST`. */
  LOST: 'LOCK_LOST',
  /** @deprecated Use `ErrorCode.STORE_UNAVAILABLE` (the code is `'STORE_UNAVAILABLE'` on every backend). */
  UNAVAILABLE: 'STORE_UNAVAILABLE',
  /** @deprecated Use `ErrorCode.STORE_UNAVAILABLE` (the code is `'STORE_UNAVAILABLE'` on every backend). */
  REDIS_UNAVAILABLE: 'STORE_UNAVAILABLE',
  /** @deprecated Use `ErrorCode.LOCK_QUORUM`. */
  QUORUM: 'LOCK_QUORUM',
  /** @deprecated Use `ErrorCode.STORE_ERROR`. */
  STORE: 'STORE_ERROR',
} as const);

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Base class of every error leasehold throws. */
export class LockError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/**
 * A grant (or an extension) reached fewer replicas than asked within `replicaTimeout`: a failover
 * now could hand the lock to a second owner. An acquisition is given back before this is thrown.
 */
export class NotReplicatedError extends LockError {
  readonly lockName: string;
  /** Replicas that confirmed (for `durability: 'aof'`, that wrote it to their AOF). */
  readonly confirmed: number;
  /** Replicas asked for. */
  readonly wanted: number;

  constructor(lockName: string, operation: 'acquire' | 'extend', confirmed: number, wanted: number, detail = '') {
    super(
      ErrorCode.NOT_REPLICATED,
      `${operation} of lock "${lockName}" reached ${confirmed} of the ${wanted} replicas asked for${detail}`,
    );
    this.lockName = lockName;
    this.confirmed = confirmed;
    this.wanted = wanted;
  }
}

/** `acquire` waited its whole `wait` budget and the lock stayed held by someone else. */
export class LockTimeoutError extends LockError {
  readonly lockName: string;
  readonly waited: number;

  constructor(lockName: string, waited: number, options?: { cause?: unknown }) {
    super(ErrorCode.LOCK_TIMEOUT, `timed out after ${waited} ms waiting for lock "${lockName}"`, options);
    this.lockName = lockName;
    this.waited = waited;
  }
}

/**
 * Why a lease was lost:
 * - `not-owner`: the backend holds the lock for another owner;
 * - `expired`: the backend no longer holds the lock at all;
 * - `validity-elapsed`: this client's monotonic clock ran past the lease before an extension was
 *   confirmed (a pause, a blocked event loop, an unreachable or slow backend);
 * - `closed`: the `Leasehold` instance was closed while the lock was held;
 * - `released`: thrown by `extend()` on a lock this process already released (the signal does not abort on release).
 */
export type LostReason = 'not-owner' | 'expired' | 'validity-elapsed' | 'closed' | 'released';

/** Each reason in words, and who holds the lock now where that follows from the reason. */
/** Who holds a lock now, as its fencing counter records the grant. */
export interface CurrentHolder {
  readonly token: number;
  /** Server time of the grant, in ms since the epoch. */
  readonly takenAt: number;
  /** The instance label of the Leasehold that took it. */
  readonly instance: string;
}

function lostBecause(lockName: string, reason: LostReason, holder: CurrentHolder | undefined): string {
  switch (reason) {
    case 'not-owner':
      if (holder !== undefined && holder.instance !== '') {
        return `another owner holds it now: ${holder.instance}, since ${new Date(holder.takenAt).toISOString()} (fencing token ${holder.token})`;
      }
      return `another owner holds it now (which one is not known here; \`leasehold inspect '${lockName}'\` shows its instance and when it took the lock)`;
    case 'expired':
      return 'its lease ran out: nobody held it when the extension was tried';
    case 'validity-elapsed':
      return "its lease ran out on this client's clock before an extension was confirmed (a pause, a blocked event loop, or a slow or unreachable backend)";
    case 'closed':
      return 'the Leasehold instance was closed while it held the lock';
    case 'released':
      return 'this process released it already';
  }
}

/** The lease is no longer ours. Also the `reason` of an aborted `lock.signal`. */
export class LockLostError extends LockError {
  readonly lockName: string;
  readonly reason: LostReason;
  readonly fencingToken: number;
  /** Who holds the lock now, when known (reason `not-owner` on one Redis or the memory store). */
  readonly holder: CurrentHolder | undefined;

  constructor(
    lockName: string,
    reason: LostReason,
    fencingToken: number,
    options?: { cause?: unknown; holder?: CurrentHolder | undefined },
  ) {
    super(
      ErrorCode.LOCK_LOST,
      `lost lock "${lockName}" (fencing token ${fencingToken}): ${reason}: ${lostBecause(lockName, reason, options?.holder)}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.lockName = lockName;
    this.reason = reason;
    this.fencingToken = fencingToken;
    this.holder = options?.holder;
  }
}

/** The backend (Redis, PostgreSQL or etcd) could not be reached, or did not answer within `commandTimeout`. */
export class StoreUnavailableError extends LockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.STORE_UNAVAILABLE, message, options);
  }
}

/**
 * @deprecated The same class as {@link StoreUnavailableError} (so `instanceof` matches either name);
 * thrown by every backend, not only Redis.
 */
export const RedisUnavailableError = StoreUnavailableError;
/** @deprecated Use {@link StoreUnavailableError}. */
export type RedisUnavailableError = StoreUnavailableError;

/** One node's part in a Redlock decision. */
export interface NodeOutcome {
  /** Index of the node in the array given to `Leasehold`. */
  readonly node: number;
  /**
   * What the node answered: `acquired`, `held` (by another owner), `fenced` (raised its fencing
   * counter to the quorum's token), `extended`, `released`, `not-owner`, `expired`; `error` when
   * the call failed; `no-answer` when it did not answer within the per-node timeout, or had not yet
   * when the decision was made.
   */
  readonly outcome:
    | 'acquired'
    | 'held'
    | 'fenced'
    | 'extended'
    | 'released'
    | 'not-owner'
    | 'expired'
    | 'error'
    | 'no-answer';
  /** The node's error, for `error`, and the timeout for `no-answer` when the timeout fired. */
  readonly cause?: unknown;
}

/**
 * Redlock: fewer than a quorum of nodes agreed, because too few could be reached (or not in time).
 * Carries every node's outcome. A StoreUnavailableError, so `whenUnavailable` applies to it, with
 * its own code `LOCK_QUORUM`.
 */
export class QuorumError extends StoreUnavailableError {
  override readonly code: ErrorCode = ErrorCode.LOCK_QUORUM;
  readonly lockName: string;
  readonly quorum: number;
  readonly nodes: readonly NodeOutcome[];

  /** `reason` replaces "reached no quorum of N" in the message when the quorum failed otherwise. */
  constructor(lockName: string, action: string, quorum: number, nodes: readonly NodeOutcome[], reason?: string) {
    const summary = nodes.map((n) => `#${n.node}:${n.outcome}`).join(' ');
    super(`${action} "${lockName}" ${reason ?? `reached no quorum of ${quorum}`}: ${summary}`);
    this.lockName = lockName;
    this.quorum = quorum;
    this.nodes = nodes;
  }
}

/**
 * What a `with…` call rejects with when its work rejected: once the lease was lost (the signal
 * aborted with a LockLostError), that loss, with the work's own error as its cause; else the
 * work's error as it is.
 */
export function workFailure(error: unknown, signal: AbortSignal): unknown {
  const lost: unknown = signal.aborted ? signal.reason : undefined;
  if (!(lost instanceof LockLostError) || error instanceof LockLostError) return error;
  return new LockLostError(lost.lockName, lost.reason, lost.fencingToken, { cause: error, holder: lost.holder });
}

export function invalidArgument(message: string): LockError {
  return new LockError(ErrorCode.INVALID_ARGUMENT, message);
}

export function closedError(): LockError {
  return new LockError(ErrorCode.CLOSED, 'this Leasehold instance is closed');
}

/** An error in words, AggregateError (Node's happy eyeballs) unwrapped to its first cause. */
export function describeError(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return describeError(error.errors[0]);
  if (error instanceof Error && error.message !== '') return error.message;
  return String(error);
}
