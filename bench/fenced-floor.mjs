/**
 * The least a lock with fencing tokens costs as two server-side functions on ioredis, no library:
 * one FCALL takes the lock (SET NX PX) and issues its token (INCR of a counter beside it, the two
 * keys declared, as Cluster requires); one FCALL compares and deletes. No queue, no re-sent command
 * answered twice alike, no token floor from the clock, no retention on the counter. Its keys are named
 * as leasehold names a lock's, so the footprint scenario compares like with like. The bench's
 * `fenced functions (floor)` row (peers.mjs) and the bottom row of layers.mjs.
 *
 * `retainedTokenOn` is the same lock whose token outlives its lease, as leasehold's must: the token
 * is the server's clock in µs (never below an earlier one while the clock does not step back),
 * kept beside the lock with the retention's expiry, and nothing else: no grant record, no release
 * mark. The footprint scenario's `retained token (floor)` row: the least a held lock and a
 * released name cost when tokens are kept for a retention.
 *
 * `oneKeyOn` is the leanest layout that keeps what leasehold's uncontended cycle keeps, in one key
 * per lock: the grant record (`'<owner> <lease end ms> <token> <taken-at µs> <instance>'`, `'|'`
 * before it once released) with the retention's expiry, the lease's end read against the server's
 * clock. The token is the clock in µs or one above the last, and never below a floor (Redlock's);
 * a re-sent acquire gets its grant back and a re-sent release answers released. No queue. Its owner
 * tokens and instance label are as long as leasehold's, so the footprint compares like with like:
 * the `one key per lock (floor)` row, in the speed scenarios and the footprint.
 */
import { hostname } from 'node:os';

const LIBRARY = `#!lua name=bench_fenced_floor
redis.register_function('bench_fenced_acquire', function(KEYS, ARGV)
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
  return redis.call('INCR', KEYS[2])
end)
redis.register_function('bench_fenced_release', function(KEYS, ARGV)
  if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
  return 0
end)
redis.register_function('bench_retained_acquire', function(KEYS, ARGV)
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
  local t = redis.call('TIME')
  local token = t[1] .. string.sub('00000' .. t[2], -6)
  redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
  return tonumber(token)
end)
local function now_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.register_function('bench_onekey_acquire', function(KEYS, ARGV)
  local t = redis.call('TIME')
  local stamp = t[1] .. string.sub('00000' .. t[2], -6)
  local ms = now_ms(t)
  local value = redis.call('GET', KEYS[1])
  local last = 0
  if value then
    local holder, ends, token = string.match(value, '^(%S+) (%d+) (%d+)')
    last = tonumber(token)
    if string.byte(holder, 1) ~= 124 and tonumber(ends) > ms then
      if holder == ARGV[1] then return last end
      return 0
    end
  end
  local token, text = tonumber(stamp), stamp
  local least = math.max(last + 1, tonumber(ARGV[5]))
  if least > token then token, text = least, string.format('%.0f', least) end
  local ends = string.format('%.0f', ms + tonumber(ARGV[2]))
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ends .. ' ' .. text .. ' ' .. stamp .. ' ' .. ARGV[4], 'PX', ARGV[3])
  return token
end)
redis.register_function('bench_onekey_release', function(KEYS, ARGV)
  local value = redis.call('GET', KEYS[1])
  if not value then return 0 end
  local holder, ends = string.match(value, '^(%S+) (%d+)')
  if holder == '|' .. ARGV[1] then return 1 end
  if holder ~= ARGV[1] then return -1 end
  if tonumber(ends) <= now_ms(redis.call('TIME')) then return 0 end
  redis.call('SET', KEYS[1], '|' .. value, 'KEEPTTL')
  return 1
end)`;

/** Load every floor's functions on `client` (an ioredis client). */
function load(client) {
  return client.function('LOAD', 'REPLACE', LIBRARY);
}

/** The fenced floor on `client` (an ioredis client): acquire and release, once its functions are loaded. */
export async function fencedFloorOn(client) {
  await load(client);
  let n = 0;
  return {
    async acquire(key, ttl) {
      const token = `${process.pid}:${n++}`;
      const lock = `leasehold:{${key}}`;
      const fence = await client.fcall('bench_fenced_acquire', 2, lock, `${lock}:fence`, token, ttl);
      if (fence === 0) throw new Error(`${key} is held`);
      return { lock, token, fence };
    },
    release: ({ lock, token }) => client.fcall('bench_fenced_release', 1, lock, token),
  };
}

/** One week, leasehold's default retention of a released name's token. */
const RETENTION_MS = 7 * 24 * 3_600_000;

/** The retained-token floor on `client` (an ioredis client), its functions loaded by fencedFloorOn. */
export async function retainedTokenOn(client) {
  const fenced = await fencedFloorOn(client);
  let n = 0;
  return {
    async acquire(key, ttl) {
      const token = `${process.pid}:${n++}`;
      const lock = `leasehold:{${key}}`;
      const fence = await client.fcall('bench_retained_acquire', 2, lock, `${lock}:fence`, token, ttl, RETENTION_MS);
      if (fence === 0) throw new Error(`${key} is held`);
      return { lock, token, fence };
    },
    release: fenced.release,
  };
}

/** An instance label as long as leasehold's default one (`hostname:pid`). */
const INSTANCE = `${hostname()}:${process.pid}`;

/** The one-key floor on `client` (an ioredis client). */
export async function oneKeyOn(client) {
  await load(client);
  let n = 0;
  return {
    async acquire(key, ttl) {
      // 22 characters, as a leasehold owner token (128 bits, base64url).
      const token = `${process.pid}-${n++}`.padEnd(22, '-');
      const lock = `leasehold:{${key}}`;
      const fence = await client.fcall('bench_onekey_acquire', 1, lock, token, ttl, RETENTION_MS, INSTANCE, 0);
      if (fence === 0) throw new Error(`${key} is held`);
      return { lock, token, fence };
    },
    async release({ lock, token }) {
      if ((await client.fcall('bench_onekey_release', 1, lock, token)) !== 1) {
        throw new Error(`${lock}: the one-key release did not release`);
      }
    },
  };
}
