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
