-- read-job: a job's lock state, latest tick and newest runs, in one step.
-- include: lib/lease.lua
-- KEYS[1]  lock key (the lease and the fencing record)
-- KEYS[2]  tick marker
-- KEYS[3]  run history (sorted set: score = fencing token)
-- ARGV[1]  how many runs to return, newest first
-- returns  {held, fence, lastTick, run...}: held is 1 or 0 (a reservation is not held), fence 0 if never issued, lastTick -1 if
--          no tick was ever claimed, then each run record as JSON
local reply = {
  read_lock(lock_get(KEYS[1])) and 1 or 0,
  fence_of(fence_get(KEYS[1])),
  tonumber(redis.call('GET', KEYS[2]) or '-1'),
}
for _, member in ipairs(redis.call('ZREVRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1)) do
  reply[#reply + 1] = member
end
return reply
