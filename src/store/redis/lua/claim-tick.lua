-- claim-tick: take a job's lock for one tick, unless the lock is held or this tick (or a later
-- one) was already claimed; record the tick and a 'running' history entry, in one step.
-- KEYS[1]  lock key        (value: owner token, PX: lockAtMostFor)
-- KEYS[2]  fencing counter (never expires, never deleted)
-- KEYS[3]  tick marker     (latest tick claimed, ms since the epoch; never expires)
-- KEYS[4]  run history     (sorted set: score = fencing token, member = run record as JSON)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms (lockAtMostFor)
-- ARGV[3]  the tick's scheduled time in ms since the epoch, or '' for a run without tick identity
-- ARGV[4]  instance name, for the history
-- ARGV[5]  runs the history keeps
-- returns  {1, token, startedAt}  claimed; token is the new fencing token, startedAt the server's
--                                 TIME in ms (the run's start, ordered across clients)
--          {0, pttl}              locked: the lock is held; pttl is the holder's remaining lease
--          {-1, lastTick}         already-ran: a tick at or after this one was already claimed
local tick = ARGV[3]
if tick ~= '' then
  local last = redis.call('GET', KEYS[3])
  if last and tonumber(last) >= tonumber(tick) then
    return {-1, tonumber(last)}
  end
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
if tick ~= '' then
  redis.call('SET', KEYS[3], tick)
end
local time = redis.call('TIME')
local startedAt = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local record = {
  fence = token,
  tick = cjson.null,
  instance = ARGV[4],
  startedAt = startedAt,
  finishedAt = cjson.null,
  outcome = 'running',
  error = cjson.null,
}
if tick ~= '' then
  record.tick = tonumber(tick)
end
redis.call('ZADD', KEYS[4], token, cjson.encode(record))
redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -(tonumber(ARGV[5]) + 1))
return {1, token, startedAt}
