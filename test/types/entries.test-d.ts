import { describe, expectTypeOf, test } from 'vitest';
import type * as root from '../../src/index.js';
import { type Backend, Leasehold, MemoryStore } from '../../src/index.js';
import type * as store from '../../src/store/index.js';
import { jobKeys, lockKeys, migrationSql, STORE, type Store, storeSettings } from '../../src/store/index.js';

/**
 * The two entry points: `leasehold` (src/index.ts) exports what an application uses;
 * `leasehold/store` (src/store/index.ts) what a backend implementer or tooling needs. Checked on
 * the sources, as the package's declaration files are built from them.
 */

describe('leasehold: what an application uses', () => {
  test('its values, and no others', () => {
    expectTypeOf<keyof typeof root>().toEqualTypeOf<
      | 'assertLocked'
      | 'DEFAULTS'
      | 'ErrorCode'
      | 'Job'
      | 'Leadership'
      | 'Leasehold'
      | 'Lock'
      | 'LockError'
      | 'LockLostError'
      | 'LockTimeoutError'
      | 'MemoryStore'
      | 'MultiLock'
      | 'NotReplicatedError'
      | 'QuorumError'
      | 'RedisUnavailableError'
      | 'StoreUnavailableError'
    >();
  });

  test('the types an application writes', () => {
    expectTypeOf<root.LeaseholdOptions>().not.toBeAny();
    expectTypeOf<root.AcquireOptions>().not.toBeAny();
    expectTypeOf<root.TryAcquireOptions>().not.toBeAny();
    expectTypeOf<root.WithLockOptions>().not.toBeAny();
    expectTypeOf<root.TryWithLockOptions>().not.toBeAny();
    expectTypeOf<root.AcquireAllOptions>().not.toBeAny();
    expectTypeOf<root.LeadOptions>().not.toBeAny();
    expectTypeOf<root.ScheduleOptions>().not.toBeAny();
    expectTypeOf<root.RunOptions>().not.toBeAny();
    expectTypeOf<root.RunOnceOptions>().not.toBeAny();
    expectTypeOf<root.NodeCronCoordinatorOptions>().not.toBeAny();
    expectTypeOf<root.Work<number>>().not.toBeAny();
    expectTypeOf<root.TryResult<number>>().not.toBeAny();
    expectTypeOf<root.JobTask>().not.toBeAny();
    expectTypeOf<root.JobRun>().not.toBeAny();
    expectTypeOf<root.HeldJobRun>().not.toBeAny();
    expectTypeOf<root.RunOnceResult<number>>().not.toBeAny();
    expectTypeOf<root.RunRecord>().not.toBeAny();
    expectTypeOf<root.NodeCronCoordinator>().not.toBeAny();
    expectTypeOf<root.LeaseholdEvents>().not.toBeAny();
    expectTypeOf<root.LockEvent>().not.toBeAny();
    expectTypeOf<root.LeadershipEvents>().not.toBeAny();
    expectTypeOf<root.BackendOperation>().not.toBeAny();
    expectTypeOf<root.WhenUnavailable>().not.toBeAny();
    expectTypeOf<root.LostReason>().not.toBeAny();
    expectTypeOf<root.SkipReason>().not.toBeAny();
    expectTypeOf<root.DeposedReason>().not.toBeAny();
    expectTypeOf<root.Backend>().not.toBeAny();
    expectTypeOf<root.Store>().toEqualTypeOf<store.Store>();
  });

  test('the names it no longer exports are reached through the ones it does', () => {
    expectTypeOf<NonNullable<root.LockLostError['holder']>>().toHaveProperty('instance');
    expectTypeOf<root.QuorumError['nodes'][number]>().toHaveProperty('outcome');
    expectTypeOf<NonNullable<root.AcquireOptions['mode']>>().toEqualTypeOf<'exclusive' | 'shared'>();
    expectTypeOf<NonNullable<root.RunOptions['whenUnavailable']>>().toEqualTypeOf<'skip' | 'run'>();
    expectTypeOf<root.RunRecord['outcome']>().toEqualTypeOf<store.StoredOutcome>();
    expectTypeOf<root.LeaseholdEvents['jobSkipped'][0]['reason']>().toEqualTypeOf<root.SkipReason>();
  });

  test('does not export the ports, the key layout, the migration or the backends’ input types', () => {
    // @ts-expect-error leasehold/store
    expectTypeOf<root.LeaseStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.FenceStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.JobStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.AdminStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.ConfigStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.SharedStore>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.AcquireRequest>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.AcquireReply>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.HandOff>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.HandOn>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.Holder>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.LockState>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.JobState>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.StoredRun>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.StoreInfo>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.LockKeys>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.JobKeys>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.IORedisBackend>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.NodeRedisBackend>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.PostgresBackend>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.PostgresSetup>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.EtcdBackend>().toBeAny();
    // @ts-expect-error leasehold/store
    expectTypeOf<root.EtcdSetup>().toBeAny();
    // @ts-expect-error reached as LockLostError['holder']
    expectTypeOf<root.CurrentHolder>().toBeAny();
    // @ts-expect-error reached as QuorumError['nodes'][number]
    expectTypeOf<root.NodeOutcome>().toBeAny();
  });
});

