-- scan-locks: one page of SCAN over the lock keys matching a pattern that hold a lease (operator
-- tooling, read only).
-- include: lib/lease.lua
-- KEYS     none: the keys are what the scan finds. A cluster runs a script on one node only, so
--          this serves a standalone server (or one master at a time).
-- ARGV[1]  cursor: '0' to start
-- ARGV[2]  MATCH pattern, built and escaped by the caller (e.g. leasehold:{*})
-- ARGV[3]  COUNT: keys to look at in this page (a hint)
-- returns  {cursor, {key...}}: the next cursor ('0' once the scan is complete) and the lock keys of
--          this page that match and hold a live lease (a released name's key, which keeps its
--          fencing record, is skipped; so are the sorted sets of queues and histories, and the
--          other string keys: a lock key ends with its name's '}')
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', 'string')
local held = {}
for _, key in ipairs(page[2]) do
  if string.byte(key, -1) == 125 and lock_get(key) then
    held[#held + 1] = key
  end
end
return {page[1], held}
