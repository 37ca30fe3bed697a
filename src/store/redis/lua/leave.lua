-- leave: a waiter gives up; if the lock was reserved for it (or granted to it directly), hand it on;
-- if it was the first waiter, wake the new first to ask again (lib/hand-on.lua's nudge).
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key
-- KEYS[2]  waiters         (sorted set: owner token -> arrival)
-- KEYS[3]  liveness        (hash: owner token -> deadline)
-- ARGV[1]  owner token of the waiter leaving
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- ARGV[4]  reservation in ms for the next waiter
-- ARGV[5]  '1' to publish '' when nobody is queued, else '0'
-- returns  1   the reservation (or a direct grant) was this waiter's and passed on (to the next
--              waiter, or to nobody)
--          0   it only left the queue
local now_ms = math.floor(server_now() / 1000)
local first = first_live(KEYS[2], KEYS[3], now_ms, false) == ARGV[1]
members(0, 'ZREM', KEYS[2], ARGV[1])
members(0, 'HDEL', KEYS[3], ARGV[1])
local value = lock_get(KEYS[1])
local holder, _, reserved = read_lock(value)
if holder == ARGV[1] then
  -- A release granted it the lock directly (lib/hand-on.lua) as it gave up: release it.
  end_lease(value, KEYS[1], ARGV[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  return 1
end
if reserved ~= ARGV[1] then
  if first then
    nudge(KEYS[2], KEYS[3], now_ms, ARGV[2], ARGV[3])
  end
  return 0
end
hand_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
return 1
