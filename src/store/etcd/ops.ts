import { ErrorCode, LockError } from '../../core/errors.js';
import type { Compare, EtcdKeyValue, RangeResponse, RequestOp, TxnResponse } from './client.js';

/** The pieces of a transaction, in etcd's own terms, and strict reading of what comes back. */

export function put(key: Buffer, value: Buffer, lease?: string): RequestOp {
  return { request_put: lease === undefined ? { key, value } : { key, value, lease } };
}

export function remove(key: Buffer, end?: Buffer): RequestOp {
  return { request_delete_range: end === undefined ? { key } : { key, range_end: end } };
}

/** The first contender in line (lowest create revision) of a queue range, or the first `limit`. */
export function firstOf(range: { start: Buffer; end: Buffer }, limit = 1): RequestOp {
  return {
    request_range: { key: range.start, range_end: range.end, sort_target: 'Create', sort_order: 'Ascend', limit },
  };
}

/** The whole line of a queue range, oldest first; with `before`, only the keys created before that revision. */
export function lineOf(range: { start: Buffer; end: Buffer }, before?: number): RequestOp {
  const op = firstOf(range, 0);
  if (before !== undefined && op.request_range) op.request_range.max_create_revision = String(before - 1);
  return op;
}

export function get(key: Buffer): RequestOp {
  return { request_range: { key } };
}

export function count(range: { start: Buffer; end: Buffer }): RequestOp {
  return { request_range: { key: range.start, range_end: range.end, count_only: true } };
}

/** The last key of a range in key order (the latest tick). */
export function lastKeyOf(range: { start: Buffer; end: Buffer }): RequestOp {
  return {
    request_range: { key: range.start, range_end: range.end, sort_target: 'Key', sort_order: 'Descend', limit: 1 },
  };
}

/** A nested transaction: its own compare and branches, run as one op of the outer one. */
export function nested(compare: Compare[], success: RequestOp[], failure: RequestOp[] = []): RequestOp {
  return { request_txn: { compare, success, failure } };
}

/** No key in the range: compared on create revision, which is 0 only for a key that does not exist. */
export function emptyRange(range: { start: Buffer; end: Buffer }): Compare {
  return { key: range.start, range_end: range.end, target: 'Create', result: 'Equal', create_revision: '0' };
}

/** The key exists with create revision `revision` (0: it does not exist). */
export function createdAt(key: Buffer, revision: number): Compare {
  return { key, target: 'Create', result: 'Equal', create_revision: String(revision) };
}

/** The key exists (whatever its revision). */
export function exists(key: Buffer): Compare {
  return { key, target: 'Create', result: 'Greater', create_revision: '0' };
}

/** Every key of the range was created after revision `revision`: none is older. */
export function noneBefore(range: { start: Buffer; end: Buffer }, revision: number): Compare {
  return {
    key: range.start,
    range_end: range.end,
    target: 'Create',
    result: 'Greater',
    create_revision: String(revision - 1),
  };
}

/** Every key of the range was created at or before revision `revision`: none is newer. */
export function noneAfter(range: { start: Buffer; end: Buffer }, revision: number): Compare {
  return {
    key: range.start,
    range_end: range.end,
    target: 'Create',
    result: 'Less',
    create_revision: String(revision + 1),
  };
}

/** Every key of the range has a value above `value` (byte order); false for an empty range, as etcd has it. */
export function valuesAbove(range: { start: Buffer; end: Buffer }, value: Buffer): Compare {
  return { key: range.start, range_end: range.end, target: 'Value', result: 'Greater', value };
}

export function onLease(key: Buffer, lease: string): Compare {
  return { key, target: 'Lease', result: 'Equal', lease };
}

function badReply(what: string): LockError {
  return new LockError(ErrorCode.STORE_ERROR, `etcd3: the reply to ${what} has not the shape of a transaction's`);
}

/** The range answer at `index` of a transaction's branch. */
export function rangeAt(response: TxnResponse, index: number, what: string): RangeResponse {
  const range = response.responses[index]?.response_range;
  if (!range || !Array.isArray(range.kvs)) throw badReply(what);
  return range;
}

/** The keys of the range answer at `index`. */
export function kvsAt(response: TxnResponse, index: number, what: string): readonly EtcdKeyValue[] {
  return rangeAt(response, index, what).kvs;
}

/** The nested transaction's answer at `index`. */
export function txnAt(response: TxnResponse, index: number, what: string): TxnResponse {
  const txn = response.responses[index]?.response_txn;
  if (!txn || !Array.isArray(txn.responses)) throw badReply(what);
  return txn;
}
