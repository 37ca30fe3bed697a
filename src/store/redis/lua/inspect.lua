-- inspect: read a lock's state in one step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- KEYS[3]  (optional) the release marker of a former holder, to tell its release from an expiry
-- returns  {value or false, pttl, fence, released}: value is '<owner> <token> <taken-at> <instance>';
--          pttl is -2 when the lock is free; fence is the latest token issued, 0 if none is kept;
--          released is 1 when KEYS[3] is given and that holder released the lock (recently), else 0
local released = 0
if KEYS[3] then
  released = redis.call('EXISTS', KEYS[3])
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'), released}
