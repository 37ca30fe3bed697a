-- force-release: operator override. Delete the lock whoever holds it, then hand it to the first
-- waiter exactly as release does (hand-on.lua). The fencing counter is left alone: the next token is still
-- above the deleted holder's, so a resource that checks tokens rejects that holder's late writes.
-- KEYS[1]  lock key
-- KEYS[2]  waiters         (sorted set: owner token -> server time of arrival)
-- KEYS[3]  reservation     (value: owner token, PX)
-- ARGV[1]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[2]  release channel
-- ARGV[3]  reservation in ms: how long the lock is kept for the waiter woken
-- returns  {1, owner, woken}  released: owner is the holder whose lock was deleted; woken is the
--                             waiter now reserved and published, or '' when nobody was queued
--          {0}                not-held: no lock at all; nothing changed
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0}
end
redis.call('DEL', KEYS[1])
return {1, owner, hand_on(KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])}
