-- finish-tick: record how a run ended, then end its lease while honouring lockAtLeastFor; a lease
-- that ends is handed on exactly as release hands on a lock (lib/hand-on.lua). Idempotent per owner
-- token: the record is written once, and a re-sent finish of a released lease answers released
-- (until another owner takes the lock). The run's record is written before the lease is kept: a
-- claim of a later tick reads it there and takes over a lease only kept (claim-tick.lua).
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key
-- KEYS[2]  run history (sorted set: score = fencing token)
-- KEYS[3]  waiters         (sorted set: owner token -> arrival)
-- KEYS[4]  liveness        (hash: owner token -> deadline)
-- ARGV[1]  owner token
-- ARGV[2]  the run's fencing token
-- ARGV[3]  the run's startedAt (server ms, as claim-tick returned it)
-- ARGV[4]  outcome: ok, failed, done, lost or abandoned
-- ARGV[5]  error message, or '' for none
-- ARGV[6]  lockAtLeastFor in ms, counted from startedAt
-- ARGV[7]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[8]  release channel
-- ARGV[9]  reservation in ms for the waiter woken
-- ARGV[10] '1' to publish '' when nobody is queued, else '0'
-- returns  {1, remaining}  kept: still ours, lockAtLeastFor not over; the lease now ends in remaining ms
--          {2, 0}          released: deleted and handed on (now, or by this owner's earlier call)
--          {0, 0}          expired: no lock at all, or handed on (the run is recorded all the
--                          same; waiters of an expired lock are woken, as release wakes them)
--          {-1, 0}         not-owner: another owner holds the lock; it is left alone
local now = math.floor(server_now() / 1000)
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[2], ARGV[2])) do
  local record = cjson.decode(member)
  if record.outcome == 'running' then
    record.finishedAt = now
    record.outcome = ARGV[4]
    if ARGV[5] ~= '' then
      record.error = ARGV[5]
    end
    -- Written anew before the old record goes: the history is never emptied and written again in
    -- one call, which a slot being migrated refuses (members, lib/hand-on.lua).
    redis.call('ZADD', KEYS[2], ARGV[2], cjson.encode(record))
    redis.call('ZREM', KEYS[2], member)
  end
end
local held = lock_get(KEYS[1])
if read_lock(held) == ARGV[1] then
  local remaining = tonumber(ARGV[3]) + tonumber(ARGV[6]) - now
  if remaining > 0 then
    lock_expire(KEYS[1], remaining)
    return {1, remaining}
  end
end
local ended = end_lease(held, KEYS[1], ARGV[1], KEYS[3], KEYS[4], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
if ended == 1 then
  return {2, 0}
end
return {ended, 0}
