import { createHash } from 'node:crypto';
import { invalidArgument } from '../../core/errors.js';
import { channelSql } from './queries.js';
import { sharedFunctions } from './shared-sql.js';
import {
  dollarQuote,
  epochMs,
  FREED,
  firstLive,
  fn,
  freeAlone,
  grant,
  HAND_ON_ARGS,
  HAND_ON_CALL,
  left,
  MAX_ADMITTED,
  MS,
} from './sql.js';

/**
 * The schema of one prefix, as plain SQL: four tables, a sequence and one PL/pgSQL function per
 * state change, every name under the prefix. Each store call is one statement (a function call, a
 * read-only SELECT, or acquire's and release's one UPDATE falling back to their function, see
 * queries.ts), so it is one transaction on the server, and each function takes its lock's row with
 * SELECT … FOR UPDATE before it reads anything it will write: no read-then-write race. Times are
 * the server's: every function reads clock_timestamp() once and uses it throughout.
 * <prefix>_locks: a row per lock name (the lease or a woken waiter's reservation, the latest grant,
 * a job's latest tick), a lock's dropped once nothing in it is live (`retain_until`), a job's kept;
 * <prefix>_waiters: the queue, each waiter with its own liveness deadline; <prefix>_runs: the run
 * history; <prefix>_holds: shared holds, while the lock's row says '^<limit>' (shared-sql.ts);
 * <prefix>_fence: the sequence of every fencing token. Each in full: docs/postgres.md, "The schema".
 */

/** Bumped when the schema changes; stored as the locks table's comment, so a store checks it in one read. */
export const SCHEMA_VERSION = 'leasehold postgres schema 8';

/** PostgreSQL's longest identifier, in bytes (NAMEDATALEN - 1). */
const MAX_IDENTIFIER_BYTES = 63;
const SUFFIX_HASH_CHARS = 8;

/** Every object of one prefix, as a quoted identifier ready for SQL text. */
export interface SchemaNames {
  readonly locks: string;
  readonly waiters: string;
  readonly runs: string;
  /** Shared holds: a semaphore's permits, a read-write lock's readers (see shared-sql.ts). */
  readonly holds: string;
  readonly fence: string;
  /** The fence sequence as a string literal, for nextval(). */
  readonly fenceLiteral: string;
  /** The locks table as a string literal, for to_regclass() and the version check. */
  readonly locksLiteral: string;
  /** The prefix as a string literal, for the channel a function computes itself (channelSql). */
  readonly prefixLiteral: string;
  readonly index: { readonly retain: string; readonly arrival: string };
  readonly fn: {
    readonly row: string;
    readonly handOn: string;
    readonly endLease: string;
    readonly acquire: string;
    /** acquire, replying with one text (see its definition). */
    readonly attempt: string;
    readonly release: string;
    readonly extend: string;
    readonly leave: string;
    readonly forceRelease: string;
    readonly claimTick: string;
    readonly finishTick: string;
    readonly forgetJob: string;
    readonly admit: string;
    readonly following: string;
    readonly tell: string;
    readonly askFirst: string;
    readonly nudge: string;
    readonly stretch: string;
    readonly freeUp: string;
    readonly takeHold: string;
    readonly writer: string;
    readonly challenge: string;
    readonly acquireShared: string;
    readonly extendShared: string;
    readonly releaseShared: string;
    readonly leaveShared: string;
  };
}

/** `text` cut to at most `bytes` UTF-8 bytes, never inside a character. */
function cutBytes(text: string, bytes: number): string {
  let out = '';
  for (const char of text) {
    if (Buffer.byteLength(out + char) > bytes) break;
    out += char;
  }
  return out;
}

/**
 * The name of object `suffix` of `prefix`: `<prefix>_<suffix>`, or, when that is longer than
 * PostgreSQL keeps (it would silently truncate, and two prefixes could meet), the prefix cut short
 * with a hash of the whole prefix after it.
 */
export function objectName(prefix: string, suffix: string): string {
  const plain = `${prefix}_${suffix}`;
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain;
  const hash = createHash('sha256').update(prefix).digest('hex').slice(0, SUFFIX_HASH_CHARS);
  const room = MAX_IDENTIFIER_BYTES - suffix.length - hash.length - 2;
  return `${cutBytes(prefix, room)}_${hash}_${suffix}`;
}

