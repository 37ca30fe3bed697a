export { DEFAULTS, type WhenUnavailable } from './core/defaults.js';
export {
  ErrorCode,
  LockError,
  LockLostError,
  LockTimeoutError,
  type LostReason,
  type NodeOutcome,
  QuorumError,
  RedisUnavailableError,
} from './core/errors.js';
export {
  type AcquireOptions,
  Leasehold,
  type LeaseholdEvents,
  type LeaseholdOptions,
  type LockEvent,
  type TryAcquireOptions,
  type TryResult,
  type TryWithLockOptions,
  type WithLockOptions,
  type Work,
} from './leasehold.js';
export { Lock } from './locks/lock.js';
export { type LockKeys, lockKeys } from './store/keys.js';
export { MemoryStore } from './store/memory/memory-store.js';
export type { AcquireReply, ExtendReply, LockState, ReleaseReply, Store } from './store/port.js';
export { STORE } from './store/port.js';
export type { Backend } from './store/resolve.js';
