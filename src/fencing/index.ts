/**
 * `leasehold/fencing`: the resource side of fencing tokens. A lease cannot stop a holder that was
 * paused past it from writing; the resource can: a write is accepted when its token is not lower
 * than the newest token the resource has seen (equal tokens come from the same grant). Helpers for
 * a Redis key and a SQL row; no Redis or pg package is loaded. See docs/fencing.md.
 */
export {
  FENCED_READ_SCRIPT,
  FENCED_WRITE_SCRIPT,
  type FencedUpdateOptions,
  type FencedUpdateResult,
  type FencedValue,
  type FencedWriteResult,
  type FencingRedisClient,
  fencedRead,
  fencedUpdate,
  fencedWrite,
  type IORedisEvalClient,
  type NodeRedisClusterCommandClient,
  type NodeRedisCommandClient,
  type NodeRedisSentinelCommandClient,
} from './redis.js';
export {
  type FencedUpdateSqlOptions,
  fencedUpdatePg,
  fencedUpdateSql,
  type PgQueryable,
  quoteIdentifier,
  type SqlStatement,
} from './sql.js';
