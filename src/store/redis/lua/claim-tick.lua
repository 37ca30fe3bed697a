-- claim-tick: take a job's lock for one tick, unless the lock is held (or reserved for a waiter),
-- this tick or a later one was already claimed, or the tick lies in the future by the server's
-- clock; record the tick and a 'running' history entry, in one step. The lock is taken as acquire
-- takes it (take, lib/lease.lua), so a job's lock and a mutex of the same name are one lock.
-- A lock only kept by lockAtLeastFor (its run finished: finish-tick.lua) does not refuse the claim
-- of a later tick: that claim takes it over, when nobody is queued behind it (see kept_for below).
-- Idempotent per owner token: a re-sent claim gets its claim back.
-- include: lib/lease.lua
-- KEYS[1]  lock key        (the lease, of lockAtMostFor, and the fencing record: see lib/lease.lua)
-- KEYS[2]  tick marker     (latest tick claimed, ms since the epoch; no TTL: see keys.ts)
-- KEYS[3]  run history     (sorted set: score = fencing token, member = run record as JSON; no TTL)
-- ARGV[1]  owner token
-- ARGV[2]  lease in ms (lockAtMostFor)
-- ARGV[3]  the tick's scheduled time in ms since the epoch, or '' for a run without tick identity
-- ARGV[4]  instance label, for the lock and the history
-- ARGV[5]  runs the history keeps
-- ARGV[6]  retention of the fencing record in ms
-- ARGV[7]  ms a tick may lie ahead of the server's clock (a caller's clock running fast)
-- returns  {1, token, startedAt}  claimed (or claimed already by this owner); token is the fencing
--                                 token, startedAt the server's time of the claim in ms
--          {0, pttl}              locked: the lock is held or reserved; pttl is how long that lasts
--          {-1, lastTick}         already-ran: a tick at or after this one was already claimed
--          {-2, now}              clock-skew: the tick is more than ARGV[7] ms after the server's
--                                 time now; nothing changed
local owner = ARGV[1]
local held = lock_get(KEYS[1])
local now_us, stamp = server_now()
local tick = ARGV[3]

-- Whether lock value `value` (held by another owner) is only kept by lockAtLeastFor for a run of
-- an earlier tick than `tick`, with nobody queued behind it. The grant the fencing record records
-- is the holder's; its run record in the history tells whether that run finished, and its tick.
-- A plain lock, a shared hold, a reservation, a run still running or one without a tick: false.
local function kept_for(value, tick)
  local holder, flagged = read_lock(value)
  if holder == nil or flagged or string.byte(holder, 1) == 94 then
    return false
  end
  local token = fence_of(fence_get(KEYS[1]))
  if token == 0 then
    return false
  end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], int(token), int(token))) do
    local run = cjson.decode(member)
    if run.outcome ~= 'running' and type(run.tick) == 'number' and run.tick < tonumber(tick) then
      return true
    end
  end
  return false
end

-- A re-sent claim finds the lock its own (take reads its grant back): the checks are for a new one.
if read_lock(held) ~= owner then
  local now = math.floor(now_us / 1000)
  if tick ~= '' then
    if tonumber(tick) > now + tonumber(ARGV[7]) then
      return {-2, now}
    end
    local last = redis.call('GET', KEYS[2])
    if last and tonumber(last) >= tonumber(tick) then
      return {-1, tonumber(last)}
    end
  end
  if held then
    if tick == '' or not kept_for(held, tick) then
      return {0, lock_pttl(KEYS[1])}
    end
    -- The tick marker, checked above in this same step, keeps each tick to one run.
    lock_del(KEYS[1])
  end
end
local token, taken_us, fresh = take(KEYS[1], owner, ARGV[2], 0, ARGV[4], ARGV[6], now_us, stamp)
local now = math.floor(taken_us / 1000)
if not fresh then
  return {1, token, now}
end
if tick ~= '' then
  redis.call('SET', KEYS[2], tick)
end
-- The token goes into the JSON as a string: cjson writes numbers with 14 significant digits.
local record = {
  fence = int(token),
  tick = cjson.null,
  instance = ARGV[4],
  startedAt = now,
  finishedAt = cjson.null,
  outcome = 'running',
  error = cjson.null,
}
if tick ~= '' then
  record.tick = tonumber(tick)
end
redis.call('ZADD', KEYS[3], int(token), cjson.encode(record))
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[5]) + 1))
return {1, token, now}
