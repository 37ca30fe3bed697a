/** Pieces of SQL text every function of the schema is written with. */

/** A dollar-quote tag that does not occur in `body`, so no prefix can end a function body early. */
export function dollarQuote(body: string): string {
  let tag = '$leasehold$';
  for (let i = 1; body.includes(tag); i++) tag = `$leasehold${i}$`;
  return `${tag}${body}${tag}`;
}

/** ms as an interval. */
export const MS = "interval '1 millisecond'";
/** ms left until `until` from `t`, at least 0. */
export const left = (until: string) => `greatest(0, ceil(extract(epoch FROM (${until} - t)) * 1000))::bigint`;
/** A timestamp as ms since the epoch. */
export const epochMs = (at: string) => `floor(extract(epoch FROM ${at}) * 1000)::bigint`;

export function fn(name: string, args: string, returns: string, body: string): string {
  return `CREATE OR REPLACE FUNCTION ${name}(${args}) RETURNS ${returns} LANGUAGE plpgsql AS ${dollarQuote(body)};`;
}

/** The arguments of every call that may hand a lock on, and how a function passes them along. */
export const HAND_ON_ARGS = 'p_reservation bigint, p_announce boolean, p_channel text';
export const HAND_ON_CALL = 'p_reservation, p_announce, p_channel';

/** Shared waiters one hand-off admits together at most, when their kind has no limit (as lua/lib/hand-on.lua). */
export const MAX_ADMITTED = 64;

/** The first live waiter of lock p_name at t, as a scalar subquery (NULL when none is queued). */
export const firstLive = (waiters: string) =>
  `(SELECT owner FROM ${waiters} WHERE name = p_name AND alive_until >= t ORDER BY arrival LIMIT 1)`;

/** A grant's arguments as SQL expressions: a function's parameters, or a statement's `$n`. */
export interface GrantArgs {
  readonly owner: string;
  readonly ttl: string;
  readonly minFence: string;
  readonly instance: string;
  readonly retention: string;
}

/**
 * A grant to `a.owner` at `t` with the token after `fence`, from the sequence `fenceLiteral` (a
 * row's columns, for UPDATE … SET). The row is kept a sixteenth longer than the grant needs:
 * retain_until (indexed) then changes on one grant in many, and the others are HOT updates, which
 * write no index entry.
 */
export function grant(fenceLiteral: string, a: GrantArgs, t: string, fence: string): string {
  const keep = `greatest(${a.ttl}, ${a.retention})`;
  return (
    `owner = ${a.owner}, reserved = false, expires_at = ${t} + ${a.ttl} * ${MS}, ` +
    `fence = greatest(nextval(${fenceLiteral}), ${a.minFence}, ${fence} + 1), taken_at = ${t}, instance = ${a.instance}, ` +
    `released_by = NULL, fence_until = ${t} + ${a.retention} * ${MS}, retain_until = CASE ` +
    `WHEN retain_until >= ${t} + ${keep} * ${MS} THEN retain_until ELSE ${t} + (${keep} + ${keep} / 16) * ${MS} END`
  );
}

/** A free row's columns, for UPDATE … SET. */
export const FREED = `owner = NULL, reserved = false, flagged = false, expires_at = '-infinity'`;

/**
 * A lease `owner` ends at `t` with nobody flagged behind it, freed by one UPDATE of lock `name`
 * (a row's columns, then its condition): the grant is marked released by it while it counts, so a
 * re-sent release answers released.
 */
export const freeAlone = (name: string, owner: string, t: string) =>
  `released_by = CASE WHEN fence_until > ${t} THEN ${owner} END, ${FREED}
    WHERE name = ${name} AND owner = ${owner} AND expires_at > ${t} AND NOT reserved AND NOT flagged`;
