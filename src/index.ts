export { DEFAULTS, type WhenUnavailable } from './core/defaults.js';
export {
  type CurrentHolder,
  ErrorCode,
  LockError,
  LockLostError,
  LockTimeoutError,
  type LostReason,
  type NodeOutcome,
  NotReplicatedError,
  QuorumError,
  RedisUnavailableError,
  StoreUnavailableError,
} from './core/errors.js';
export { Lock } from './core/lock.js';
export type { LockMode } from './core/validate.js';
export {
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
export type { RunOutcome, RunRecord } from './schedule/history.js';
export { Job } from './schedule/job.js';
export type { NodeCronContext, NodeCronCoordinator } from './schedule/node-cron.js';
export type {
  JobWhenUnavailable,
  NodeCronCoordinatorOptions,
  RunOnceOptions,
  RunOptions,
  ScheduleOptions,
} from './schedule/options.js';
export type {
  HeldJobRun,
  JobEvent,
  JobEvents,
  JobRun,
  JobTask,
  RunOnceResult,
  SkipReason,
} from './schedule/types.js';
export type { EtcdBackend, EtcdSetup } from './store/etcd/client.js';
export { MemoryStore } from './store/memory/memory-store.js';
export type {
  AcquireReply,
  AcquireRequest,
  AdminStore,
  ClaimReply,
  ClaimRequest,
  ConfigStore,
  ExtendReply,
  FenceStore,
  FinishReply,
  FinishRequest,
  ForceReleaseReply,
  HandOff,
  HandOn,
  Holder,
  JobState,
  JobStore,
  LeaseStore,
  LockState,
  QueueMode,
  QueueState,
  ReleaseReply,
  SharedAcquireReply,
  SharedHold,
  SharedRequest,
  SharedState,
  SharedStore,
  Store,
  StoredOutcome,
  StoredRun,
  StoreInfo,
} from './store/port.js';
export { STORE } from './store/port.js';
export type { PostgresBackend, PostgresSetup } from './store/postgres/backend.js';
/** The PostgreSQL schema of a prefix, as plain SQL, for running the migration by hand (see docs/postgres.md). */
export { migrationSql } from './store/postgres/schema.js';
/** The Redis key layout, for tooling that reads a Redis directly. */
export { type JobKeys, jobKeys, type LockKeys, lockKeys } from './store/redis/keys.js';
export type { Backend, IORedisBackend, NodeRedisBackend } from './store/registry.js';
