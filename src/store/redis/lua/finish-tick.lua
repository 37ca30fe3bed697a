-- finish-tick: record how a run ended, then end its lease while honouring lockAtLeastFor.
-- KEYS[1]  lock key
-- KEYS[2]  run history (sorted set: score = fencing token)
-- ARGV[1]  owner token
-- ARGV[2]  the run's fencing token
-- ARGV[3]  the run's startedAt (server ms, as claim-tick returned it)
-- ARGV[4]  outcome: ok, failed, done, lost or abandoned
-- ARGV[5]  error message, or '' for none
-- ARGV[6]  lockAtLeastFor in ms, counted from startedAt
-- ARGV[7]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[8]  release channel
-- returns  {1, remaining}  kept: still ours, lockAtLeastFor not over; the lease now ends in remaining ms
--          {2, 0}          released: deleted (and published)
--          {0, 0}          expired: no lock at all (the run is recorded all the same)
--          {-1, 0}         not-owner: another owner holds the lock; it is left alone
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local fence = tonumber(ARGV[2])
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], fence, fence)) do
  local record = cjson.decode(member)
  if record.outcome == 'running' then
    record.finishedAt = now
    record.outcome = ARGV[4]
    if ARGV[5] ~= '' then
      record.error = ARGV[5]
    end
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZADD', KEYS[2], fence, cjson.encode(record))
  end
end
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  if current == false then
    return {0, 0}
  end
  return {-1, 0}
end
local remaining = tonumber(ARGV[3]) + tonumber(ARGV[6]) - now
if remaining > 0 then
  redis.call('PEXPIRE', KEYS[1], remaining)
  return {1, remaining}
end
redis.call('DEL', KEYS[1])
if ARGV[7] ~= '' then
  redis.call(ARGV[7], ARGV[8], '')
end
return {2, 0}
