import { describeError, ErrorCode, LockError, StoreUnavailableError } from '../../core/errors.js';

/**
 * What an etcd3 error means. etcd3 marks the errors its own fault handling retries (a connection
 * lost or refused, a deadline, no leader, a leader change, a request that timed out inside the
 * cluster) with a symbol of its own; with a broken circuit and a closed client those are
 * "unavailable": trying later or elsewhere is the remedy. Every other error is an answer from a
 * live server (permission denied, a malformed request): a store error, so `whenUnavailable: 'run'`
 * never runs work unlocked because of it.
 */

const UNAVAILABLE_NAMES = new Set(['BrokenCircuitError', 'TaskCancelledError', 'ClientClosedError', 'SessionLost']);

/** gRPC status codes of reachability: CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, UNAVAILABLE. */
const UNAVAILABLE_CODES: ReadonlySet<number> = new Set([1, 4, 8, 10, 14]);

/** etcd3's `RecoverableError` symbol is not global: known by its description. */
function recoverable(error: Error): boolean {
  return Object.getOwnPropertySymbols(error).some((s) => s.description === 'RecoverableError');
}

/** A failure of reachability (trying later, or another member, is the remedy), not an answer. */
export function unavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (recoverable(error) || UNAVAILABLE_NAMES.has(error.name) || UNAVAILABLE_NAMES.has(error.constructor.name)) {
    return true;
  }
  // A stream's error comes as grpc-js emits it, uncast by etcd3: known by its status code.
  return UNAVAILABLE_CODES.has((error as { code?: unknown }).code as number);
}

/** The lease a request named is gone (revoked or expired): the session it stood for is lost. */
export function isLeaseGone(error: unknown): boolean {
  return error instanceof Error && error.constructor.name === 'EtcdLeaseInvalidError';
}

/** The LockError for `error`, thrown by `action` on the client that connects to `address`. */
export function storeError(error: unknown, action: string, address: string): LockError {
  if (error instanceof LockError) return error;
  const message = `etcd3: ${action} on ${address} failed: ${describeError(error)}`;
  if (unavailable(error)) return new StoreUnavailableError(message, { cause: error });
  return new LockError(ErrorCode.STORE_ERROR, message, { cause: error });
}
