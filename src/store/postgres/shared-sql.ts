import type { SchemaNames } from './schema.js';
import { firstLive, fn, HAND_ON_ARGS, HAND_ON_CALL, left, MAX_ADMITTED, MS } from './sql.js';

/**
 * Shared holds on PostgreSQL, as lua/lib/shared.lua keeps them on Redis: while they hold a lock,
 * its row in <prefix>_locks has owner '^<limit>' (a semaphore of <limit> permits, or 0 for a
 * read-write lock's readers) and expires_at the latest hold's end, so the mutex's functions see the
 * lock held by another owner. Each hold is a row of <prefix>_holds: its lease end, its token and
 * grant; a row without a token is a permit a hand-off reserved for a waiter; a row whose end is
 * '-infinity' is a hold released (a re-sent release answers released). Those rows mean something
 * only while the lock row says '^<limit>': whoever takes the lock afresh deletes them. A shared
 * waiter's row in <prefix>_waiters has `kind` = its limit (NULL: an exclusive waiter).
 * Every time is the one clock_timestamp() its call read; a hold is live while its end is after it.
 */
export function sharedFunctions(n: SchemaNames): string[] {
  return [...helpers(n), acquireShared(n), ...endings(n)];
}

/** Row states of `r` at `t`: held (by anyone, shared holds included), reserved, held by shared holds. */
const held = '(r.expires_at > t AND NOT r.reserved)';
const reserved = '(r.expires_at > t AND r.reserved)';
const shared = `(${held} AND left(r.owner, 1) = '^')`;

