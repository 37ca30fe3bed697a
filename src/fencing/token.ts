/**
 * A fencing token as the protected resource receives it: a positive safe JavaScript integer (what
 * `lock.fencingToken` is), sent to the resource as a decimal string so that no layer between
 * (Lua numbers, JSON, a SQL driver) rounds it.
 */

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : String(value);
  if (value === null || value === undefined) return String(value);
  return `${typeof value} ${String(value)}`;
}

/**
 * The token as a decimal string, after checking it: a TypeError for anything but a safe integer
 * (a string, a bigint, NaN, 1.5, 2 ** 53), a RangeError for an integer below 1.
 */
export function tokenString(token: unknown, what = 'fencing token'): string {
  if (typeof token !== 'number' || !Number.isSafeInteger(token)) {
    throw new TypeError(`${what} must be a safe integer (a lock's fencingToken), got ${describe(token)}`);
  }
  if (token < 1) throw new RangeError(`${what} must be 1 or more, got ${describe(token)}`);
  return String(token);
}

/** A fence the resource returned (a decimal string or a number) as a number. */
export function fenceNumber(raw: unknown, where: string): number {
  const text = typeof raw === 'number' ? String(raw) : String(raw ?? '');
  if (!/^\d+$/.test(text)) throw new Error(`${where}: the stored fence is not an integer: ${JSON.stringify(text)}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new Error(`${where}: the stored fence ${text} is not a safe integer`);
  return n;
}
