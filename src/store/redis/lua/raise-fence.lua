-- raise-fence: lift the fencing counter to at least a value; it never goes down.
-- include: lib/lease.lua
-- KEYS[1]  fencing counter
-- ARGV[1]  the value to raise it to
-- ARGV[2]  retention of the counter in ms
-- returns  the counter's value after the call
local counter = redis.call('GET', KEYS[1])
local current = fence_of(counter)
local wanted = tonumber(ARGV[1])
if wanted > current then
  -- The grant's time and instance stay; only the token is lifted.
  local rest = counter and string.match(counter, '^%d+(.*)$') or ''
  redis.call('SET', KEYS[1], ARGV[1] .. rest, 'PX', ARGV[2])
  return wanted
end
return current
