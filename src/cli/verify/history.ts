import type { ServerAddress } from '../redis.js';

/**
 * What verify's processes say to each other. Workers are started by the parent with a plan (in
 * the environment) and report every operation as one JSON line on stdout; the parent adds what it
 * did to them. Every time is `Date.now()` of its process: all processes run on this one machine
 * and read the same wall clock, which is what lets the checker compare them (a monotonic clock is
 * per process). Clock steps during a run would make the comparison wrong; NTP slewing does not.
 */

export type LockKind = 'leasehold' | 'naive';

export interface WorkerPlan {
  /** The worker's slot, 1…N; a worker killed and started again keeps its slot. */
  readonly worker: number;
  readonly lock: LockKind;
  /** Where to connect: the worker's own link (proxy) in front of the server, with the URL's credentials. */
  readonly redis: ServerAddress;
  /** leasehold's prefix for the lock. */
  readonly prefix: string;
  /** The lock every worker takes turns on. */
  readonly name: string;
  readonly keys: {
    /** The record the workers update: a fenced hash (leasehold) or a plain string (naive). */
    readonly record: string;
    /** The naive lock's key (SET NX PX, released by DEL). */
    readonly naiveLock: string;
    /** The counter that numbers the naive lock's grants, so the checker can order them (it protects nothing). */
    readonly naiveGrants: string;
  };
  readonly ttl: number;
  /** Simulated work between reading and writing the record, ms: a random length in [min, max]. */
  readonly work: readonly [number, number];
  /** One cycle in this many works 1.5 × ttl, longer than the lease (0: never). */
  readonly longWorkEvery: number;
  readonly commandTimeout: number;
  readonly fenceRetention: number;
}

/** The record's value: its version (one higher for every accepted write) and who wrote it. */
export interface RecordValue {
  readonly n: number;
  readonly token: number;
  readonly worker: number;
}

interface Stamp {
  /** Date.now() in the process that logged it. */
  readonly t: number;
  /** The worker's slot. */
  readonly w: number;
  readonly pid: number;
}

/** What a worker logs, in the order it happens in that process. */
export type WorkerEvent = Stamp &
  (
    | { readonly e: 'ready' }
    | { readonly e: 'acquire' }
    /** Granted, with its fencing token and the instant (this machine's clock) until which the worker believes the lease valid. */
    | { readonly e: 'granted'; readonly token: number; readonly until: number }
    /** The watchdog extended the lease: believed valid until a new instant. */
    | { readonly e: 'valid'; readonly until: number }
    /** The lease is known lost (the lock's signal aborted). */
    | { readonly e: 'lost'; readonly reason: string }
    /** The record read under the grant of `token`, at version `n` (0: never written). */
    | { readonly e: 'read'; readonly token: number; readonly n: number; readonly fence: number | null }
    /** A write of version `n` is sent with `token`. */
    | { readonly e: 'write'; readonly token: number; readonly n: number }
    /** Its outcome: accepted, refused by the fence (with the newer token stored), or unknown (an error, a timeout). */
    | ({ readonly e: 'wrote'; readonly token: number } & (
        | { readonly ok: true }
        | { readonly ok: false; readonly newest: number }
        | { readonly ok: null; readonly error: string }
      ))
    | { readonly e: 'release' }
    | { readonly e: 'released'; readonly ok: boolean }
    | { readonly e: 'error'; readonly op: string; readonly message: string }
    | { readonly e: 'stopped' }
  );

export type FaultKind = 'pause' | 'kill' | 'proxy' | 'restart' | 'freeze';
export const CLIENT_FAULTS: readonly FaultKind[] = ['pause', 'kill', 'proxy'];
export const SERVER_FAULTS: readonly FaultKind[] = ['restart', 'freeze'];

/** One fault the parent injected. */
export interface Fault {
  readonly kind: FaultKind;
  /** For proxy faults: delay, reset or partition. */
  readonly action: string;
  /** The worker's slot it hit; null for a server fault. */
  readonly worker: number | null;
  /** The process it hit (pause, kill). */
  readonly pid: number | null;
  /** Whether the worker held the lock when it was hit. */
  readonly holder: boolean;
  readonly at: number;
  /** When it was healed (SIGCONT, the worker restarted, the link restored, the server back); = at for an instant fault. */
  readonly until: number;
}

/** What the parent logs beside the workers' events. */
export type ParentEvent =
  | { readonly e: 'spawned'; readonly t: number; readonly w: number; readonly pid: number }
  | {
      readonly e: 'exited';
      readonly t: number;
      readonly w: number;
      readonly pid: number;
      readonly code: number | null;
      readonly signal: string | null;
    };

export type HistoryEvent = WorkerEvent | ParentEvent;

/** Everything the checker reads. */
export interface History {
  readonly lock: LockKind;
  readonly workers: number;
  readonly ttl: number;
  /** The run's window: from every worker told to start to every worker told to stop. */
  readonly start: number;
  readonly end: number;
  /** Every event, in the order the parent received it (per process, the order it happened). */
  readonly events: readonly HistoryEvent[];
  readonly faults: readonly Fault[];
  /** The record as read at the end, or null if it could not be read. */
  readonly final: RecordValue | null;
}
