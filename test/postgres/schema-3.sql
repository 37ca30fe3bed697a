-- leasehold: the PostgreSQL schema of prefix "upgrade_v3" (leasehold postgres schema 3)

SELECT pg_advisory_xact_lock(1818583411, -468189095);

CREATE SEQUENCE IF NOT EXISTS "upgrade_v3_fence" AS bigint;

CREATE TABLE IF NOT EXISTS "upgrade_v3_locks" (
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
);

DO $leasehold$ BEGIN IF to_regclass('"upgrade_v3_locks_retain"') IS NULL THEN CREATE INDEX "upgrade_v3_locks_retain" ON "upgrade_v3_locks" (retain_until) WHERE NOT job; END IF; END $leasehold$;

CREATE TABLE IF NOT EXISTS "upgrade_v3_waiters" (
  name        text COLLATE "C" NOT NULL REFERENCES "upgrade_v3_locks" (name) ON DELETE CASCADE,
  owner       text NOT NULL,
  arrival     bigint GENERATED ALWAYS AS IDENTITY,
  alive_until timestamptz NOT NULL,
  PRIMARY KEY (name, owner)
);

DO $leasehold$ BEGIN IF to_regclass('"upgrade_v3_waiters_arrival"') IS NULL THEN CREATE INDEX "upgrade_v3_waiters_arrival" ON "upgrade_v3_waiters" (name, arrival); END IF; END $leasehold$;

CREATE TABLE IF NOT EXISTS "upgrade_v3_runs" (
  name        text COLLATE "C" NOT NULL,
  fence       bigint NOT NULL,
  tick        bigint,
  instance    text NOT NULL,
  started_at  bigint NOT NULL,
  finished_at bigint,
  outcome     text NOT NULL,
  error       text,
  PRIMARY KEY (name, fence)
);

CREATE OR REPLACE FUNCTION "upgrade_v3_row"(p_name text, t timestamptz, p_make boolean) RETURNS "upgrade_v3_locks" LANGUAGE plpgsql AS $leasehold$
DECLARE r "upgrade_v3_locks";
BEGIN
  SELECT * INTO r FROM "upgrade_v3_locks" WHERE name = p_name FOR UPDATE;
  IF FOUND OR NOT p_make THEN RETURN r; END IF;
  INSERT INTO "upgrade_v3_locks" (name, retain_until) VALUES (p_name, t) ON CONFLICT (name) DO NOTHING;
  SELECT * INTO r FROM "upgrade_v3_locks" WHERE name = p_name FOR UPDATE;
  DELETE FROM "upgrade_v3_locks" WHERE name IN (
    SELECT name FROM "upgrade_v3_locks" WHERE NOT job AND retain_until < t ORDER BY retain_until LIMIT 2 FOR UPDATE SKIP LOCKED);
  RETURN r;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_hand_on"(p_name text, t timestamptz, p_reservation bigint, p_announce boolean, p_channel text) RETURNS text LANGUAGE plpgsql AS $leasehold$
DECLARE woken text; later text[];
BEGIN
  DELETE FROM "upgrade_v3_waiters" WHERE name = p_name AND alive_until < t;
  SELECT owner INTO woken FROM "upgrade_v3_waiters" WHERE name = p_name ORDER BY arrival LIMIT 1;
  IF woken IS NULL THEN
    UPDATE "upgrade_v3_locks" SET owner = NULL, reserved = false, flagged = false, expires_at = '-infinity' WHERE name = p_name;
    IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
    RETURN NULL;
  END IF;
  DELETE FROM "upgrade_v3_waiters" WHERE name = p_name AND owner = woken;
  SELECT coalesce(array_agg(owner ORDER BY arrival), '{}') INTO later
    FROM (SELECT owner, arrival FROM "upgrade_v3_waiters" WHERE name = p_name ORDER BY arrival LIMIT 3) w;
  UPDATE "upgrade_v3_waiters" w SET alive_until = t + (l.i + 1) * p_reservation * interval '1 millisecond'
    FROM unnest(later) WITH ORDINALITY AS l(owner, i)
    WHERE w.name = p_name AND w.owner = l.owner AND w.alive_until > t + (l.i + 1) * p_reservation * interval '1 millisecond';
  UPDATE "upgrade_v3_locks" SET owner = woken, reserved = true, flagged = cardinality(later) > 0,
    expires_at = t + p_reservation * interval '1 millisecond', retain_until = greatest(retain_until, t + p_reservation * interval '1 millisecond')
    WHERE name = p_name;
  PERFORM pg_notify(p_channel, array_to_string(array_prepend(woken, later), ' '));
  RETURN woken;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_end_lease"(p_name text, p_owner text, t timestamptz, p_reservation bigint, p_announce boolean, p_channel text) RETURNS text LANGUAGE plpgsql AS $leasehold$
