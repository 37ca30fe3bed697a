-- free: end the lease only if this owner holds it and nobody queued since it was taken: the
-- release of a name whose last release through this store woke nobody, with one key and one
-- argument. Anything else (waiters flagged, the lease gone, another owner) is left untouched for
-- release.lua, which the caller runs next.
-- include: lib/lease.lua
-- KEYS[1]  lock key        (its fencing record marked '...|<owner>' once released)
-- ARGV[1]  owner token
-- returns  1   released
--          0   not a live lease of this owner with nobody flagged behind it: release.lua decides
if lock_get(KEYS[1]) ~= ARGV[1] then
  return 0
end
lock_del(KEYS[1])
mark_released(KEYS[1], ARGV[1])
return 1