/** A double-quoted identifier: any character but NUL stands for itself. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** A string literal that reads the same whatever `standard_conforming_strings` is. */
export function quoteLiteral(text: string): string {
  const quoted = text.replace(/'/g, "''");
  return text.includes('\\') ? `E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}

/** The prefix as PostgreSQL can take it in identifiers. */
export function checkPrefix(prefix: string): string {
  if (prefix.includes('\0')) throw invalidArgument('`prefix` must not contain NUL characters on PostgreSQL');
  return prefix;
}

export function schemaNames(prefix: string): SchemaNames {
  checkPrefix(prefix);
  const q = (suffix: string) => quoteIdentifier(objectName(prefix, suffix));
  return {
    locks: q('locks'),
    waiters: q('waiters'),
    runs: q('runs'),
    holds: q('holds'),
    fence: q('fence'),
    fenceLiteral: quoteLiteral(q('fence')),
    locksLiteral: quoteLiteral(q('locks')),
    prefixLiteral: quoteLiteral(prefix),
    index: { retain: q('locks_retain'), arrival: q('waiters_arrival') },
    fn: {
      row: q('row'),
      handOn: q('hand_on'),
      endLease: q('end_lease'),
      acquire: q('acquire'),
      attempt: q('attempt'),
      release: q('release'),
      extend: q('extend'),
      leave: q('leave'),
      forceRelease: q('force_release'),
      claimTick: q('claim_tick'),
      finishTick: q('finish_tick'),
      forgetJob: q('forget_job'),
      admit: q('admit'),
      following: q('following'),
      tell: q('tell'),
      askFirst: q('ask_first'),
      nudge: q('nudge'),
      stretch: q('stretch'),
      freeUp: q('free_up'),
      takeHold: q('take_hold'),
      writer: q('writer'),
      challenge: q('challenge'),
      acquireShared: q('acquire_shared'),
      extendShared: q('extend_shared'),
      releaseShared: q('release_shared'),
      leaveShared: q('leave_shared'),
    },
  };
}

/**
 * The key of the advisory lock the migration of `prefix` runs under: concurrent first uses of one
 * prefix (several pods starting at once) create its objects one after the other, never racing on
 * the catalog. Two int4s: leasehold's class id, and a hash of the prefix.
 */
export function migrationLockKey(prefix: string): readonly [number, number] {
  return [0x6c656173, createHash('sha256').update(prefix).digest().readInt32BE(0)];
}

/** acquire's arguments, as attempt and the row-replying acquire both take them. */
const ACQUIRE_ARGS =
  'p_name text, p_owner text, p_ttl bigint, p_min_fence bigint, p_queue integer, p_instance text, ' +
  'p_retention bigint, p_waiter_lease bigint';

/** The functions of one prefix. Row states: held (lease live, not reserved), reserved (live, reserved), free. */
function functions(n: SchemaNames): string[] {
  const { locks, waiters, runs } = n;
  const held = `(r.expires_at > t AND NOT r.reserved)`;
  const reserved = `(r.expires_at > t AND r.reserved)`;
  const free = `UPDATE ${locks} SET ${FREED} WHERE name = p_name;`;
  const args = {
    owner: 'p_owner',
    ttl: 'p_ttl',
    minFence: 'p_min_fence',
    instance: 'p_instance',
    retention: 'p_retention',
  };
  const take = (fence: string) => grant(n.fenceLiteral, args, 't', fence);
  const handOnArgs = HAND_ON_ARGS;
  const handOnCall = HAND_ON_CALL;
  const first = firstLive(waiters);
  return [
    // The lock's row, locked for the rest of the transaction; made when `p_make` and missing (then
    // up to two rows with nothing live left in them are dropped, so the table holds what is live).
    fn(
      n.fn.row,
      'p_name text, t timestamptz, p_make boolean',
      locks,
      `
DECLARE r ${locks};
BEGIN
  SELECT * INTO r FROM ${locks} WHERE name = p_name FOR UPDATE;
  IF FOUND OR NOT p_make THEN RETURN r; END IF;
  INSERT INTO ${locks} (name, retain_until) VALUES (p_name, t) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO r FROM ${locks} WHERE name = p_name FOR UPDATE;
  DELETE FROM ${locks} WHERE name IN (
    SELECT name FROM ${locks} WHERE NOT job AND retain_until < t ORDER BY retain_until LIMIT 2 FOR UPDATE SKIP LOCKED);
  RETURN r;
END`,
    ),
    // Wake the first live waiter, alone, to ask again ('?<owner>', lua/lib/hand-on.lua's
    // ask_first): what keeps it out changed without a hand-off naming it, so it learns the new end
    // rather than sleep on the old one. Nothing is reserved.
    fn(
      n.fn.askFirst,
      'p_name text, t timestamptz, p_channel text',
      'void',
      `
DECLARE head text := ${first};
BEGIN
  IF head IS NOT NULL THEN PERFORM pg_notify(p_channel, '?' || head); END IF;
END`,
    ),
    // Wake the first live waiter to ask again, with the shared waiters of its kind among the
    // waiters right behind it up to its limit (lua/lib/hand-on.lua's nudge): what keeps them out
    // changed without a hand-off (a waiter ahead left). Nothing is reserved.
    fn(
      n.fn.nudge,
      'p_name text, t timestamptz, p_channel text',
      'void',
      `
DECLARE head ${waiters}; w ${waiters};
BEGIN
  SELECT * INTO head FROM ${waiters} WHERE name = p_name AND alive_until >= t ORDER BY arrival LIMIT 1;
  IF NOT FOUND THEN RETURN; END IF;
  PERFORM pg_notify(p_channel, '?' || head.owner);
  IF head.kind IS NULL THEN RETURN; END IF;
  FOR w IN SELECT * FROM ${waiters} WHERE name = p_name AND arrival > head.arrival ORDER BY arrival
      LIMIT CASE head.kind WHEN 0 THEN ${MAX_ADMITTED} ELSE head.kind END - 1 LOOP
    CONTINUE WHEN w.alive_until < t;
    EXIT WHEN w.kind IS DISTINCT FROM head.kind;
    PERFORM pg_notify(p_channel, '?' || w.owner);
  END LOOP;
END`,
    ),
    // Free the lock and hand it to the first live waiter (dead ones are dropped): reserve it for
    // that waiter (a shared one with the shared waiters of its kind right behind it, up to its
    // limit: the reservation names them all), and NOTIFY each woken (the last: '<woken> <next>
    // [<then> <then>]'; delivered on commit). The i-th waiter named next retries i reservations
    // later (see following). Nobody to wake: just free it, announcing '' only when asked.
    // Returns the (first) waiter woken, or NULL.
    fn(
      n.fn.handOn,
      `p_name text, t timestamptz, ${handOnArgs}`,
      'text',
      `
DECLARE head text; head_kind integer; woken text[]; later text[];
BEGIN
  DELETE FROM ${waiters} WHERE name = p_name AND alive_until < t;
  SELECT owner, kind INTO head, head_kind FROM ${waiters} WHERE name = p_name ORDER BY arrival LIMIT 1;
  IF head IS NULL THEN
    ${free}
    IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
    RETURN NULL;
  END IF;
  IF head_kind IS NULL THEN
    woken := ARRAY[head];
    DELETE FROM ${waiters} WHERE name = p_name AND owner = head;
  ELSE
    woken := ${n.fn.admit}(p_name, t, head_kind, CASE head_kind WHEN 0 THEN ${MAX_ADMITTED} ELSE head_kind END);
  END IF;
  later := ${n.fn.following}(p_name, t, p_reservation);
  UPDATE ${locks} SET owner = array_to_string(woken, ' '), reserved = true, flagged = cardinality(later) > 0,
    expires_at = t + p_reservation * ${MS}, retain_until = greatest(retain_until, t + p_reservation * ${MS})
    WHERE name = p_name;
  PERFORM ${n.fn.tell}(p_channel, woken, later);
  RETURN head;
END`,
    ),
    // End p_owner's lease and hand the lock on if waiters are flagged; mark the grant released by
    // it, so a re-sent release answers released (until another owner takes the lock). Releasing a
    // lock that expired hands it on all the same. Returns released, expired or not-owner.
    fn(
      n.fn.endLease,
      `p_name text, p_owner text, t timestamptz, ${handOnArgs}`,
      'text',
      `
DECLARE r ${locks} := ${n.fn.row}(p_name, t, false);
BEGIN
  IF r.name IS NULL THEN RETURN 'expired'; END IF;
  IF ${held} AND r.owner = p_owner THEN
    UPDATE ${locks} SET released_by = CASE WHEN fence_until > t THEN p_owner END WHERE name = p_name;
    IF r.flagged THEN
      PERFORM ${n.fn.handOn}(p_name, t, ${handOnCall});
    ELSE
      ${free}
      IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
    END IF;
    RETURN 'released';
  END IF;
  IF r.fence_until > t AND r.released_by = p_owner THEN RETURN 'released'; END IF;
  IF ${held} THEN RETURN 'not-owner'; END IF;
  IF NOT ${reserved} THEN PERFORM ${n.fn.handOn}(p_name, t, ${handOnCall}); END IF;
  RETURN 'expired';
END`,
    ),
    // Take the lock if free or reserved for p_owner, with the next token from the sequence; a lock
    // p_owner holds already answers with that grant's token. Refused: queue the caller when it
    // will wait (p_queue 1: a first attempt, 2: already queued, which leaves the queue on
    // success, and drops the dead waiters a hand-off named before it), renewing its liveness, and
    // flag the lease so its release hands it on. A row whose lease is over is taken by one UPDATE;
    // any other case reads the row first. A queued caller that takes it free (no hand-off named
    // the waiter now first) wakes that waiter to ask again (ask_first), on the lock's channel.
    // Returns one text, as a scalar costs the server less than a row: '<token>' acquired, '-<ms>'
    // refused (ms the holder's lease or the reservation has left), '^<limit>' a name a semaphore
    // holds (owner '^<limit>', see shared-sql.ts), which is another kind.
    fn(
      n.fn.attempt,
      ACQUIRE_ARGS,
      'text',
      `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks};
  token bigint;
  taken_free boolean;
BEGIN
  UPDATE ${locks} SET ${take('fence')}, flagged = false
    WHERE name = p_name AND expires_at <= t RETURNING fence INTO token;
  taken_free := FOUND;
  IF NOT taken_free THEN
    r := ${n.fn.row}(p_name, t, true);
    IF ${held} AND r.owner = p_owner THEN
      RETURN r.fence::text;
    END IF;
    IF ${held} AND left(r.owner, 1) = '^' AND r.owner <> '^0' THEN
      RETURN '^' || substr(r.owner, 2)::bigint;
    END IF;
    IF ${held} OR (${reserved} AND r.owner <> p_owner) THEN
      IF p_queue <> 0 THEN
        DELETE FROM ${waiters} WHERE name = p_name AND alive_until < t;
        INSERT INTO ${waiters} (name, owner, alive_until) VALUES (p_name, p_owner, t + p_waiter_lease * ${MS})
          ON CONFLICT (name, owner) DO UPDATE SET alive_until = EXCLUDED.alive_until;
        UPDATE ${locks} SET flagged = true, retain_until = greatest(retain_until, t + p_waiter_lease * ${MS})
          WHERE name = p_name;
      END IF;
      RETURN '-' || ${left('r.expires_at')};
    END IF;
    taken_free := NOT ${reserved};
    UPDATE ${locks} SET ${take('r.fence')}, flagged = ${reserved} AND r.flagged
      WHERE name = p_name RETURNING fence INTO token;
  END IF;
  IF p_queue = 2 THEN
    DELETE FROM ${waiters} WHERE name = p_name AND (owner = p_owner OR alive_until < t);
    IF taken_free THEN PERFORM ${n.fn.askFirst}(p_name, t, ${channelSql(n.prefixLiteral, 'p_name')}); END IF;
  END IF;
  RETURN token::text;
END`,
    ),
    // The reply of schema 7 and before, as (acquired, value, held_as), for a store of an earlier
    // version still running against this schema while its instances are replaced.
    fn(
      n.fn.acquire,
      `${ACQUIRE_ARGS}, OUT acquired boolean, OUT value bigint, OUT held_as bigint`,
      'record',
      `
DECLARE reply text := ${n.fn.attempt}(p_name, p_owner, p_ttl, p_min_fence, p_queue, p_instance, p_retention, p_waiter_lease);
BEGIN
  acquired := left(reply, 1) NOT IN ('-', '^');
  value := CASE left(reply, 1) WHEN '-' THEN substr(reply, 2)::bigint WHEN '^' THEN 0 ELSE reply::bigint END;
  held_as := CASE WHEN left(reply, 1) = '^' THEN substr(reply, 2)::bigint END;
END`,
    ),
    // End p_owner's lease as end_lease does; a lease p_owner holds with nobody flagged behind it is
    // freed by one UPDATE.
    fn(
      n.fn.release,
      `p_name text, p_owner text, ${handOnArgs}`,
      'text',
      `
DECLARE t timestamptz := clock_timestamp();
BEGIN
  UPDATE ${locks} SET ${freeAlone('p_name', 'p_owner', 't')};
  IF NOT FOUND THEN RETURN ${n.fn.endLease}(p_name, p_owner, t, ${handOnCall}); END IF;
  IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
  RETURN 'released';
END`,
    ),
    // Reset the lease if p_owner holds it (one UPDATE when it does). Returns extended, expired (free
    // or reserved) or not-owner.
    fn(
      n.fn.extend,
      'p_name text, p_owner text, p_ttl bigint',
      'text',
      `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks};
