import { createHash } from 'node:crypto';
import { BadReply, decodeHolder, type LockValue } from '../formats.js';
import type { HandOff, SharedHold, StoredOutcome, StoredRun } from '../port.js';
import { badReply, type Row } from './connection.js';
import type { SchemaNames } from './schema.js';
import { freeAlone, type GrantArgs, grant } from './sql.js';

/**
 * A statement the store sends. `name` is set on the statements of the lock and job calls: they are
 * sent as named prepared statements, parsed once per connection. The name is a hash of the text, so
 * one name never stands for two texts (two prefixes, two versions, two stores on one connection).
 */
export interface Statement {
  readonly text: string;
  readonly name?: string;
}

/**
 * Every statement the store sends, built once per prefix: each is one statement (a function of the
 * schema, a read-only SELECT, or acquire's and release's UPDATE that falls back to one), so each is
 * one transaction, and one round trip.
 */
export interface Statements {
  readonly version: Statement;
  readonly acquire: Statement;
  readonly take: Statement;
  readonly attempt: Statement;
  readonly release: Statement;
  readonly free: Statement;
  readonly releaseAlone: Statement;
  readonly extend: Statement;
  readonly leave: Statement;
  readonly inspect: Statement;
  readonly forceRelease: Statement;
  readonly queued: Statement;
  readonly claimTick: Statement;
  readonly finishTick: Statement;
  readonly readJob: Statement;
  readonly forgetJob: Statement;
  readonly scan: Statement;
  readonly acquireShared: Statement;
  readonly extendShared: Statement;
  readonly releaseShared: Statement;
  readonly leaveShared: Statement;
  readonly inspectShared: Statement;
}

/** A statement sent as a named prepared statement: `leasehold_<action>_<hash of the text>`. */
function named(action: string, text: string): Statement {
  return { text, name: `leasehold_${action}_${createHash('sha256').update(text).digest('hex').slice(0, 20)}` };
}

/** ms from the statement's clock `c.t` until `until`, when it lies ahead; else NULL. */
const ahead = (until: string) =>
  `CASE WHEN ${until} > c.t THEN greatest(0, ceil(extract(epoch FROM (${until} - c.t)) * 1000))::bigint END`;

/** The statements' clock: when the call's statement reached the server, one value throughout it. */
const NOW = 'statement_timestamp()';

/** `$1::text, $2::bigint, …`: a statement's parameters, cast to `types` in order. */
function params<const T extends readonly string[]>(...types: T): { [K in keyof T]: string } {
  return types.map((type, i) => `$${i + 1}::${type}`) as { [K in keyof T]: string };
}

/** The UPDATE that takes lock `name` when its lease is over, as the attempt function's first step does. */
function takeUpdate(n: SchemaNames, name: string, a: GrantArgs): string {
  return `UPDATE ${n.locks} SET ${grant(n.fenceLiteral, a, NOW, 'fence')}, flagged = false
    WHERE name = ${name} AND expires_at <= ${NOW}`;
}

/**
 * acquire: a lease that is over, taken by a caller not queued already, in the statement itself
 * (one UPDATE, as the attempt function would take it, with no function call); any other case, or
 * nothing taken, is the attempt function's. Replies as attempt does.
 */
function acquireText(n: SchemaNames): string {
  const args = params('text', 'text', 'bigint', 'bigint', 'integer', 'text', 'bigint', 'bigint');
  const [name, owner, ttl, minFence, queue, instance, retention] = args;
  const update = takeUpdate(n, name, { owner, ttl, minFence, instance, retention });
  return `WITH taken AS (${update} AND ${queue} <> 2 RETURNING fence)
SELECT coalesce((SELECT fence::text FROM taken), ${n.fn.attempt}(${args.join(', ')})) AS reply`;
}

/**
 * take: acquire's UPDATE alone, for a name whose last release here found nobody behind it: one row
 * ('<token>') when it took the lock, none otherwise (then the attempt function decides).
 */
