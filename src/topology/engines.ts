import { DEFAULTS, type UnsafeConfig } from '../core/defaults.js';
import type { LockEngine } from '../core/engine.js';
import { invalidArgument } from '../core/errors.js';
import * as validate from '../core/validate.js';
import { JobLock } from '../primitives/job-lock.js';
import { mutex } from '../primitives/mutex.js';
import type { Primitive } from '../primitives/primitive.js';
import { semaphore, sharedMode } from '../primitives/shared.js';
import { EvictionCheck } from '../store/eviction-check.js';
import { type HandOn, type JobStore, portsOf, type Store } from '../store/port.js';
import { type Backend, resolveStore } from '../store/registry.js';
import { ANNOUNCED_HAND_ON, SINGLE_STORE_HAND_ON } from '../store/settings.js';
import { Quorum } from './quorum.js';
import { type Replication, Single } from './single.js';

/** The instance's settings every engine is built with, once. */
export interface EngineSettings {
  readonly prefix: string;
  readonly commandTimeout: number;
  readonly driftFactor: number;
  readonly instance: string;
  readonly fenceRetention: number;
  readonly unsafeConfig: UnsafeConfig;
  /** The instance's replica acknowledgement, or undefined when off. */
  readonly replication: Replication | undefined;
  /** Redlock only. */
  readonly quorum: unknown;
  readonly nodeTimeout: number | undefined;
}

/** Where the engines report what no caller hears of. */
export interface EngineHooks {
  /** A failed background call: `operation` in the words of the API ('wait', 'acquire', …). */
  onBackendError(error: unknown, operation: string): void;
}

/** What a call asks for: the mutex, a semaphore of `limit` permits, or a read-write lock's shared hold. */
export type LockKind = { readonly limit?: number; readonly shared?: boolean };

/**
 * Which engine serves a call, decided once per kind of lock and replica setting from what the
 * backend declared it can do: one store (Single) or a quorum of independent masters (Quorum, for an
 * array). The facade validates options and asks here; a new primitive is one case in `primitiveFor`.
 */
export class Engines {
  /** The mutex with the instance's own replica setting: what a plain acquire uses. */
  readonly mutex: LockEngine;
  /** The job lock on the one store, when there is one store and it can run jobs. */
  readonly jobs: JobLock | undefined;
  /** Why this instance runs no jobs, when it runs none. */
  readonly noJobs: string;
  readonly #variant: (kind: LockKind, replication: Replication | undefined) => LockEngine;
  readonly #made = new Map<string, LockEngine>();
  readonly #replication: Replication | undefined;