BEGIN
  UPDATE ${locks} SET expires_at = t + p_ttl * ${MS}, retain_until = greatest(retain_until, t + p_ttl * ${MS})
    WHERE name = p_name AND owner = p_owner AND expires_at > t AND NOT reserved;
  IF FOUND THEN RETURN 'extended'; END IF;
  r := ${n.fn.row}(p_name, t, false);
  IF NOT ${held} OR r.name IS NULL THEN RETURN 'expired'; END IF;
  IF r.owner <> p_owner THEN RETURN 'not-owner'; END IF;
  UPDATE ${locks} SET expires_at = t + p_ttl * ${MS}, retain_until = greatest(retain_until, t + p_ttl * ${MS})
    WHERE name = p_name;
  RETURN 'extended';
END`,
    ),
    // A waiter gives up: leave the queue; a reservation it had goes to the next waiter; if it was
    // the first waiter, the new first is woken to ask again (nudge). Returns whether it had one.
    fn(
      n.fn.leave,
      `p_name text, p_owner text, ${handOnArgs}`,
      'boolean',
      `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks} := ${n.fn.row}(p_name, t, false);
  first boolean;
BEGIN
  IF r.name IS NULL THEN RETURN false; END IF;
  first := ${first} = p_owner;
  DELETE FROM ${waiters} WHERE name = p_name AND owner = p_owner;
  IF NOT (${reserved} AND r.owner = p_owner) THEN
    IF first THEN PERFORM ${n.fn.nudge}(p_name, t, p_channel); END IF;
    RETURN false;
  END IF;
  PERFORM ${n.fn.handOn}(p_name, t, ${handOnCall});
  RETURN true;
