-- inspect: read a lock's state in one step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- returns  {owner or false, pttl, fence}; pttl is -2 when the lock is free, fence 0 if never issued
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0')}
