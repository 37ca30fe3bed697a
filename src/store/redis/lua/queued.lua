-- queued: a lock's waiters' queue and reservation, read in one step (operator tooling).
-- KEYS[1]  waiters         (sorted set: owner token -> arrival)
-- KEYS[2]  lock key        (a reservation is its lease's state '~<waiter>', see lib/lease.lua)
-- ARGV[1]  how many of the first waiters to return
-- returns  {count, state, pttl, waiter...}: count of waiters queued; the lease's state (or false)
--          and ms until it ends (-2 with none); then the first waiters' owner tokens in arrival order
local reply = {
  redis.call('ZCARD', KEYS[1]),
  lock_get(KEYS[2]),
  lock_pttl(KEYS[2]),
}
-- ZRANGE 0 -1 would be the whole queue: a limit of 0 asks for none.
local limit = tonumber(ARGV[1])
if limit > 0 then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, limit - 1)) do
    reply[#reply + 1] = member
  end
end
return reply