END`,
    ),
    // Operator override: delete the lock whoever holds it and hand it on; the grant is left as
    // it is, so the next token is still above the deleted holder's.
    fn(
      n.fn.forceRelease,
      `p_name text, ${handOnArgs}, OUT released boolean, OUT holder text, OUT holder_token bigint, ` +
        'OUT holder_taken_at bigint, OUT holder_instance text, OUT woken text',
      'record',
      `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks} := ${n.fn.row}(p_name, t, false);
BEGIN
  released := r.name IS NOT NULL AND ${held};
  IF NOT released THEN RETURN; END IF;
  holder := r.owner;
  IF r.fence_until > t THEN
    holder_token := r.fence; holder_taken_at := ${epochMs('r.taken_at')}; holder_instance := r.instance;
  END IF;
  IF left(r.owner, 1) = '^' THEN DELETE FROM ${n.holds} WHERE name = p_name; END IF;
  woken := ${n.fn.handOn}(p_name, t, ${handOnCall});
END`,
    ),
    // Claim one tick of a job: refused when its tick lies more than p_tolerance ms ahead of the
    // server's clock (-2, now), when a tick at or after it was claimed (-1, last tick), when the
    // lock is held or reserved (0, ms left); else take the lock as acquire does, record the tick
    // and a running run (1, token, the server's time of the claim in ms). A lock only kept by
    // lockAtLeastFor (held, nobody flagged behind it, and the run its token belongs to finished)
    // for a run of an earlier tick does not refuse a claim with a tick: that claim takes it over.
    // A re-sent claim finds the lock its own and gets its claim back.
    fn(
      n.fn.claimTick,
      'p_name text, p_owner text, p_ttl bigint, p_tick bigint, p_instance text, p_history integer, ' +
        'p_retention bigint, p_tolerance bigint, OUT code integer, OUT token bigint, OUT value bigint',
      'record',
      `