DECLARE r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, false);
BEGIN
  IF r.name IS NULL THEN RETURN 'expired'; END IF;
  IF (r.expires_at > t AND NOT r.reserved) AND r.owner = p_owner THEN
    UPDATE "upgrade_v3_locks" SET released_by = CASE WHEN fence_until > t THEN p_owner END WHERE name = p_name;
    IF r.flagged THEN
      PERFORM "upgrade_v3_hand_on"(p_name, t, p_reservation, p_announce, p_channel);
    ELSE
      UPDATE "upgrade_v3_locks" SET owner = NULL, reserved = false, flagged = false, expires_at = '-infinity' WHERE name = p_name;
      IF p_announce THEN PERFORM pg_notify(p_channel, ''); END IF;
    END IF;
    RETURN 'released';
  END IF;
  IF r.fence_until > t AND r.released_by = p_owner THEN RETURN 'released'; END IF;
  IF (r.expires_at > t AND NOT r.reserved) THEN RETURN 'not-owner'; END IF;
  IF NOT (r.expires_at > t AND r.reserved) THEN PERFORM "upgrade_v3_hand_on"(p_name, t, p_reservation, p_announce, p_channel); END IF;
  RETURN 'expired';
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_acquire"(p_name text, p_owner text, p_ttl bigint, p_min_fence bigint, p_queue integer, p_instance text, p_retention bigint, p_waiter_lease bigint, OUT acquired boolean, OUT value bigint) RETURNS record LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, true);
  token bigint;
BEGIN
  IF (r.expires_at > t AND NOT r.reserved) AND r.owner = p_owner THEN
    acquired := true; value := r.fence; RETURN;
  END IF;
  IF (r.expires_at > t AND NOT r.reserved) OR ((r.expires_at > t AND r.reserved) AND r.owner <> p_owner) THEN
    IF p_queue <> 0 THEN
      DELETE FROM "upgrade_v3_waiters" WHERE name = p_name AND alive_until < t;
      INSERT INTO "upgrade_v3_waiters" (name, owner, alive_until) VALUES (p_name, p_owner, t + p_waiter_lease * interval '1 millisecond')
        ON CONFLICT (name, owner) DO UPDATE SET alive_until = EXCLUDED.alive_until;
      UPDATE "upgrade_v3_locks" SET flagged = true, retain_until = greatest(retain_until, t + p_waiter_lease * interval '1 millisecond')
        WHERE name = p_name;
    END IF;
    acquired := false; value := greatest(0, ceil(extract(epoch FROM (r.expires_at - t)) * 1000))::bigint; RETURN;
  END IF;
  token := greatest(nextval('"upgrade_v3_fence"'), p_min_fence, r.fence + 1);
  UPDATE "upgrade_v3_locks" SET owner = p_owner, reserved = false, flagged = (r.expires_at > t AND r.reserved) AND r.flagged,
    expires_at = t + p_ttl * interval '1 millisecond', fence = token, taken_at = t, instance = p_instance, released_by = NULL,
    fence_until = t + p_retention * interval '1 millisecond',
    retain_until = greatest(retain_until, t + p_ttl * interval '1 millisecond', t + p_retention * interval '1 millisecond')
    WHERE name = p_name;
  IF p_queue = 2 THEN DELETE FROM "upgrade_v3_waiters" WHERE name = p_name AND (owner = p_owner OR alive_until < t); END IF;
  acquired := true; value := token;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_release"(p_name text, p_owner text, p_reservation bigint, p_announce boolean, p_channel text) RETURNS text LANGUAGE plpgsql AS $leasehold$
BEGIN
  RETURN "upgrade_v3_end_lease"(p_name, p_owner, clock_timestamp(), p_reservation, p_announce, p_channel);
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_extend"(p_name text, p_owner text, p_ttl bigint) RETURNS text LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, false);
BEGIN
  IF NOT (r.expires_at > t AND NOT r.reserved) OR r.name IS NULL THEN RETURN 'expired'; END IF;
  IF r.owner <> p_owner THEN RETURN 'not-owner'; END IF;
  UPDATE "upgrade_v3_locks" SET expires_at = t + p_ttl * interval '1 millisecond', retain_until = greatest(retain_until, t + p_ttl * interval '1 millisecond')
    WHERE name = p_name;
  RETURN 'extended';
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_leave"(p_name text, p_owner text, p_reservation bigint, p_announce boolean, p_channel text) RETURNS boolean LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, false);
BEGIN
  IF r.name IS NULL THEN RETURN false; END IF;
  DELETE FROM "upgrade_v3_waiters" WHERE name = p_name AND owner = p_owner;
  IF NOT ((r.expires_at > t AND r.reserved) AND r.owner = p_owner) THEN RETURN false; END IF;
  PERFORM "upgrade_v3_hand_on"(p_name, t, p_reservation, p_announce, p_channel);
  RETURN true;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_force_release"(p_name text, p_reservation bigint, p_announce boolean, p_channel text, OUT released boolean, OUT holder text, OUT holder_token bigint, OUT holder_taken_at bigint, OUT holder_instance text, OUT woken text) RETURNS record LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, false);
