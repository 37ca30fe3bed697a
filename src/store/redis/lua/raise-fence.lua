-- raise-fence: lift the lock's fencing token to at least a value; it never goes down.
-- include: lib/lease.lua
-- KEYS[1]  lock key        (its fencing record; the lease is left alone)
-- ARGV[1]  the value to raise it to
-- ARGV[2]  retention of the record in ms
-- returns  the token after the call
local counter = fence_get(KEYS[1])
local current = fence_of(counter)
local wanted = tonumber(ARGV[1])
if wanted > current then
  -- The grant's time and instance stay; only the token is lifted (a time written as the token's
  -- '=' is written out).
  local rest = counter and string.match(counter, '^%d+(.*)$') or ''
  if string.byte(rest, 1) == 61 then
    local _, taken_us = grant_of(counter)
    rest = ' ' .. int(taken_us) .. ' ' .. string.sub(rest, 2)
  end
  fence_set(KEYS[1], ARGV[1] .. rest, ARGV[2])
  return wanted
end
return current
