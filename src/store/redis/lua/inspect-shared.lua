-- inspect-shared: read a lock's shared holds in one step (operator tooling, tests).
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- include: lib/shared.lua
-- KEYS[1]  lock key        ('^<limit>' while shared holds hold it)
-- KEYS[2]  holds           (sorted set: owner token -> end of its lease or reservation, server ms)
-- KEYS[3]  grants          (hash: owner token -> '<token> <taken-at µs> <instance>')
-- returns  {value or false, now, owner, end, grant or false, ...}: the lock key's value (see
--          lib/lease.lua), the server's time in ms, then for each live hold or reservation (only
--          while shared holds hold the lock), oldest end first: its owner token, the end of its
--          lease in server ms, and its grant (false for a reservation)
local value = lock_get(KEYS[1])
local now_ms = math.floor(server_now() / 1000)
local reply = {value, now_ms}
if is_shared(read_lock(value)) then
  local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_ms, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    reply[#reply + 1] = live[i]
    reply[#reply + 1] = tonumber(live[i + 1])
    reply[#reply + 1] = redis.call('HGET', KEYS[3], live[i])
  end
end
return reply