BEGIN
  released := r.name IS NOT NULL AND (r.expires_at > t AND NOT r.reserved);
  IF NOT released THEN RETURN; END IF;
  holder := r.owner;
  IF r.fence_until > t THEN
    holder_token := r.fence; holder_taken_at := floor(extract(epoch FROM r.taken_at) * 1000)::bigint; holder_instance := r.instance;
  END IF;
  woken := "upgrade_v3_hand_on"(p_name, t, p_reservation, p_announce, p_channel);
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_claim_tick"(p_name text, p_owner text, p_ttl bigint, p_tick bigint, p_instance text, p_history integer, p_retention bigint, p_tolerance bigint, OUT code integer, OUT token bigint, OUT value bigint) RETURNS record LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  now_ms bigint := floor(extract(epoch FROM t) * 1000)::bigint;
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, true);
BEGIN
  IF (r.expires_at > t AND NOT r.reserved) AND r.owner = p_owner THEN
    code := 1; token := r.fence; value := floor(extract(epoch FROM r.taken_at) * 1000)::bigint; RETURN;
  END IF;
  IF p_tick IS NOT NULL THEN
    IF p_tick > now_ms + p_tolerance THEN code := -2; value := now_ms; RETURN; END IF;
    IF r.tick >= p_tick THEN code := -1; value := r.tick; RETURN; END IF;
  END IF;
  IF r.expires_at > t AND NOT (p_tick IS NOT NULL AND (r.expires_at > t AND NOT r.reserved) AND NOT r.flagged AND EXISTS (
    SELECT 1 FROM "upgrade_v3_runs" WHERE name = p_name AND fence = r.fence AND outcome <> 'running' AND tick < p_tick))
  THEN
    code := 0; value := greatest(0, ceil(extract(epoch FROM (r.expires_at - t)) * 1000))::bigint; RETURN;
  END IF;
  token := greatest(nextval('"upgrade_v3_fence"'), r.fence + 1);
  UPDATE "upgrade_v3_locks" SET owner = p_owner, reserved = false, flagged = false,
    expires_at = t + p_ttl * interval '1 millisecond', fence = token, taken_at = t, instance = p_instance, released_by = NULL,
    fence_until = t + p_retention * interval '1 millisecond', tick = coalesce(p_tick, tick), job = true,
    retain_until = greatest(retain_until, t + p_ttl * interval '1 millisecond', t + p_retention * interval '1 millisecond')
    WHERE name = p_name;
  INSERT INTO "upgrade_v3_runs" (name, fence, tick, instance, started_at, outcome)
    VALUES (p_name, token, p_tick, p_instance, now_ms, 'running');
  DELETE FROM "upgrade_v3_runs" WHERE name = p_name AND fence < (
    SELECT min(fence) FROM (SELECT fence FROM "upgrade_v3_runs" WHERE name = p_name ORDER BY fence DESC LIMIT p_history) kept);
  code := 1; value := now_ms;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_finish_tick"(p_name text, p_owner text, p_token bigint, p_started_at bigint, p_outcome text, p_error text, p_at_least bigint, p_reservation bigint, p_announce boolean, p_channel text, OUT code integer, OUT remaining bigint) RETURNS record LANGUAGE plpgsql AS $leasehold$
DECLARE
  t timestamptz := clock_timestamp();
  now_ms bigint := floor(extract(epoch FROM t) * 1000)::bigint;
  r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, t, false);
  ended text;
BEGIN
  UPDATE "upgrade_v3_runs" SET finished_at = now_ms, outcome = p_outcome, error = p_error
    WHERE name = p_name AND fence = p_token AND outcome = 'running';
  remaining := 0;
  IF r.name IS NOT NULL AND (r.expires_at > t AND NOT r.reserved) AND r.owner = p_owner THEN
    remaining := p_started_at + p_at_least - now_ms;
    IF remaining > 0 THEN
      UPDATE "upgrade_v3_locks" SET expires_at = t + remaining * interval '1 millisecond',
        retain_until = greatest(retain_until, t + remaining * interval '1 millisecond') WHERE name = p_name;
      code := 1; RETURN;
    END IF;
    remaining := 0;
  END IF;
  ended := "upgrade_v3_end_lease"(p_name, p_owner, t, p_reservation, p_announce, p_channel);
  code := CASE ended WHEN 'released' THEN 2 WHEN 'expired' THEN 0 ELSE -1 END;
END$leasehold$;

CREATE OR REPLACE FUNCTION "upgrade_v3_forget_job"(p_name text) RETURNS void LANGUAGE plpgsql AS $leasehold$
DECLARE r "upgrade_v3_locks" := "upgrade_v3_row"(p_name, clock_timestamp(), false);
BEGIN
  DELETE FROM "upgrade_v3_runs" WHERE name = p_name;
  IF r.name IS NOT NULL THEN UPDATE "upgrade_v3_locks" SET tick = NULL, job = false WHERE name = p_name; END IF;
END$leasehold$;

COMMENT ON TABLE "upgrade_v3_locks" IS 'leasehold postgres schema 3';

