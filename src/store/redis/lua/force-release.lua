-- force-release: operator override. Delete the lock whoever holds it, then hand it to the first
-- live waiter exactly as release does. The fencing counter is left alone: the next token is still
-- above the deleted holder's, so a resource that checks tokens rejects that holder's late writes.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- KEYS[1]  lock key        (its fencing record, read only: the deleted holder's grant)
-- KEYS[2]  waiters         (sorted set: owner token -> arrival)
-- KEYS[3]  liveness        (hash: owner token -> deadline)
-- ARGV[1]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[2]  release channel
-- ARGV[3]  reservation in ms: how long the lock is kept for the waiter woken
-- ARGV[4]  '1' to publish '' when nobody is queued, else '0'
-- returns  {1, owner, woken, counter}  released: owner is the holder whose lock was deleted; woken
--                             is the waiter now reserved, or '' when nobody was queued; counter is
--                             the fencing counter's value (the holder's grant), or false
--          {0}                not-held: no lock at all, or only a reservation; nothing changed
local holder = read_lock(lock_get(KEYS[1]))
if holder == nil then
  return {0}
end
local woken = hand_on(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return {1, holder, woken, fence_get(KEYS[1])}
