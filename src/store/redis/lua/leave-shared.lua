-- leave-shared: a shared waiter gives up: leave the queue, and pass on what a hand-off reserved
-- for it: its place in a lock reserved for several shared waiters (the last one out hands the lock
-- on), or a permit (handed on as a release hands it on); if it was the first waiter, wake the new
-- first to ask again (lib/hand-on.lua's nudge).
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- include: lib/shared.lua
-- KEYS[1]  lock key
-- KEYS[2]  waiters         (sorted set: owner token -> arrival)
-- KEYS[3]  liveness        (hash: owner token -> deadline and kind)
-- KEYS[4]  holds           (sorted set: owner token -> end of its lease or reservation, server ms)
-- KEYS[5]  grants          (hash: owner token -> its grant)
-- ARGV[1]  owner token of the waiter leaving
-- ARGV[2]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[3]  release channel
-- ARGV[4]  reservation in ms for the next waiter
-- ARGV[5]  '1' to publish '' when nobody is queued, else '0'
-- returns  1   a reservation was this waiter's and is passed on
--          0   it only left the queue
local owner = ARGV[1]
local now_ms = math.floor(server_now() / 1000)
local first = first_live(KEYS[2], KEYS[3], now_ms, false) == owner
members(0, 'ZREM', KEYS[2], owner)
members(0, 'HDEL', KEYS[3], owner)
local value = lock_get(KEYS[1])
local holder, flagged, reserved = read_lock(value)
if holder == nil and reserved_for(reserved, owner) then
  local rest = {}
  for w in string.gmatch(reserved, '%S+') do
    if w ~= owner then
      rest[#rest + 1] = w
    end
  end
  if #rest == 0 then
    hand_on(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  else
    local left = math.max(1, lock_pttl(KEYS[1]))
    lock_set(KEYS[1], '~' .. table.concat(rest, ' ') .. (flagged and '*' or ''), left)
  end
  return 1
end
local score = tonumber(members(false, 'ZSCORE', KEYS[4], owner) or '0')
if is_shared(holder) and score > now_ms and members(0, 'HEXISTS', KEYS[5], owner) == 0 then
  members(0, 'ZREM', KEYS[4], owner)
  free_up(KEYS[1], holder, flagged, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
  return 1
end
if first then
  nudge(KEYS[2], KEYS[3], now_ms, ARGV[2], ARGV[3])
end
return 0
