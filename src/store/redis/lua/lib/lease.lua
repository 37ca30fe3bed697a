-- lease: the steps every script that grants, finds or ends a lease shares (included, never copied).
-- A lock key's value is '<owner> <token> <taken-at> <instance>': the owner token, the fencing token
-- the grant issued, the server's time of the grant in ms, and the instance label of the taker. So a
-- command re-sent after a lost reply finds its own grant, and an operator sees who holds a lock.

-- The server's clock, in µs and in ms since the epoch.
local function server_now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

-- An integer as Redis should store it: Lua would write a large number with an exponent.
local function int(n)
  return string.format('%.0f', n)
end

-- True when a lock value (or false: no lock) is this owner's.
local function owned_by(value, owner)
  return value ~= false and string.sub(value, 1, #owner + 1) == owner .. ' '
end

-- The fencing token and the taken-at time a lock value records.
local function grant_of(value)
  local token, at = string.match(value, '^%S+ (%d+) (%d+)')
  return tonumber(token), tonumber(at)
end

-- The next fencing token: one above the stored counter, and never below the server's clock in µs
-- nor below `floor`. A counter lost to a failover, a restart without persistence or an eviction
-- therefore restarts above every token issued before, as long as the clock of the server that
-- issues it has not stepped back by more than the time the counter was missing. µs since the
-- epoch stay below 2^53 (exact in a Lua number and a JavaScript one) until the year 2255.
local function next_token(fence, now_us, floor)
  local token = tonumber(redis.call('GET', fence) or '0') + 1
  if token < now_us then
    token = now_us
  end
  if token < floor then
    token = floor
  end
  return token
end

-- Take the lock for `owner` with a lease of `ttl` ms if nobody holds it, and store the counter
-- (with its retention). Returns whether it was taken.
local function grant(lock, fence, owner, ttl, token, now_ms, instance, retention)
  local value = owner .. ' ' .. int(token) .. ' ' .. int(now_ms) .. ' ' .. instance
  if not redis.call('SET', lock, value, 'NX', 'PX', ttl) then
    return false
  end
  redis.call('SET', fence, int(token), 'PX', retention)
  return true
end
