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
 */
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
end)`;

/** The fenced floor on `client` (an ioredis client): acquire and release, once its functions are loaded. */
export async function fencedFloorOn(client) {
  await client.function('LOAD', 'REPLACE', LIBRARY);
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