function takeText(n: SchemaNames): string {
  const [name, owner, ttl, minFence, instance, retention] = params(
    'text',
    'text',
    'bigint',
    'bigint',
    'text',
    'bigint',
  );
  const update = takeUpdate(n, name, { owner, ttl, minFence, instance, retention });
  return `${update} RETURNING fence::text AS reply`;
}

/**
 * release: a lease the owner holds with nobody flagged behind it, freed in the statement itself
 * (one UPDATE, as the release function would free it) unless the store announces its releases;
 * any other case is the release function's. Replies as release does, but 'freed' when the UPDATE
 * freed it: the store then knows nobody waited.
 */
function releaseText(n: SchemaNames): string {
  const args = params('text', 'text', 'bigint', 'boolean', 'text');
  const [name, owner, , announce] = args;
  return `WITH freed AS (UPDATE ${n.locks} SET ${freeAlone(name, owner, NOW)} AND NOT ${announce} RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT FROM freed) THEN 'freed' ELSE ${n.fn.release}(${args.join(', ')}) END AS reply`;
}

/**
 * free: release's UPDATE alone, for a name whose last release here found nobody behind it. It
 * returns no row (a row costs the server and pg more than the count): its count says whether it
 * freed the lock.
 */
function freeText(n: SchemaNames): string {
  const [name, owner] = params('text', 'text');
  return `UPDATE ${n.locks} SET ${freeAlone(name, owner, NOW)}`;
}

export function statements(n: SchemaNames): Statements {
  const clock = '(SELECT clock_timestamp() AS t) c';
  const args = (count: number) => Array.from({ length: count }, (_, i) => `$${i + 1}`).join(', ');
  return {
    version: { text: `SELECT obj_description(to_regclass($1), 'pg_class') AS version` },
    acquire: named('acquire', acquireText(n)),
    take: named('take', takeText(n)),
    attempt: named('attempt', `SELECT ${n.fn.attempt}(${args(8)}) AS reply`),
    release: named('release', releaseText(n)),
    free: named('free', freeText(n)),
    releaseAlone: named('release_alone', `SELECT ${n.fn.release}(${args(5)}) AS reply`),
    extend: named('extend', `SELECT ${n.fn.extend}(${args(3)}) AS reply`),
    leave: named('leave', `SELECT ${n.fn.leave}(${args(5)}) AS reply`),
    forceRelease: { text: `SELECT * FROM ${n.fn.forceRelease}(${args(4)})` },
    claimTick: named('claim_tick', `SELECT code, token, value FROM ${n.fn.claimTick}(${args(8)})`),
    finishTick: named('finish_tick', `SELECT code, remaining FROM ${n.fn.finishTick}(${args(10)})`),
    inspect: {
      text: `SELECT l.owner, l.reserved, l.expires_at > c.t AS live, ${ahead('l.expires_at')} AS pttl,
  l.fence_until > c.t AS counted, l.fence, floor(extract(epoch FROM l.taken_at) * 1000)::bigint AS taken_at,
  l.instance, l.released_by
FROM ${clock} LEFT JOIN ${n.locks} l ON l.name = $1`,
    },
    queued: {
      text: `SELECT (SELECT count(*) FROM ${n.waiters} w WHERE w.name = $1 AND w.alive_until >= c.t) AS count,
  ARRAY(SELECT w.owner FROM ${n.waiters} w WHERE w.name = $1 AND w.alive_until >= c.t ORDER BY w.arrival LIMIT $2) AS first,
  CASE WHEN l.reserved AND l.expires_at > c.t THEN split_part(l.owner, ' ', 1) END AS reserved,
  CASE WHEN l.reserved THEN ${ahead('l.expires_at')} END AS pttl
FROM ${clock} LEFT JOIN ${n.locks} l ON l.name = $1`,
    },
    readJob: {
      text: `SELECT coalesce(l.expires_at > c.t AND NOT l.reserved, false) AS held,
  CASE WHEN l.fence_until > c.t THEN l.fence ELSE 0 END AS fence, l.tick,
  (SELECT coalesce(json_agg(json_build_object('fence', r.fence::text, 'tick', r.tick::text, 'instance', r.instance,
      'startedAt', r.started_at::text, 'finishedAt', r.finished_at::text, 'outcome', r.outcome, 'error', r.error)
    ORDER BY r.fence DESC), '[]')::text
   FROM (SELECT * FROM ${n.runs} WHERE name = $1 ORDER BY fence DESC LIMIT $2) r) AS runs
FROM ${clock} LEFT JOIN ${n.locks} l ON l.name = $1`,
    },
    forgetJob: { text: `SELECT ${n.fn.forgetJob}($1)` },
    acquireShared: named('acquire_shared', `SELECT code, value FROM ${n.fn.acquireShared}(${args(11)})`),
    extendShared: named('extend_shared', `SELECT ${n.fn.extendShared}(${args(3)}) AS reply`),
    releaseShared: named('release_shared', `SELECT ${n.fn.releaseShared}(${args(5)}) AS reply`),
    leaveShared: named('leave_shared', `SELECT ${n.fn.leaveShared}(${args(5)}) AS reply`),
    // The lock row's state and its live holds and reservations, oldest end first.
    inspectShared: {
      text: `SELECT l.owner, l.reserved, l.expires_at > c.t AS live,
  (SELECT coalesce(json_agg(json_build_object('owner', h.owner, 'pttl', ${ahead('h.expires_at')}::text,
      'token', h.token::text, 'takenAt', floor(extract(epoch FROM h.taken_at) * 1000)::bigint::text,
      'instance', h.instance) ORDER BY h.expires_at), '[]')::text
   FROM ${n.holds} h WHERE h.name = $1 AND h.expires_at > c.t) AS holds
FROM ${clock} LEFT JOIN ${n.locks} l ON l.name = $1`,
    },
    scan: {
      text: `SELECT name FROM ${n.locks}
WHERE name > $1 AND starts_with(name, $2) AND expires_at > clock_timestamp() AND NOT reserved
ORDER BY name LIMIT $3`,
    },
  };
}

