-- acquire: take the lock if it is free and not promised to another waiter, and issue the next
-- fencing token, in one step.
-- KEYS[1]  lock key        (value: owner token, PX: ttl)
-- KEYS[2]  fencing counter (never expires, never deleted)
-- KEYS[3]  waiters         (sorted set: owner token -> arrival, server time in µs, strictly increasing)
-- KEYS[4]  reservation     (value: the owner token a release handed the lock to, PX)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- ARGV[3]  minimum fencing token to issue (Redlock writes back its quorum's maximum; 0 otherwise)
-- ARGV[4]  '0' the caller will not wait; '1' a first attempt: queue it when refused;
--          '2' a caller already queued: keep its place when refused, unqueue it when it succeeds
-- returns  {1, token}  acquired; token is the new value of the counter
--          {0, pttl}   held by someone, or reserved for another waiter; pttl is how long that lasts
local reserved = redis.call('GET', KEYS[4])
local taken = false
if reserved == false or reserved == ARGV[1] then
  taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if taken then
  if reserved then
    redis.call('DEL', KEYS[4])
  end
  if ARGV[4] == '2' then
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  local token = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[3])
  if token < floor then
    redis.call('SET', KEYS[2], floor)
    token = floor
  end
  return {1, token}
end
if ARGV[4] ~= '0' and redis.call('ZSCORE', KEYS[3], ARGV[1]) == false then
  -- Strictly increasing scores: the server's time in microseconds, or one past the last waiter's
  -- when two arrive within one. Sent as a string: Lua would round a number to 14 digits.
  local t = redis.call('TIME')
  local score = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= score then
    score = tonumber(last[2]) + 1
  end
  redis.call('ZADD', KEYS[3], string.format('%.0f', score), ARGV[1])
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  pttl = redis.call('PTTL', KEYS[4])
end
return {0, pttl}
