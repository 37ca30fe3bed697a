/**
 * `leasehold/store`: what a backend implementer and tooling need, and an application does not.
 * The ports a store implements (by capability), the marker `STORE`, the Redis key layout, the
 * PostgreSQL migration as SQL, and the input types of each backend (`new Leasehold(backend)`
 * takes their union, `Backend`, from the root entry). An application imports from `leasehold`.
 */
export type { EtcdBackend, EtcdSetup } from './etcd/client.js';
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
  HandOffListener,
  HandOn,
  HeldAsReply,
  Holder,
  JobState,
  JobStore,
  LeaseStore,
  LockState,
  QueueMode,
  QueueState,
  ReleaseReply,
  ReplicationRequest,
  ReplicationStore,
  SharedAcquireReply,
  SharedHold,
  SharedRequest,
  SharedState,
  SharedStore,
  Store,
  StoredOutcome,
  StoredRun,
  StoreInfo,
  StoreSettings,
} from './port.js';
export { STORE } from './port.js';
export type { PostgresBackend, PostgresSetup } from './postgres/backend.js';
/** The PostgreSQL schema of a prefix, as plain SQL, for running the migration by hand (see docs/postgres.md). */
export { migrationSql } from './postgres/schema.js';
/** The Redis key layout, for tooling that reads a Redis directly. */
export { type JobKeys, jobKeys, type LockKeys, lockKeys } from './redis/keys.js';
export type { IORedisBackend, NodeRedisBackend } from './registry.js';
/** A store's settings over the defaults, for a store made outside a Leasehold. */
export { storeSettings } from './settings.js';
