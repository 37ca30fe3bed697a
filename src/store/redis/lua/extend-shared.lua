-- extend-shared: reset a shared hold's lease to a new ttl if it is live (lib/shared.lua), and
-- stretch the lock to its latest hold. Idempotent: a re-sent extend extends again, from later.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- include: lib/shared.lua
-- KEYS[1]  lock key        ('^<limit>' while shared holds hold it)
-- KEYS[2]  holds           (sorted set: owner token -> end of its lease, server ms)
-- KEYS[3]  grants          (hash: owner token -> its grant)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- returns  1   extended
--          0   expired: the hold's lease ran out (or it was released, or the lock deleted)
--          -1  not-owner: the hold is gone and another owner holds the lock exclusively
local holder = read_lock(lock_get(KEYS[1]))
local now_ms = math.floor(server_now() / 1000)
local score = tonumber(members(false, 'ZSCORE', KEYS[2], ARGV[1]) or '0')
if is_shared(holder) and score > now_ms and members(0, 'HEXISTS', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], int(now_ms + tonumber(ARGV[2])), ARGV[1])
  stretch(KEYS[1], KEYS[2], KEYS[3], now_ms)
  return 1
end
return gone(holder)
