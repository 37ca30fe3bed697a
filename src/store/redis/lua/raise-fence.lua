-- raise-fence: lift the fencing counter to at least a value; it never goes down.
-- KEYS[1]  fencing counter
-- ARGV[1]  the value to raise it to
-- ARGV[2]  retention of the counter in ms
-- returns  the counter's value after the call
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if wanted > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return wanted
end
return current