function helpers(n: SchemaNames): string[] {
  const { locks, waiters, holds } = n;
  return [
    // Take off the queue the live shared waiters of kind p_kind at its head, at most p_cap of them.
    fn(
      n.fn.admit,
      'p_name text, t timestamptz, p_kind integer, p_cap integer',
      'text[]',
      `
DECLARE admitted text[];
BEGIN
  DELETE FROM ${waiters} WHERE name = p_name AND alive_until < t;
  SELECT coalesce(array_agg(owner ORDER BY arrival), '{}') INTO admitted FROM (
    SELECT owner, arrival FROM ${waiters} WHERE name = p_name AND arrival < coalesce(
      (SELECT min(arrival) FROM ${waiters} WHERE name = p_name AND kind IS DISTINCT FROM p_kind), 9223372036854775807)
    ORDER BY arrival LIMIT greatest(p_cap, 0)) w;
  DELETE FROM ${waiters} WHERE name = p_name AND owner = ANY(admitted);
  RETURN admitted;
END`,
    ),
    // Up to three live waiters at the head, named next by a hand-off: the i-th retries i
    // reservations later, so its liveness ends i + 1 reservations from now unless it tries again
    // (one that died is dropped then, never named again).
    fn(
      n.fn.following,
      'p_name text, t timestamptz, p_reservation bigint',
      'text[]',
      `
DECLARE later text[];
BEGIN
  SELECT coalesce(array_agg(owner ORDER BY arrival), '{}') INTO later FROM (
    SELECT owner, arrival FROM ${waiters} WHERE name = p_name AND alive_until >= t ORDER BY arrival LIMIT 3) w;
  UPDATE ${waiters} w SET alive_until = t + (l.i + 1) * p_reservation * ${MS}
    FROM unnest(later) WITH ORDINALITY AS l(owner, i)
    WHERE w.name = p_name AND w.owner = l.owner AND w.alive_until > t + (l.i + 1) * p_reservation * ${MS};
  RETURN later;
END`,
    ),
    // NOTIFY each waiter woken, one message each; the last names the waiters next after it.
    fn(
      n.fn.tell,
      'p_channel text, p_woken text[], p_later text[]',
      'void',
      `
BEGIN
  FOR i IN 1 .. cardinality(p_woken) - 1 LOOP PERFORM pg_notify(p_channel, p_woken[i]); END LOOP;
  PERFORM pg_notify(p_channel, array_to_string(array_prepend(p_woken[cardinality(p_woken)], p_later), ' '));
END`,
    ),
    // Stretch the lock row to its latest live hold's end (nothing when none is live).
    fn(
      n.fn.stretch,
      'p_name text, t timestamptz',
      'void',
      `
BEGIN
  UPDATE ${locks} l SET expires_at = s.last, retain_until = greatest(l.retain_until, s.last)
    FROM (SELECT max(expires_at) AS last FROM ${holds} WHERE name = p_name AND expires_at > t) s
    WHERE l.name = p_name AND s.last IS NOT NULL;
END`,
    ),
    // Give p_owner a hold of p_ttl ms and the next token of the lock's one sequence; a queued
    // caller (p_queue 2) leaves the queue, with the dead. Returns the token.
    fn(
      n.fn.takeHold,
      'p_name text, p_owner text, t timestamptz, p_ttl bigint, p_queue integer, p_instance text, p_retention bigint',
      'bigint',
      `
DECLARE issued bigint := greatest(nextval(${n.fenceLiteral}), (SELECT fence FROM ${locks} WHERE name = p_name) + 1);
BEGIN
  INSERT INTO ${holds} (name, owner, expires_at, token, taken_at, instance)
    VALUES (p_name, p_owner, t + p_ttl * ${MS}, issued, t, p_instance)
    ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, token = EXCLUDED.token,
      taken_at = EXCLUDED.taken_at, instance = EXCLUDED.instance;
  UPDATE ${locks} SET fence = issued, taken_at = t, instance = p_instance, released_by = NULL,
    fence_until = t + p_retention * ${MS}, retain_until = greatest(retain_until, t + p_retention * ${MS})
    WHERE name = p_name;
  IF p_queue = 2 THEN DELETE FROM ${waiters} WHERE name = p_name AND (owner = p_owner OR alive_until < t); END IF;
  PERFORM ${n.fn.stretch}(p_name, t);
  RETURN issued;
END`,
    ),
    // The first live exclusive waiter queued ahead of p_owner (or at all, if it is not queued), or NULL.
    fn(
      n.fn.writer,
      'p_name text, p_owner text, t timestamptz',
      'text',
      `
BEGIN
  RETURN (SELECT w.owner FROM ${waiters} w WHERE w.name = p_name AND w.kind IS NULL AND w.alive_until >= t
    AND w.arrival < coalesce((SELECT m.arrival FROM ${waiters} m WHERE m.name = p_name AND m.owner = p_owner),
      9223372036854775807)
    ORDER BY w.arrival LIMIT 1);
END`,
    ),
    // Ask exclusive waiter p_writer, which keeps a shared request out, whether it is alive
    // (lua/lib/shared.lua's challenge): unless it tried within the last reservation or was asked
    // already, its liveness ends one reservation from now and '?<writer>' wakes it; a live one
    // tries again (renewing it), a dead one lapses. Returns ms after which to try again.
    fn(
      n.fn.challenge,
      `p_name text, p_writer text, t timestamptz, p_waiter_lease bigint, ${HAND_ON_ARGS}`,
      'bigint',
      `
DECLARE deadline timestamptz; tried timestamptz;
BEGIN
  SELECT alive_until INTO deadline FROM ${waiters} WHERE name = p_name AND owner = p_writer;
  IF deadline <= t + p_reservation * ${MS} THEN RETURN ${left('deadline')}; END IF;
  tried := deadline - p_waiter_lease * ${MS};
  IF tried > t - p_reservation * ${MS} THEN
    RETURN least(p_reservation, ${left(`tried + p_reservation * ${MS}`)});
  END IF;
  UPDATE ${waiters} SET alive_until = t + p_reservation * ${MS} WHERE name = p_name AND owner = p_writer;
  PERFORM pg_notify(p_channel, '?' || p_writer);
  RETURN p_reservation;
END`,
    ),
    // After a hold ended: with no hold left, free the lock and hand it on as a release does;
    // else, if waiters are flagged, reserve the free permits for the shared waiters of this kind
    // at the head (each told), or wake the head waiter to ask again ('?<owner>': the lock may now
    // end sooner than it was told). Then stretch the lock to its latest hold.
    fn(
      n.fn.freeUp,
      `p_name text, t timestamptz, ${HAND_ON_ARGS}`,
      'void',
      `
DECLARE r ${locks}; used integer; lim integer; admitted text[];
BEGIN
  SELECT * INTO r FROM ${locks} WHERE name = p_name;
  SELECT count(*) INTO used FROM ${holds} WHERE name = p_name AND expires_at > t;
  IF used = 0 THEN
    IF r.flagged THEN PERFORM ${n.fn.handOn}(p_name, t, ${HAND_ON_CALL}); RETURN; END IF;
    UPDATE ${locks} SET owner = NULL, reserved = false, flagged = false, expires_at = '-infinity' WHERE name = p_name;
    IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
    RETURN;
  END IF;
  IF r.flagged THEN
    lim := substr(r.owner, 2)::integer;
    admitted := ${n.fn.admit}(p_name, t, lim, CASE lim WHEN 0 THEN ${MAX_ADMITTED} ELSE lim - used END);
    IF cardinality(admitted) > 0 THEN
      INSERT INTO ${holds} (name, owner, expires_at) SELECT p_name, a, t + p_reservation * ${MS} FROM unnest(admitted) a
        ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, token = NULL, taken_at = NULL,
          instance = NULL;
      PERFORM ${n.fn.tell}(p_channel, admitted, ${n.fn.following}(p_name, t, p_reservation));
    ELSE
      PERFORM ${n.fn.askFirst}(p_name, t, p_channel);
    END IF;
  END IF;
  PERFORM ${n.fn.stretch}(p_name, t);
END`,
    ),
  ];
}

