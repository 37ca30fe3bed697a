-- acquire: take the lock if it is free and not promised to another waiter, and issue the next
-- fencing token, in one step. Idempotent per owner token: a command re-sent after its reply was
-- lost finds the lock already its own and gets the same grant back.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key        (value: '<owner> <token> <taken-at> <instance>', PX: ttl)
-- KEYS[2]  fencing counter (the latest token; PX: the retention)
-- KEYS[3]  waiters         (sorted set: owner token -> arrival, server time in µs)
-- KEYS[4]  liveness        (hash: owner token -> the waiter's deadline, server time in ms)
-- KEYS[5]  reservation     (value: the owner token a release handed the lock to, PX)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- ARGV[3]  minimum fencing token to issue (Redlock writes back its quorum's maximum; 0 otherwise)
-- ARGV[4]  '0' the caller will not wait; '1' a first attempt: queue it when refused;
--          '2' a caller already queued: keep its place when refused, unqueue it when it succeeds
-- ARGV[5]  instance label of the caller
-- ARGV[6]  retention of the fencing counter in ms
-- ARGV[7]  a waiter's liveness in ms: a queued waiter that does not try again within it is dropped
-- returns  {1, token}  acquired (or already held by this owner: the token of that grant)
--          {0, pttl}   held by another owner, or reserved for another waiter; pttl is how long that lasts
local owner = ARGV[1]
local reserved = redis.call('GET', KEYS[5])
local now_us, now_ms = server_now()
if reserved == false or reserved == owner then
  local token = next_token(KEYS[2], now_us, tonumber(ARGV[3]))
  if grant(KEYS[1], KEYS[2], owner, ARGV[2], token, now_ms, ARGV[5], ARGV[6]) then
    if reserved then
      redis.call('DEL', KEYS[5])
    end
    if ARGV[4] == '2' then
      redis.call('ZREM', KEYS[3], owner)
      redis.call('HDEL', KEYS[4], owner)
    end
    return {1, token}
  end
end
local held = redis.call('GET', KEYS[1])
if owned_by(held, owner) then
  return {1, (grant_of(held))}
end
if ARGV[4] ~= '0' then
  enqueue(KEYS[3], KEYS[4], owner, now_us, now_ms, tonumber(ARGV[7]))
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  pttl = redis.call('PTTL', KEYS[5])
end
return {0, pttl}