DECLARE
  t timestamptz := clock_timestamp();
  now_ms bigint := ${epochMs('t')};
  r ${locks} := ${n.fn.row}(p_name, t, true);
BEGIN
  IF ${held} AND r.owner = p_owner THEN
    code := 1; token := r.fence; value := ${epochMs('r.taken_at')}; RETURN;
  END IF;
  IF p_tick IS NOT NULL THEN
    IF p_tick > now_ms + p_tolerance THEN code := -2; value := now_ms; RETURN; END IF;
    IF r.tick >= p_tick THEN code := -1; value := r.tick; RETURN; END IF;
  END IF;
  IF r.expires_at > t AND NOT (p_tick IS NOT NULL AND ${held} AND NOT r.flagged AND EXISTS (
    SELECT 1 FROM ${runs} WHERE name = p_name AND fence = r.fence AND outcome <> 'running' AND tick < p_tick))
  THEN
    code := 0; value := ${left('r.expires_at')}; RETURN;
  END IF;
  token := greatest(nextval(${n.fenceLiteral}), r.fence + 1);
  UPDATE ${locks} SET owner = p_owner, reserved = false, flagged = false,
    expires_at = t + p_ttl * ${MS}, fence = token, taken_at = t, instance = p_instance, released_by = NULL,
    fence_until = t + p_retention * ${MS}, tick = coalesce(p_tick, tick), job = true,
    retain_until = greatest(retain_until, t + p_ttl * ${MS}, t + p_retention * ${MS})
    WHERE name = p_name;
  INSERT INTO ${runs} (name, fence, tick, instance, started_at, outcome)
    VALUES (p_name, token, p_tick, p_instance, now_ms, 'running');
  DELETE FROM ${runs} WHERE name = p_name AND fence < (
    SELECT min(fence) FROM (SELECT fence FROM ${runs} WHERE name = p_name ORDER BY fence DESC LIMIT p_history) kept);
  code := 1; value := now_ms;
