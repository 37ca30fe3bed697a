/**
 * `leasehold`: what an application uses. The ports a backend implements, the Redis key layout, the
 * PostgreSQL migration SQL and each backend's input types are in `leasehold/store`.
 */
export { DEFAULTS, type WhenUnavailable } from './core/defaults.js';
export {
  ErrorCode,
  LockError,
  LockLostError,
  LockTimeoutError,
  type LostReason,
  NotReplicatedError,
  QuorumError,
  RedisUnavailableError,
  StoreUnavailableError,
} from './core/errors.js';
export { Lock } from './core/lock.js';
export {
  type AcquireAllOptions,
  type AcquireOptions,
  type BackendOperation,
  type LeadOptions,
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
export { type DeposedReason, Leadership, type LeadershipEvents } from './primitives/leadership.js';
export { MultiLock } from './primitives/multi-lock.js';
export { assertLocked } from './schedule/assert-locked.js';
export type { RunRecord } from './schedule/history.js';
export { Job } from './schedule/job.js';
export type { NodeCronCoordinator } from './schedule/node-cron.js';
export type { NodeCronCoordinatorOptions, RunOnceOptions, RunOptions, ScheduleOptions } from './schedule/options.js';
export type { HeldJobRun, JobRun, JobTask, RunOnceResult, SkipReason } from './schedule/types.js';
/**
 * `Store`: what `new Leasehold(store)` and LeaseholdModule's `store` option take (`new MemoryStore()`
 * or a store of your own); leasehold/nestjs names it from here. The ports it is made of, and
 * `Store` too, are in `leasehold/store`.
 */
export type { Store } from './store/index.js';
export { MemoryStore } from './store/memory/memory-store.js';
export type { Backend } from './store/registry.js';
