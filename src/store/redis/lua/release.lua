-- release: end the lease only if this owner holds it, and hand the lock on if waiters queued.
-- Idempotent per owner token: the release marks the fencing record, so a command re-sent after
-- its reply was lost still answers released (until another owner takes the lock). Releasing a
-- lock that expired (and that nobody took since) still hands it on, so its waiters are woken
-- rather than left to their timers.
-- The next waiter, when it queued through the releasing store (ARGV[6]), is granted the lock
-- outright rather than reserved for: the reply carries its token, so it starts without a round
-- trip of its own (a waiter of another instance is reserved for, and takes the lock itself).
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key        (its fencing record marked '...|<owner>' once released)
-- KEYS[2]  waiters         (sorted set: owner token -> arrival)
-- KEYS[3]  liveness        (hash: owner token -> deadline)
-- ARGV[1]  owner token
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- ARGV[4]  reservation in ms: how long the lock is kept for the waiter woken
-- ARGV[5]  '1' to publish '' when none queued but the lease was flagged, or is gone already (for
--          waiters that do not queue, as Redlock's), else '0'
-- ARGV[6]  the releasing store's room, or '': a waiter queued from that room is granted the lock
--          outright (lib/hand-on.lua, hand_on), its token issued as any grant's is (lib/lease.lua)
-- returns  1   released (now, or by the same owner's earlier call)
--          0   expired: no lock at all, or handed on already
--          -1  not-owner: another owner holds the lock; it is left alone
--          When the release woke waiters, 1 and 0 come first in an array: after them the messages
--          the hand-on sent ('' alone for an announcement), so the caller's own waiters are
--          woken from the reply, then the fencing token of a direct grant to the first waiter
--          named, if it made one, and after that 'here' if the messages were not published
--          (every waiter they name queued from ARGV[6]: only the caller has them to tell).
local code, told, token = end_lease(lock_get(KEYS[1]), KEYS[1], ARGV[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if told and #told > 0 then
  if token then
    told[#told + 1] = token
    if told.here then
      told[#told + 1] = 'here'
    end
  end
  return {code, unpack(told)}
end
return code