  constructor(backend: Backend | readonly Backend[], settings: EngineSettings, hooks: EngineHooks) {
    this.#replication = settings.replication;
    // Each store is built with the instance's settings, and with how its topology hands a lock on.
    const backendOptions = (handOn: HandOn) => ({
      prefix: settings.prefix,
      instance: settings.instance,
      fenceRetention: settings.fenceRetention,
      waiterLease: DEFAULTS.waiterLease,
      handOn,
      onError: (e: unknown) => hooks.onBackendError(e, 'wait'),
    });
    const onEvictionCheckError = (e: unknown) => hooks.onBackendError(e, 'check-eviction-policy');
    const common = {
      commandTimeout: settings.commandTimeout,
      driftFactor: settings.driftFactor,
      driftConstant: DEFAULTS.driftConstant,
    };
    if (Array.isArray(backend)) {
      if (backend.length === 0) throw validate.invalidBackends();
      if (settings.replication) throw replicasOnRedlock();
      validate.distinctBackends(backend);
      // A node's release announces the hand-off to every waiter: Redlock's waiters do not queue.
      const stores = backend.map((b: unknown) => resolveStore(b, backendOptions(ANNOUNCED_HAND_ON)));
      const eviction = new EvictionCheck(
        stores.map((n) => n.store),
        settings.unsafeConfig,
        onEvictionCheckError,
      );
      this.mutex = new Quorum(mutex, stores, {
        ...common,
        quorum: validate.quorum(settings.quorum, stores.length),
        nodeTimeout: settings.nodeTimeout,
        onBackendError: (error: unknown, action: string) =>
          hooks.onBackendError(error, REDLOCK_OPERATIONS[action] ?? 'acquire'),
        eviction,
      });
      this.jobs = undefined;
      this.noJobs = NO_JOBS_ON_REDLOCK;
      this.#variant = (kind) => {
        throw kind.limit === undefined && !kind.shared ? replicasOnRedlock() : notOnRedlock(kind);
      };
      return;
    }
    // Every waiter of one store is queued there and named by the hand-off; a release grants the
    // lock outright to a waiter of this same instance (see HandOn.direct).
    const { store, owned } = resolveStore(backend, backendOptions(SINGLE_STORE_HAND_ON));
    const eviction = new EvictionCheck([store], settings.unsafeConfig, onEvictionCheckError);
    const noReplicas = () => invalidArgument(`\`replicas\`: the ${store.kind} store has no replicas to wait for`);
    if (settings.replication && portsOf(store).replication === undefined) throw noReplicas();
    const single = { ...common, eviction, replication: settings.replication };
    this.mutex = new Single(mutex, store, owned, single);
    this.#variant = (kind, replication) => {
      if (replication && portsOf(store).replication === undefined) throw noReplicas();
      const primitive = primitiveFor(kind);
      if (!primitive.supports(store)) {
        throw invalidArgument(
          `this ${store.kind} store cannot run a ${primitive.kind}: it has no shared holds ` +
            '(acquireShared, extendShared, releaseShared, leaveShared, inspectShared)',
        );
      }
      return new Single(primitive, store, false, { ...single, replication });
    };
    const runsJobs = portsOf(store).jobs !== undefined;
    this.jobs = runsJobs
      ? new JobLock(store as Store & JobStore, { ...common, gate: () => eviction.gate() })
      : undefined;
    this.noJobs = `this ${store.kind} store cannot run scheduled jobs (it has no claimTick/finishTick/readJob)`;
  }

  /**
   * The engine for `kind` with the call's own replica setting (undefined: the instance's), made on
   * first use and kept; none of them owns the store.
   */
  engineFor(kind: LockKind, asked: Replication | undefined): LockEngine {
    const replication = replicationOf(asked ?? this.#replication);
    const own = asked !== undefined && !sameReplication(replication, this.#replication);
    const plain = kind.limit === undefined && !kind.shared;
    if (plain && !own) return this.mutex;
    const key = `${kind.shared ? 'shared' : (kind.limit ?? 'mutex')} ${own ? JSON.stringify(replication ?? null) : ''}`;
    let engine = this.#made.get(key);
    if (!engine) {
      engine = this.#variant(kind, replication);
      this.#made.set(key, engine);
    }
    return engine;
  }

  async close(): Promise<void> {
    await this.mutex.close();
  }
}

/** The primitive of a kind of lock on one store. */
function primitiveFor(kind: LockKind): Primitive {
  if (kind.shared) return sharedMode();
  return kind.limit === undefined ? mutex : semaphore(kind.limit);
}

/** A setting that asks for no replicas is none. */
function replicationOf(replication: Replication | undefined): Replication | undefined {
  return replication && replication.replicas > 0 ? replication : undefined;
}

function sameReplication(a: Replication | undefined, b: Replication | undefined): boolean {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

/** The actions a Redlock node's call is reported under, in the words of the API. */
const REDLOCK_OPERATIONS: Readonly<Record<string, string>> = {
  acquire: 'acquire',
  'raise-fence': 'acquire',
  extend: 'extend',
  release: 'release',
  subscribe: 'wait',
  close: 'close',
};

function replicasOnRedlock(): Error {
  return invalidArgument(
    '`replicas` is for one deployment with replicas (Sentinel, a Cluster): Redlock rests on independent ' +
      'masters instead, and a grant there is confirmed by a quorum of them',
  );
}

/** Why a Redlock instance runs no jobs. */
const NO_JOBS_ON_REDLOCK =
  'scheduled jobs need a Leasehold on one store (Redis, a Redis Cluster, PostgreSQL, etcd or a MemoryStore); ' +
  'this instance is Redlock over several independent masters, where a tick marker has no single home';

/** Why Redlock runs no lock of several holders, by what the call asked for. */
function notOnRedlock(kind: LockKind): Error {
  if (kind.shared) {
    return invalidArgument(
      "`mode: 'shared'` (a read-write lock) is not available on Redlock: its waiters do not queue on the " +
        'masters, and writer preference rests on that queue (a stream of readers would starve writers); ' +
        'use one Redis, a Redis Cluster, PostgreSQL, etcd or a MemoryStore',
    );
  }
  return invalidArgument(
    `\`limit: ${kind.limit}\` (a semaphore) is not available on Redlock: a majority vote over independent masters ` +
      'does not bound a count (with 3 masters and 2 permits, three holders can each win two masters); ' +
      'use one Redis, a Redis Cluster, PostgreSQL, etcd or a MemoryStore',
  );
}