END`,
    ),
    // Record how a run ended (once), then keep the lease for what lockAtLeastFor has left (1, ms
    // left), or end it as release does: 2 released, 0 expired, -1 not-owner.
    fn(
      n.fn.finishTick,
      `p_name text, p_owner text, p_token bigint, p_started_at bigint, p_outcome text, p_error text, ` +
        `p_at_least bigint, ${handOnArgs}, OUT code integer, OUT remaining bigint`,
      'record',
      `
DECLARE
  t timestamptz := clock_timestamp();
  now_ms bigint := ${epochMs('t')};
  r ${locks} := ${n.fn.row}(p_name, t, false);
  ended text;
BEGIN
  UPDATE ${runs} SET finished_at = now_ms, outcome = p_outcome, error = p_error
    WHERE name = p_name AND fence = p_token AND outcome = 'running';
  remaining := 0;
  IF r.name IS NOT NULL AND ${held} AND r.owner = p_owner THEN
    remaining := p_started_at + p_at_least - now_ms;
    IF remaining > 0 THEN
      UPDATE ${locks} SET expires_at = t + remaining * ${MS},
        retain_until = greatest(retain_until, t + remaining * ${MS}) WHERE name = p_name;
      code := 1; RETURN;
    END IF;
    remaining := 0;
  END IF;
  ended := ${n.fn.endLease}(p_name, p_owner, t, ${handOnCall});
  code := CASE ended WHEN 'released' THEN 2 WHEN 'expired' THEN 0 ELSE -1 END;
END`,
    ),
    // Operator tooling: forget a job's latest tick and its history; the lock and its grant stay.
    fn(
      n.fn.forgetJob,
      'p_name text',
      'void',
      `
DECLARE r ${locks} := ${n.fn.row}(p_name, clock_timestamp(), false);
BEGIN
  DELETE FROM ${runs} WHERE name = p_name;
  IF r.name IS NOT NULL THEN UPDATE ${locks} SET tick = NULL, job = false WHERE name = p_name; END IF;