/**
 * The channel the hand-offs of lock `name` are notified on: a hash of the prefix and the name
 * (a channel is an identifier of at most 63 bytes; a name may be 512 characters).
 */
export function channelOf(prefix: string, name: string): string {
  return `lh_${createHash('sha256').update(`${prefix}\0${name}`).digest('hex').slice(0, 40)}`;
}

/**
 * channelOf in SQL, for a function that must notify a channel it was not given: `prefix` as a
 * string literal, `name` an expression of the lock's name.
 */
export function channelSql(prefix: string, name: string): string {
  const bytes = `convert_to(${prefix}, 'UTF8') || decode('00', 'hex') || convert_to(${name}, 'UTF8')`;
  return `'lh_' || left(encode(sha256(${bytes}), 'hex'), 40)`;
}

/**
 * A NOTIFY payload '<woken> <next…>' ('' for a hand-off to nobody in particular). A challenge
 * ('?<waiter>', shared-sql.ts) wakes the waiter it names as a hand-off does: it tries again.
 */
export function decodeHandOff(payload: string): HandOff {
  if (payload === '') return { woken: null, next: [] };
  const [woken, ...next] = (payload.startsWith('?') ? payload.slice(1) : payload).split(' ');
  return { woken: woken ?? null, next };
}

/** Decoders of reply values: each says what it expected when the reply is something else. */
export class Reply {
  constructor(
    readonly kind: string,
    readonly action: string,
  ) {}

  bad(what: string): Error {
    return badReply(this.kind, this.action, what);
  }

