-- scan-locks: one page of SCAN over string keys matching a pattern (operator tooling, read only).
-- KEYS     none: the keys are what the scan finds. A cluster runs a script on one node only, so
--          this serves a standalone server (or one master at a time).
-- ARGV[1]  cursor: '0' to start
-- ARGV[2]  MATCH pattern, built and escaped by the caller (e.g. leasehold:{*})
-- ARGV[3]  COUNT: keys to look at in this page (a hint)
-- returns  {cursor, {key...}}: the next cursor ('0' once the scan is complete) and the string keys
--          of this page that match (lock keys; the sorted sets of queues and histories are skipped)
return redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', 'string')
