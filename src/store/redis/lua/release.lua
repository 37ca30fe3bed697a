-- release: delete the lock only if this owner holds it, then hand it to the first waiter (hand-on.lua).
-- KEYS[1]  lock key
-- KEYS[2]  waiters         (sorted set: owner token -> server time of arrival)
-- KEYS[3]  reservation     (value: owner token, PX)
-- ARGV[1]  owner token
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- ARGV[4]  reservation in ms: how long the lock is kept for the waiter woken
-- returns  1   released: the first waiter (if any) is reserved and its token published, else ''
--          0   expired: no lock at all
--          -1  not-owner: another owner holds the lock; it is left alone
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  if current == false then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
hand_on(KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4])
return 1
