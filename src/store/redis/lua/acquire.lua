-- acquire: take the lock if it is free and issue the next fencing token, in one step.
-- KEYS[1]  lock key        (value: owner token, PX: ttl)
-- KEYS[2]  fencing counter (never expires, never deleted)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- ARGV[3]  minimum fencing token to issue (Redlock writes back its quorum's maximum; 0 otherwise)
-- returns  {1, token}  acquired; token is the new value of the counter
--          {0, pttl}   held by someone; pttl is the holder's remaining lease in ms
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.call('INCR', KEYS[2])
  local floor = tonumber(ARGV[3])
  if token < floor then
    redis.call('SET', KEYS[2], floor)
    token = floor
  end
  return {1, token}
end
return {0, redis.call('PTTL', KEYS[1])}