END`,
    ),
  ];
}

/**
 * CREATE INDEX IF NOT EXISTS takes a share lock on the table before it looks for the index, so a
 * second migration while stores use the tables could deadlock with them: look first.
 */
function createIndex(name: string, on: string): string {
  const body = ` BEGIN IF to_regclass(${quoteLiteral(name)}) IS NULL THEN CREATE INDEX ${name} ON ${on}; END IF; END `;
  return `DO ${dollarQuote(body)};`;
}

/** A column added to a table made by an earlier schema, looked for first as createIndex does. */
function addColumn(table: string, column: string, type: string): string {
  const body = ` BEGIN IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(${quoteLiteral(table)})
    AND attname = ${quoteLiteral(column)} AND NOT attisdropped) THEN ALTER TABLE ${table} ADD COLUMN ${column} ${type}; END IF; END `;
  return `DO ${dollarQuote(body)};`;
}

/** Schema 4 added `held_as` to acquire's reply: CREATE OR REPLACE cannot change a function's row type. */
function dropOldAcquire(n: SchemaNames): string {
  const signature = quoteLiteral(`${n.fn.acquire}(text, text, bigint, bigint, integer, text, bigint, bigint)`);
  const body = ` BEGIN IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure(${signature})
    AND NOT 'held_as' = ANY(proargnames)) THEN DROP FUNCTION ${n.fn.acquire}(text, text, bigint, bigint, integer, text, bigint, bigint); END IF; END `;
  return `DO ${dollarQuote(body)};`;
}

/**
 * The migration of `prefix`: plain SQL, safe to run again (IF NOT EXISTS, CREATE OR REPLACE) and
 * to run from several sessions at once (an advisory lock makes them take turns). Run it as one
 * transaction; the store runs it itself on first use unless told not to.
 */
export function migrationSql(prefix: string): string {
  const n = schemaNames(prefix);
  const [classId, objectId] = migrationLockKey(prefix);
  return [
    `-- leasehold: the PostgreSQL schema of prefix ${JSON.stringify(prefix)} (${SCHEMA_VERSION})`,
    `SELECT pg_advisory_xact_lock(${classId}, ${objectId});`,
    `CREATE SEQUENCE IF NOT EXISTS ${n.fence} AS bigint;`,
    `CREATE TABLE IF NOT EXISTS ${n.locks} (
  name         text COLLATE "C" PRIMARY KEY,
  owner        text,
  reserved     boolean NOT NULL DEFAULT false,
  flagged      boolean NOT NULL DEFAULT false,
  expires_at   timestamptz NOT NULL DEFAULT '-infinity',
  fence        bigint NOT NULL DEFAULT 0,
  taken_at     timestamptz,
  instance     text,
  released_by  text,
  fence_until  timestamptz NOT NULL DEFAULT '-infinity',
  tick         bigint,
  job          boolean NOT NULL DEFAULT false,
  retain_until timestamptz NOT NULL
);`,
    createIndex(n.index.retain, `${n.locks} (retain_until) WHERE NOT job`),
    `CREATE TABLE IF NOT EXISTS ${n.waiters} (
  name        text COLLATE "C" NOT NULL REFERENCES ${n.locks} (name) ON DELETE CASCADE,
  owner       text NOT NULL,
  arrival     bigint GENERATED ALWAYS AS IDENTITY,
  alive_until timestamptz NOT NULL,
  kind        integer,
  PRIMARY KEY (name, owner)
);`,
    addColumn(n.waiters, 'kind', 'integer'),
    createIndex(n.index.arrival, `${n.waiters} (name, arrival)`),
    `CREATE TABLE IF NOT EXISTS ${n.holds} (
  name       text COLLATE "C" NOT NULL REFERENCES ${n.locks} (name) ON DELETE CASCADE,
  owner      text NOT NULL,
  expires_at timestamptz NOT NULL,
  token      bigint,
  taken_at   timestamptz,
  instance   text,
  PRIMARY KEY (name, owner)
);`,
    `CREATE TABLE IF NOT EXISTS ${n.runs} (
  name        text COLLATE "C" NOT NULL,
  fence       bigint NOT NULL,
  tick        bigint,
  instance    text NOT NULL,
  started_at  bigint NOT NULL,
  finished_at bigint,
  outcome     text NOT NULL,
  error       text,
  PRIMARY KEY (name, fence)
);`,
    dropOldAcquire(n),
    ...functions(n),
    ...sharedFunctions(n),
    `COMMENT ON TABLE ${n.locks} IS ${quoteLiteral(SCHEMA_VERSION)};`,
    '',
  ].join('\n\n');
}