/**
 * Take a shared hold (lua/acquire-shared.lua): granted when the lock is not held exclusively nor
 * reserved for others, a permit is free and no live exclusive waiter is queued ahead; a waiter a
 * hand-off admitted takes its place. Refused: queue a caller that will wait (p_queue as acquire's)
 * with its kind; a free lock whose first live waiter is exclusive is handed to it, as a release
 * would. Returns (1, token), (0, ms to wait) or (-1, the limit the name is held with; -1 held
 * exclusively while a semaphore was asked for).
 */
function acquireShared(n: SchemaNames): string {
  const { locks, waiters, holds } = n;
  const hold = `code := 1; value := ${n.fn.takeHold}(p_name, p_owner, t, p_ttl, p_queue, p_instance, p_retention);`;
  // A hold a hand-off reserved for this waiter: the hand-off named the waiters behind it.
  const take = `${hold} RETURN;`;
  // A hold no hand-off reserved: the first waiter left (named by none) learns this hold's end.
  const takeFree = `${hold} IF p_queue = 2 THEN PERFORM ${n.fn.askFirst}(p_name, t, p_channel); END IF; RETURN;`;
  return fn(
    n.fn.acquireShared,
    'p_name text, p_owner text, p_ttl bigint, p_limit integer, p_queue integer, p_instance text, ' +
      `p_retention bigint, p_waiter_lease bigint, ${HAND_ON_ARGS}, OUT code integer, OUT value bigint`,
    'record',
    `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks} := ${n.fn.row}(p_name, t, true);
  mark text := '^' || p_limit;
  h ${holds};
  writer text;
  wait bigint := CASE WHEN r.expires_at > t THEN ${left('r.expires_at')} ELSE -2 END;
BEGIN
  IF p_limit > 0 AND ${held} AND left(r.owner, 1) <> '^' THEN code := -1; value := -1; RETURN; END IF;
  IF ${shared} THEN
    IF r.owner <> mark THEN code := -1; value := substr(r.owner, 2)::bigint; RETURN; END IF;
    SELECT * INTO h FROM ${holds} WHERE name = p_name AND owner = p_owner;
    IF h.expires_at > t AND h.token IS NOT NULL THEN code := 1; value := h.token; RETURN; END IF;
    -- A permit a hand-off reserved for this waiter.
    IF h.expires_at > t THEN ${take} END IF;
    DELETE FROM ${holds} WHERE name = p_name AND expires_at <= t;
    IF p_limit = 0 OR (SELECT count(*) FROM ${holds} WHERE name = p_name) < p_limit THEN
      writer := ${n.fn.writer}(p_name, p_owner, t);
      IF writer IS NULL THEN ${takeFree} END IF;
      wait := ${n.fn.challenge}(p_name, writer, t, p_waiter_lease, ${HAND_ON_CALL});
    ELSE
      -- The first hold to end frees a permit.
      wait := (SELECT ${left('min(expires_at)')} FROM ${holds} WHERE name = p_name);
    END IF;
  ELSIF ${reserved} AND p_owner = ANY(string_to_array(r.owner, ' ')) THEN
    -- Reserved for shared waiters, this one among them: theirs now, each of the others keeping
    -- its reservation until it comes.
    DELETE FROM ${holds} WHERE name = p_name;
    INSERT INTO ${holds} (name, owner, expires_at)
      SELECT p_name, w, r.expires_at FROM unnest(string_to_array(r.owner, ' ')) w WHERE w <> p_owner;
    UPDATE ${locks} SET owner = mark, reserved = false, expires_at = t + greatest(p_ttl, wait) * ${MS}
      WHERE name = p_name;
    ${take}
  ELSIF r.expires_at <= t THEN
    IF ${n.fn.writer}(p_name, p_owner, t) IS NULL THEN
      DELETE FROM ${holds} WHERE name = p_name;
      UPDATE ${locks} SET owner = mark, reserved = false, flagged = false, expires_at = t + p_ttl * ${MS}
        WHERE name = p_name;
      ${takeFree}
    END IF;
    -- Free, with an exclusive waiter ahead: it gets the lock, as from a release.
    PERFORM ${n.fn.handOn}(p_name, t, ${HAND_ON_CALL});
    SELECT * INTO r FROM ${locks} WHERE name = p_name;
    wait := CASE WHEN r.expires_at > t THEN ${left('r.expires_at')} ELSE -2 END;
  END IF;
  IF p_queue <> 0 THEN
    DELETE FROM ${waiters} WHERE name = p_name AND alive_until < t;
    INSERT INTO ${waiters} (name, owner, alive_until, kind) VALUES (p_name, p_owner, t + p_waiter_lease * ${MS}, p_limit)
      ON CONFLICT (name, owner) DO UPDATE SET alive_until = EXCLUDED.alive_until, kind = EXCLUDED.kind;
    UPDATE ${locks} SET flagged = true, retain_until = greatest(retain_until, t + p_waiter_lease * ${MS})
      WHERE name = p_name;
  END IF;
  code := 0; value := wait;
END`,
  );
}

