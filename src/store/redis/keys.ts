import { NameCache } from '../name-cache.js';

/**
 * Every key and channel name leasehold uses is built here.
 *
 * All keys of one lock share a hash slot: the lock's name sits inside the first `{…}`, so
 * Redis Cluster routes the lock, its queue and its release channel to one node (a name may not
 * start with `}`: the tag would be empty). Every key has a TTL: the lock key's is its fencing
 * record's retention (or the lease's end, if later), which tokens can afford because they never
 * fall below the server's clock in µs; the queue's is renewed by live waiters; shared holds and
 * their grants expire with the lease of the latest of them. The values are described in
 * lua/lib/lease.lua.
 */
export interface LockKeys {
  /**
   * The lease and the fencing record in one string: '<lease end ms> <state>\n<record>' (the state
   * the owner token, or '~<waiter>' while reserved for one; the record the latest grant,
   * '<token> <taken-at µs> <instance>', then '|<owner>' once its holder released it); PX = the
   * record's retention (default 7 days after the last grant). See lua/lib/lease.lua.
   */
  readonly lock: string;
  /** Pub/sub channel that a release publishes on; the message names the waiter it woke. */
  readonly channel: string;
  /** Waiters of every instance in arrival order: a sorted set, member = owner token, score = server time in µs. */
  readonly waiters: string;
  /** Each waiter's liveness deadline (server ms), and the kind of a shared waiter: a hash; a waiter that stops trying is dropped. */
  readonly alive: string;
  /** Shared holds (a semaphore's permits, a read-write lock's shared holders): a sorted set, member = owner token, score = the end of its lease in server ms (lua/lib/shared.lua). */
  readonly holds: string;
  /** Each shared hold's grant, as the lock's fencing record writes one: a hash, member = owner token. */
  readonly grants: string;
}

/** Each prefix's lock keys, built once per name (an acquisition and its release share them). */
const built = new NameCache((prefix) => new NameCache((name) => buildLockKeys(prefix, name)));

export function lockKeys(prefix: string, name: string): LockKeys {
  return built.get(prefix).get(name);
}

function buildLockKeys(prefix: string, name: string): LockKeys {
  const base = `${prefix}:{${name}}`;
  return Object.freeze({
    lock: base,
    channel: `${base}:released`,
    waiters: `${base}:waiters`,
    alive: `${base}:alive`,
    holds: `${base}:holds`,
    grants: `${base}:grants`,
  });
}

/**
 * The keys of a scheduled job: its lock's keys (the job's name is the lock's name, so operator
 * tooling sees job locks as locks) plus the tick marker and the run history. Both share the
 * lock's hash tag and are the only keys without a TTL: one marker and one capped history per job
 * name. Deleting the marker would let a late instance run a tick that already ran, and a job's
 * period (a monthly cron) can be longer than any retention we could pick.
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
