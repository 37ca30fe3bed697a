-- release-shared: end a shared hold if it is live (lib/shared.lua), and hand on what it freed: the
-- lock itself to the first waiter once no hold is left, else free permits to the shared waiters at
-- the head of the queue. Idempotent per owner token: the hold is marked released (score 0), so a
-- re-sent release answers released until the next acquisition of the name.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- include: lib/shared.lua
-- KEYS[1]  lock key        ('^<limit>' while shared holds hold it)
-- KEYS[2]  waiters         (sorted set: owner token -> arrival)
-- KEYS[3]  liveness        (hash: owner token -> deadline and kind)
-- KEYS[4]  holds           (sorted set: owner token -> end of its lease, server ms; 0 released)
-- KEYS[5]  grants          (hash: owner token -> its grant)
-- ARGV[1]  owner token
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- ARGV[4]  reservation in ms: how long a lock or permit is kept for a waiter woken
-- ARGV[5]  '1' to publish '' when nobody is queued, else '0'
-- returns  1   released (now, or by the same owner's earlier call)
--          0   expired: the hold's lease ran out (or the lock was deleted)
--          -1  not-owner: the hold is gone and another owner holds the lock exclusively
local holder, flagged = read_lock(lock_get(KEYS[1]))
local now_ms = math.floor(server_now() / 1000)
local score = members(false, 'ZSCORE', KEYS[4], ARGV[1])
if is_shared(holder) and score and tonumber(score) > now_ms and members(0, 'HEXISTS', KEYS[5], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
  free_up(KEYS[1], holder, flagged, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  return 1
end
if score and tonumber(score) == 0 then
  return 1
end
return gone(holder)