describe('leasehold/store: what a backend implementer and tooling need', () => {
  test('its values', () => {
    expectTypeOf<keyof typeof store>().toEqualTypeOf<
      'STORE' | 'jobKeys' | 'lockKeys' | 'migrationSql' | 'storeSettings'
    >();
    expectTypeOf(storeSettings({ prefix: 'p' })).toEqualTypeOf<store.StoreSettings>();
    expectTypeOf(STORE).toExtend<symbol>();
    expectTypeOf(lockKeys).parameters.toEqualTypeOf<[prefix: string, name: string]>();
    expectTypeOf(jobKeys('p', 'job')).toExtend<store.LockKeys>();
    expectTypeOf(migrationSql).returns.toEqualTypeOf<string>();
  });

  test('a MemoryStore is a Store; a Store is what new Leasehold(…) takes', () => {
    const memory: Store = new MemoryStore();
    new Leasehold(memory);
    expectTypeOf<Store>().toExtend<Backend>();
    expectTypeOf<Store>().toExtend<store.LeaseStore>();
  });

  test('the ports, by capability, and what they carry', () => {
    expectTypeOf<store.LeaseStore['acquire']>().parameters.toEqualTypeOf<
      [name: string, request: store.AcquireRequest]
    >();
    expectTypeOf<store.FenceStore>().toHaveProperty('raiseFence');
    expectTypeOf<store.JobStore>().toHaveProperty('claimTick');
    expectTypeOf<store.AdminStore>().toHaveProperty('forceRelease');
    expectTypeOf<store.ConfigStore>().toHaveProperty('evictionPolicies');
    expectTypeOf<store.SharedStore>().toHaveProperty('acquireShared');
    expectTypeOf<store.ReplicationStore>().toHaveProperty('replicate');
    expectTypeOf<store.HandOff>().toHaveProperty('woken');
    expectTypeOf<store.HandOff>().not.toHaveProperty('grant');
    expectTypeOf<store.HandOffListener>().parameter(0).toEqualTypeOf<store.HandOff>();
    expectTypeOf<store.HeldAsReply>().toExtend<store.SharedAcquireReply>();
    expectTypeOf<store.AcquireReply>().toExtend<store.SharedAcquireReply>();
  });

  test('each backend’s input type is part of Backend', () => {
    expectTypeOf<store.IORedisBackend>().toExtend<Backend>();
    expectTypeOf<store.NodeRedisBackend>().toExtend<Backend>();
    expectTypeOf<store.PostgresBackend>().toExtend<Backend>();
    expectTypeOf<store.PostgresSetup>().toExtend<Backend>();
    expectTypeOf<store.EtcdBackend>().toExtend<Backend>();
    expectTypeOf<store.EtcdSetup>().toExtend<Backend>();
  });
});