  /** The one row a statement returns. */
  row(rows: readonly Row[]): Row {
    const row = rows[0];
    if (rows.length !== 1 || row === undefined) throw this.bad(`${rows.length} rows`);
    return row;
  }

  /** An integer, as pg returns int8 (a string) or any type parser the caller set up makes of it. */
  int(value: unknown, field: string): number {
    const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
    const v = typeof n === 'bigint' ? Number(n) : n;
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw this.bad(`${field} = ${String(value)}`);
    return v;
  }

  intOrNull(value: unknown, field: string): number | null {
    return value === null || value === undefined ? null : this.int(value, field);
  }

  bool(value: unknown, field: string): boolean {
    if (typeof value === 'boolean') return value;
    if (value === 't' || value === 'f') return value === 't';
    throw this.bad(`${field} = ${String(value)}`);
  }

  /** A boolean that SQL leaves NULL when the row is missing: false. */
  flag(value: unknown, field: string): boolean {
    return value === null || value === undefined ? false : this.bool(value, field);
  }

  text(value: unknown, field: string): string {
    if (typeof value !== 'string') throw this.bad(`${field} = ${String(value)}`);
    return value;
  }

  textOrNull(value: unknown, field: string): string | null {
    return value === null || value === undefined ? null : this.text(value, field);
  }

  /** The owner column, read as the stored lock value's holder (store/formats.ts): an owner or a shared mark. */
  holder(value: unknown, field: string): LockValue {
    const text = this.text(value, field);
    try {
      return decodeHolder(text);
    } catch (error) {
      if (error instanceof BadReply) throw this.bad(`${field} = ${text}`);
      throw error;
    }
  }

  oneOf<T extends string>(value: unknown, field: string, allowed: readonly T[]): T {
    if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
      throw this.bad(`${field} = ${String(value)}`);
    }
    return value as T;
  }

  texts(value: unknown, field: string): string[] {
    if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw this.bad(`${field} = ${value}`);
    return value;
  }

  /** JSON text, parsed: an array of objects. */
  objects(value: unknown, field: string): Record<string, unknown>[] {
    const text = this.text(value, field);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw this.bad(`${field} = ${text.slice(0, 100)}`);
    }
    if (!Array.isArray(parsed)) throw this.bad(`${field} is not an array`);
    return parsed as Record<string, unknown>[];
  }

  /** The live holds and reservations, as inspect-shared's JSON text holds them. */
  holds(value: unknown): { holds: SharedHold[]; reserved: string[] } {
    const holds: SharedHold[] = [];
    const reserved: string[] = [];
    for (const entry of this.objects(value, 'holds')) {
      const owner = this.text(entry.owner, 'hold owner');
      const token = this.intOrNull(entry.token, 'hold token');
      if (token === null) {
        reserved.push(owner);
        continue;
      }
      const takenAt = this.int(entry.takenAt, 'hold takenAt');
      const instance = this.textOrNull(entry.instance, 'hold instance') ?? '';
      holds.push({ owner, pttl: this.int(entry.pttl, 'hold pttl'), token, takenAt, instance });
    }
    return { holds, reserved };
  }

  /** The run history, as read-job's JSON text holds it. */
  runs(value: unknown): StoredRun[] {
    return this.objects(value, 'runs').map((entry) => ({
      fence: this.int(entry.fence, 'run fence'),
      tick: this.intOrNull(entry.tick, 'run tick'),
      instance: this.text(entry.instance, 'run instance'),
      startedAt: this.int(entry.startedAt, 'run startedAt'),
      finishedAt: this.intOrNull(entry.finishedAt, 'run finishedAt'),
      outcome: this.oneOf<StoredOutcome>(entry.outcome, 'run outcome', OUTCOMES),
      error: this.textOrNull(entry.error, 'run error'),
    }));
  }
}

const OUTCOMES: readonly StoredOutcome[] = ['running', 'ok', 'failed', 'done', 'lost', 'abandoned'];
