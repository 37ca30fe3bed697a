-- extend: reset the lease to a new ttl only if this owner holds it. Idempotent: a re-sent extend
-- extends again, from later.
-- include: lib/lease.lua
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- returns  1   extended
--          0   expired: no lock at all, or reserved for a waiter (the lease ended and was handed on)
--          -1  not-owner: another owner holds the lock
local holder = read_lock(lock_get(KEYS[1]))
if holder == ARGV[1] then
  lock_expire(KEYS[1], ARGV[2])
  return 1
end
if holder == nil then
  return 0
end
return -1
