/**
 * Every key and channel name leasehold uses is built here.
 *
 * All keys of one lock share a hash slot: the lock's name sits inside the first `{…}`, so
 * Redis Cluster routes the lock, its fencing counter and its release channel to one node.
 * The fencing counter is a key of its own that never expires and is never deleted with the lock:
 * deleting it would restart the sequence and let a stale token look new.
 */
export interface LockKeys {
  /** The lease itself: value = owner token, PX = ttl. */
  readonly lock: string;
  /** Fencing counter: INCR on every acquisition, no TTL. */
  readonly fence: string;
  /** Pub/sub channel that a release publishes on; the message names the waiter it woke. */
  readonly channel: string;
  /** Waiters of every instance in arrival order: a sorted set, member = owner token, score = server time. */
  readonly waiters: string;
  /** The owner token a release handed the lock to (PX: the reservation), so nobody barges past it. */
  readonly reserved: string;
}

export function lockKeys(prefix: string, name: string): LockKeys {
  const base = `${prefix}:{${name}}`;
  return {
    lock: base,
    fence: `${base}:fence`,
    channel: `${base}:released`,
    waiters: `${base}:waiters`,
    reserved: `${base}:reserved`,
  };
}

/**
 * The keys of a scheduled job: its lock's keys (the job's name is the lock's name, so operator
 * tooling sees job locks as locks) plus the tick marker and the run history. Both share the
 * lock's hash tag, never expire and are never deleted with the lock: deleting the marker would
 * let a late instance run a tick that already ran.
 */
export interface JobKeys extends LockKeys {
  /** The latest tick claimed, as ms since the epoch (the tick's scheduled time), no TTL. */
  readonly tick: string;
  /** Run history: a sorted set, score = the run's fencing token, member = the run record as JSON. */
  readonly runs: string;
}

export function jobKeys(prefix: string, name: string): JobKeys {
  const keys = lockKeys(prefix, name);
  return { ...keys, tick: `${keys.lock}:tick`, runs: `${keys.lock}:runs` };
}

/** The lock name inside a lock key, or null when the key is not a lock key of this prefix. */
export function nameFromLockKey(prefix: string, key: string): string | null {
  const head = `${prefix}:{`;
  if (!key.startsWith(head) || !key.endsWith('}')) return null;
  return key.slice(head.length, -1);
}