/** extend-shared, release-shared, leave-shared: each on a live hold (or reservation) of p_owner. */
function endings(n: SchemaNames): string[] {
  const { locks, waiters, holds } = n;
  const live = `EXISTS (SELECT 1 FROM ${holds} WHERE name = p_name AND owner = p_owner AND expires_at > t AND token IS NOT NULL)`;
  // A hold that is not live: expired, unless another owner holds the lock exclusively.
  const gone = `RETURN CASE WHEN ${held} AND left(r.owner, 1) <> '^' THEN 'not-owner' ELSE 'expired' END;`;
  const start = `
DECLARE
  t timestamptz := clock_timestamp();
  r ${locks} := ${n.fn.row}(p_name, t, false);`;
  return [
    // Reset p_owner's hold to p_ttl ms if it is live. Returns extended, expired or not-owner.
    fn(
      n.fn.extendShared,
      'p_name text, p_owner text, p_ttl bigint',
      'text',
      `${start}
BEGIN
  IF ${shared} AND ${live} THEN
    UPDATE ${holds} SET expires_at = t + p_ttl * ${MS} WHERE name = p_name AND owner = p_owner;
    PERFORM ${n.fn.stretch}(p_name, t);
    RETURN 'extended';
  END IF;
  ${gone}
END`,
    ),
    // End p_owner's hold (marked released: a re-sent release answers released until the next
    // acquisition) and hand on what it freed. Returns released, expired or not-owner.
    fn(
      n.fn.releaseShared,
      `p_name text, p_owner text, ${HAND_ON_ARGS}`,
      'text',
      `${start}
BEGIN
  IF ${shared} AND ${live} THEN
    UPDATE ${holds} SET expires_at = '-infinity' WHERE name = p_name AND owner = p_owner;
    PERFORM ${n.fn.freeUp}(p_name, t, ${HAND_ON_CALL});
    RETURN 'released';
  END IF;
  IF EXISTS (SELECT 1 FROM ${holds} WHERE name = p_name AND owner = p_owner AND expires_at = '-infinity') THEN
    RETURN 'released';
  END IF;
  ${gone}
END`,
    ),
    // A shared waiter gives up: leave the queue and pass on what a hand-off reserved for it (its
    // place in a lock reserved for several, the last one out handing the lock on; or a permit);
    // if it was the first waiter, the new first is woken to ask again (nudge). Returns whether it
    // had a reservation.
    fn(
      n.fn.leaveShared,
      `p_name text, p_owner text, ${HAND_ON_ARGS}`,
      'boolean',
      `${start}
  rest text[];
  first boolean;
BEGIN
  IF r.name IS NULL THEN RETURN false; END IF;
  first := ${firstLive(waiters)} = p_owner;
  DELETE FROM ${waiters} WHERE name = p_name AND owner = p_owner;
  IF ${reserved} AND p_owner = ANY(string_to_array(r.owner, ' ')) THEN
    rest := array_remove(string_to_array(r.owner, ' '), p_owner);
    IF cardinality(rest) = 0 THEN PERFORM ${n.fn.handOn}(p_name, t, ${HAND_ON_CALL});
    ELSE UPDATE ${locks} SET owner = array_to_string(rest, ' ') WHERE name = p_name;
    END IF;
    RETURN true;
  END IF;
  IF ${shared} AND EXISTS (SELECT 1 FROM ${holds}
      WHERE name = p_name AND owner = p_owner AND expires_at > t AND token IS NULL) THEN
    DELETE FROM ${holds} WHERE name = p_name AND owner = p_owner;
    PERFORM ${n.fn.freeUp}(p_name, t, ${HAND_ON_CALL});
    RETURN true;
  END IF;
  IF first THEN PERFORM ${n.fn.nudge}(p_name, t, p_channel); END IF;
  RETURN false;
END`,
    ),
  ];
}
