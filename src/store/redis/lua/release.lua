-- release: delete the lock only if this owner holds it, then wake a waiter.
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- returns  1   released (and published)
--          0   expired: no lock at all
--          -1  not-owner: another owner holds the lock; it is left alone
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call(ARGV[2], ARGV[3], '1')
  end
  return 1
end
if current == false then
  return 0
end
return -1
