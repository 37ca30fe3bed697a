import { tokenString } from './token.js';

/**
 * The resource side of fencing in SQL: an UPDATE that lands only if the writer's token is not
 * lower than the row's fence column (an equal token comes from the same grant), and stores the
 * token with the write. Written for PostgreSQL's `$n` placeholders; the fence column should be a
 * `bigint` (tokens are above 2^31).
 */

export interface FencedUpdateSqlOptions {
  /** The table: `name` or `schema.name`. Each part is quoted, so it is used exactly as written. */
  readonly table: string;
  /** The column the row is found by. Default `id`. */
  readonly idColumn?: string;
  /** The `bigint` column that holds the token of the last write. Default `fence`. */
  readonly fenceColumn?: string;
  /** Columns to set, and their values (sent as parameters, never spliced into the text). */
  readonly set: Readonly<Record<string, unknown>>;
  /** The row's id. */
  readonly id: unknown;
  /** The writer's fencing token (`lock.fencingToken`). */
  readonly token: number;
  /**
   * For a read-modify-write without a row lock: the fence the writer read with the row. The
   * update then also requires the fence to be unchanged, so a write made since the read (even an
   * older token's) is not overwritten by a value computed from what it replaced. A write under the
   * writer's own token leaves the fence as it was, so this does not see one: within a grant, run
   * one read-modify-write of a row at a time (or lock the row).
   */
  readonly expectedFence?: number;
}

export interface SqlStatement {
  readonly text: string;
  readonly values: unknown[];
}

/** What `fencedUpdatePg` needs of a pg `Pool`, `PoolClient` or `Client`. */
export interface PgQueryable {
  query(text: string, values: unknown[]): Promise<{ rowCount: number | null }>;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `"name"` after checking it is a plain identifier: letters, digits and `_`, not first a digit. */
export function quoteIdentifier(name: unknown, what = 'identifier'): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name) || name.length > 63) {
    throw new TypeError(
      `${what} must match /^[A-Za-z_][A-Za-z0-9_]*$/ (at most 63 characters), got ${JSON.stringify(name) ?? String(name)}`,
    );
  }
  return `"${name}"`;
}

function quoteTable(table: unknown): string {
  if (typeof table !== 'string') return quoteIdentifier(table, 'table');
  const parts = table.split('.');
  if (parts.length > 2) return quoteIdentifier(table, 'table');
  return parts.map((part) => quoteIdentifier(part, 'table')).join('.');
}

/**
 * `UPDATE <table> SET <col> = $1, ..., <fence> = $n WHERE <id> = $m AND <fence> <= $n`, with its
 * parameters: the set values, the token as a decimal string, the id (and, with `expectedFence`,
 * `AND <fence> = $k`). Identifiers are checked and double-quoted; values are only parameters.
 */
export function fencedUpdateSql(options: FencedUpdateSqlOptions): SqlStatement {
  if (typeof options !== 'object' || options === null) throw new TypeError('fencedUpdateSql: options are required');
  const table = quoteTable(options.table);
  const idName = options.idColumn ?? 'id';
  const fenceName = options.fenceColumn ?? 'fence';
  const id = quoteIdentifier(idName, 'idColumn');
  const fence = quoteIdentifier(fenceName, 'fenceColumn');
  const token = tokenString(options.token);
  const set = options.set;
  if (typeof set !== 'object' || set === null || Array.isArray(set)) {
    throw new TypeError('fencedUpdateSql: set must be an object of column names and values');
  }
  if (options.id === undefined) throw new TypeError('fencedUpdateSql: id is required');
  const values: unknown[] = [];
  const assignments: string[] = [];
  for (const [column, value] of Object.entries(set)) {
    if (column === fenceName) {
      throw new TypeError(`fencedUpdateSql: set must not name the fence column ${JSON.stringify(column)}`);
    }
    values.push(value);
    assignments.push(`${quoteIdentifier(column, 'set column')} = $${values.length}`);
  }
  values.push(token);
  const tokenParam = `$${values.length}`;
  assignments.push(`${fence} = ${tokenParam}`);
  values.push(options.id);
  let where = `${id} = $${values.length} AND ${fence} <= ${tokenParam}`;
  if (options.expectedFence !== undefined) {
    // 0 is the default of a row never written with a token.
    const expected =
      options.expectedFence === 0 ? '0' : tokenString(options.expectedFence, 'fencedUpdateSql: expectedFence');
    values.push(expected);
    where += ` AND ${fence} = $${values.length}`;
  }
  return { text: `UPDATE ${table} SET ${assignments.join(', ')} WHERE ${where}`, values };
}

/**
 * Runs `fencedUpdateSql(options)`: `{ written: true }` when it updated the row, `{ written: false }`
 * when it did not (the row's fence is above the token, the fence is not `expectedFence`, or
 * there is no row with that id).
 */
export async function fencedUpdatePg(pg: PgQueryable, options: FencedUpdateSqlOptions): Promise<{ written: boolean }> {
  if (typeof pg !== 'object' || pg === null || typeof pg.query !== 'function') {
    throw new TypeError('fencedUpdatePg: expected a pg Pool, PoolClient or Client (an object with query)');
  }
  const { text, values } = fencedUpdateSql(options);
  const result = await pg.query(text, values);
  return { written: (result.rowCount ?? 0) > 0 };
}
