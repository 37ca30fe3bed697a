-- acquire: take the lock if it is free (or reserved for this caller), and issue the next fencing
-- token, in one step (take, lib/lease.lua: the step claim-tick takes a job's lock with too); when
-- refused, queue a caller that will wait; a queued caller granted the lock leaves the queue, and the
-- dead waiters at its head with it; one that took it free, with no hand-off naming the waiter now
-- first, wakes that waiter to ask again (ask_first, lib/hand-on.lua). Idempotent per owner token: a command re-sent after its
-- reply was lost finds the lock already its own and gets the same grant back.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key        (the lease and the fencing record: see lib/lease.lua)
-- KEYS[2]  waiters         (sorted set: owner token -> arrival, server time in µs), sent when
--          ARGV[4] is '1' or '2': only a caller that will wait in the queue queues
-- KEYS[3]  liveness        (hash: owner token -> the waiter's deadline, server time in ms), as KEYS[2]
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- ARGV[3]  minimum fencing token to issue (Redlock writes back its quorum's maximum; 0 otherwise)
-- ARGV[4]  '0' the caller will not wait; '1' a first attempt: queue it when refused;
--          '2' a caller already queued: keep its place when refused, unqueue it when it succeeds;
--          '3' a caller that waits without queueing (a Redlock node's): refused, it flags the
--          lease, so the lease's release announces itself (lib/hand-on.lua, free_lock)
-- ARGV[5]  instance label of the caller
-- ARGV[6]  retention of the fencing record in ms
-- ARGV[7]  a waiter's liveness in ms, sent when ARGV[4] is '1' or '2': a queued waiter that does not
--          try again within it is dropped
-- ARGV[8]  the caller's room (its store's, random), sent when ARGV[4] is '1' or '2', or '': a queued
--          waiter from a room may be granted the lock outright by a release from the same room
--          (lib/hand-on.lua, hand_on)
-- ARGV[9]  publish command (as release's), sent when ARGV[4] is '2': for ask_first
-- ARGV[10] release channel, sent with ARGV[9]
-- returns  token       acquired (or already held by this owner: the token of that grant), a
--                       positive integer: the hot path's reply, not an array
--          {0, pttl}   held by another owner, or reserved for another waiter; pttl is how long that lasts
--          {-1, limit} held by a semaphore of <limit> permits (another kind of lock); nothing changed
local owner = ARGV[1]
local now_us, stamp = server_now()
local token, _, fresh, value = take(KEYS[1], owner, ARGV[2], tonumber(ARGV[3]), ARGV[5], ARGV[6], now_us, stamp)
if token then
  if fresh and ARGV[4] == '2' then
    members(0, 'ZREM', KEYS[2], owner)
    members(0, 'HDEL', KEYS[3], owner)
    if fresh == 'reserved' then
      -- The dead at the head (named by a hand-off before this waiter, they never came) go now, so
      -- no later release names them.
      first_live(KEYS[2], KEYS[3], math.floor(now_us / 1000), false)
    else
      -- Taken free: no hand-off named the first waiter left, which was refused by the lease
      -- before; it asks again, so it learns this lease's end and does not sleep past it.
      ask_first(KEYS[2], KEYS[3], math.floor(now_us / 1000), ARGV[9], ARGV[10])
    end
  end
  return token
end
-- '^<limit>[*]': shared holds. A read-write lock's (limit 0) exclusive mode waits for them; a
-- semaphore's name is not a mutex's.
local limit = tonumber(string.match(value, '^%^(%d+)'))
if limit and limit > 0 then
  return {-1, limit}
end
if ARGV[4] == '3' then
  lock_flag(KEYS[1])
elseif ARGV[4] ~= '0' then
  enqueue(KEYS[1], KEYS[2], KEYS[3], owner, now_us, tonumber(ARGV[7]), ARGV[8] ~= '' and '=' .. ARGV[2] .. ':' .. ARGV[6] .. ':' .. ARGV[8] .. ' ' .. ARGV[5] or nil)
end
return {0, lock_pttl(KEYS[1])}
