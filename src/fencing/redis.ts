import { fenceNumber, tokenString } from './token.js';

/**
 * The resource side of fencing on Redis: a key is a hash `{ value, fence }`, and a write is
 * accepted when its token is not lower than the fence stored with the key (the newest token the
 * key has seen; an equal token comes from the same grant), checked and stored in one script.
 * Structural client types, so that neither ioredis nor redis is loaded by this module.
 */

/** An ioredis `Redis` or `Cluster`: `eval(script, numKeys, ...keysAndArgs)`. */
export interface IORedisEvalClient {
  eval(script: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>;
}

/** A node-redis (v4, v5) client from `createClient`: `sendCommand(args)`. */
export interface NodeRedisCommandClient {
  readonly isOpen: boolean;
  sendCommand(args: string[]): Promise<unknown>;
}

/** A node-redis cluster from `createCluster`: commands are routed by their first key. */
export interface NodeRedisClusterCommandClient {
  readonly isOpen: boolean;
  getSlotMaster(slot: number): unknown;
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

/** A node-redis Sentinel client from `createSentinel`: commands go to the current master. */
export interface NodeRedisSentinelCommandClient {
  readonly isOpen: boolean;
  getMasterNode(): unknown;
  sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

/** Any client the fenced helpers accept. */
export type FencingRedisClient =
  | IORedisEvalClient
  | NodeRedisCommandClient
  | NodeRedisClusterCommandClient
  | NodeRedisSentinelCommandClient;

/** What a fenced key holds. */
export interface FencedValue {
  readonly value: string;
  /** The token of the write that stored `value`. */
  readonly fence: number;
}

export type FencedWriteResult = { readonly written: true } | { readonly written: false; readonly newest: number };

export type FencedUpdateResult =
  | { readonly written: true; readonly value: string; readonly attempts: number }
  | { readonly written: false; readonly newest: number; readonly attempts: number };

export interface FencedUpdateOptions {
  /**
   * Reads and writes to try before giving up with an error. A try is lost only to a write landing
   * between its read and its write with a token above the fence read and not above this one, so
   * more than a few in a row is unusual. Default 10.
   */
  readonly maxAttempts?: number;
}

/**
 * The one write script. Tokens are compared as decimal strings (length first, then digits), so the
 * comparison is exact for any size and no Lua number ever formats a token.
 */
export const FENCED_WRITE_SCRIPT = `-- fenced write: store a value with its fencing token only if the token is not lower than the
-- fence stored with the key (an equal token comes from the same grant), checked and stored in one step.
-- KEYS[1]  a hash {value, fence}
-- ARGV[1]  the writer's fencing token, decimal digits
-- ARGV[2]  the value
-- ARGV[3]  (a read-modify-write only) the fence the writer read, '' when there was none
-- returns  {1}         written
--          {0, fence}  refused: the stored fence is above the token
--          {2, fence}  (read-modify-write) the fence moved since the read, still not above the token
local token = ARGV[1]
if not string.match(token, '^[1-9]%d*$') then
  return redis.error_reply('ERR fenced write: the token is not a positive integer: ' .. token)
end
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored then
  if not string.match(stored, '^%d+$') then
    return redis.error_reply('ERR fenced write: the stored fence is not an integer: ' .. stored)
  end
  local fence = string.gsub(stored, '^0+(%d)', '%1')
  if #fence > #token or (#fence == #token and fence > token) then
    return {0, fence}
  end
end
if ARGV[3] ~= nil and ARGV[3] ~= (stored or '') then
  return {2, stored or ''}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', token)
return {1}
`;

/** Reads a fenced key: `{value, fence}`, either of them nil. */
export const FENCED_READ_SCRIPT = `return redis.call('HMGET', KEYS[1], 'value', 'fence')
`;

function isNodeRedis(client: FencingRedisClient): client is Exclude<FencingRedisClient, IORedisEvalClient> {
  const c = client as Partial<NodeRedisCommandClient>;
  return typeof c.sendCommand === 'function' && 'isOpen' in c;
}

function evalScript(client: FencingRedisClient, script: string, key: string, args: string[]): Promise<unknown> {
  if (typeof client !== 'object' || client === null) {
    throw new TypeError(`expected an ioredis or node-redis client, got ${client === null ? 'null' : typeof client}`);
  }
  if (isNodeRedis(client)) {
    const command = ['EVAL', script, '1', key, ...args];
    if ('getSlotMaster' in client && typeof client.getSlotMaster === 'function') {
      return client.sendCommand(key, false, command);
    }
    if ('getMasterNode' in client && typeof client.getMasterNode === 'function') {
      return client.sendCommand(false, command);
    }
    return (client as NodeRedisCommandClient).sendCommand(command);
  }
  if (typeof (client as Partial<IORedisEvalClient>).eval === 'function') {
    return (client as IORedisEvalClient).eval(script, 1, key, ...args);
  }
  throw new TypeError('expected an ioredis client (eval) or a node-redis client (sendCommand)');
}

function checkKey(key: unknown, fn: string): asserts key is string {
  if (typeof key !== 'string' || key === '') throw new TypeError(`${fn}: the key must be a non-empty string`);
}

function checkValue(value: unknown, fn: string): asserts value is string {
  if (typeof value !== 'string') {
    throw new TypeError(`${fn}: the value must be a string (serialise it first), got ${typeof value}`);
  }
}

type WriteReply = { code: 1 } | { code: 0 | 2; fence: string };

function parseWriteReply(reply: unknown, fn: string): WriteReply {
  if (Array.isArray(reply)) {
    const code = Number(reply[0]);
    if (code === 1) return { code };
    if (code === 0 || code === 2) return { code, fence: String(reply[1] ?? '') };
  }
  throw new Error(`${fn}: unexpected reply from the fenced write script: ${JSON.stringify(reply)}`);
}

/** Raw `{value, fence}` of a key, each null when absent. */
async function readRaw(client: FencingRedisClient, key: string): Promise<[string | null, string | null]> {
  const reply = await evalScript(client, FENCED_READ_SCRIPT, key, []);
  if (!Array.isArray(reply) || reply.length !== 2) {
    throw new Error(`fencedRead(${key}): unexpected reply: ${JSON.stringify(reply)}`);
  }
  const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
  return [text(reply[0]), text(reply[1])];
}

/**
 * Stores `value` under `key` with `token` if `token` is not lower than the fence stored with the
 * key (any token wins on a key without one), in one script: the holder of a grant may write the
 * key again with its own token. Refused: `{ written: false, newest }`, the stored fence, which is
 * above `token`.
 */
export async function fencedWrite(
  client: FencingRedisClient,
  key: string,
  token: number,
  value: string,
): Promise<FencedWriteResult> {
  const fn = `fencedWrite(${String(key)})`;
  checkKey(key, 'fencedWrite');
  const t = tokenString(token);
  checkValue(value, fn);
  const reply = parseWriteReply(await evalScript(client, FENCED_WRITE_SCRIPT, key, [t, value]), fn);
  if (reply.code === 1) return { written: true };
  if (reply.code === 0) return { written: false, newest: fenceNumber(reply.fence, fn) };
  throw new Error(`${fn}: unexpected reply code 2 from a write without a read`);
}

/** The value and fence stored under `key`, or null if it holds neither. */
export async function fencedRead(client: FencingRedisClient, key: string): Promise<FencedValue | null> {
  checkKey(key, 'fencedRead');
  const [value, fence] = await readRaw(client, key);
  if (value === null && fence === null) return null;
  return { value: value ?? '', fence: fence === null ? 0 : fenceNumber(fence, `fencedRead(${key})`) };
}

/**
 * Read-modify-write under a fencing token, without WATCH: reads the key, computes
 * `update(current)` (`null` for a missing key), and writes the result in a script that checks
 * both that the fence is still the one read and that `token` is not lower than it. A fence that
 * moved to a token not above this one (a write made between the read and this one) means read and
 * compute again; a fence above `token` refuses, with that fence, without calling `update` again.
 * The check is on the fence, and a write under this same token leaves it as it was: within a
 * grant, run one read-modify-write of a key at a time.
 */
export async function fencedUpdate(
  client: FencingRedisClient,
  key: string,
  token: number,
  update: (current: string | null) => string | Promise<string>,
  options: FencedUpdateOptions = {},
): Promise<FencedUpdateResult> {
  const fn = `fencedUpdate(${String(key)})`;
  checkKey(key, 'fencedUpdate');
  const t = tokenString(token);
  if (typeof update !== 'function') throw new TypeError(`${fn}: update must be a function`);
  const maxAttempts = options.maxAttempts ?? 10;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new RangeError(`${fn}: maxAttempts must be a positive integer, got ${String(maxAttempts)}`);
  }
  const [firstValue, firstFence] = await readRaw(client, key);
  let value = firstValue;
  let fence = firstFence;
  for (let attempt = 1; ; attempt++) {
    if (fence !== null && fenceNumber(fence, fn) > token) {
      return { written: false, newest: fenceNumber(fence, fn), attempts: attempt };
    }
    const next = await update(value);
    checkValue(next, fn);
    const reply = parseWriteReply(await evalScript(client, FENCED_WRITE_SCRIPT, key, [t, next, fence ?? '']), fn);
    if (reply.code === 1) return { written: true, value: next, attempts: attempt };
    if (reply.code === 0) return { written: false, newest: fenceNumber(reply.fence, fn), attempts: attempt };
    if (attempt >= maxAttempts) {
      throw new Error(`${fn}: the fence moved under each of ${maxAttempts} attempts; nothing was written`);
    }
    [value, fence] = await readRaw(client, key);
  }
}
