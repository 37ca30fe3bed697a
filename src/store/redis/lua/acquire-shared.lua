-- acquire-shared: take a shared hold on a lock that admits several holders (lib/shared.lua): one
-- of <limit> permits of a semaphore, or with limit 0 a read-write lock's shared hold. Granted when
-- the lock is not held exclusively nor reserved for others, a permit is free, and no exclusive
-- waiter is queued ahead; a hold whose lease ran out no longer counts (reclaimed on the server's
-- clock). A waiter a hand-off admitted takes its place (a lock reserved for several shared waiters
-- becomes theirs, each keeping a reservation until it comes); a queued waiter that takes a hold no
-- hand-off reserved for it wakes the first waiter left to ask again (ask_first, lib/hand-on.lua).
-- Each hold gets its own fencing token from the lock's counter. When refused, a caller that will
-- wait queues; a free lock whose first live waiter is exclusive is handed to that waiter, as a
-- release would. A request kept out only by an exclusive waiter ahead asks that waiter whether it
-- is alive (challenge, lib/shared.lua), and is told to try again when its answer is due.
-- Idempotent per owner.
-- include: lib/lease.lua
-- include: lib/hand-on.lua
-- include: lib/shared.lua
-- KEYS[1]  lock key        (the lease, '^<limit>' while shared holds hold it, and the fencing
--          record: see lib/lease.lua)
-- KEYS[2]  waiters         (sorted set: owner token -> arrival, server time in µs)
-- KEYS[3]  liveness        (hash: owner token -> '<deadline ms>[ ^<limit>]')
-- KEYS[4]  holds           (sorted set: owner token -> end of its lease or reservation, server ms)
-- KEYS[5]  grants          (hash: owner token -> its grant, as lib/lease.lua's grant_text writes it)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in ms
-- ARGV[3]  limit: the semaphore's permits, or 0 for a read-write lock's shared hold
-- ARGV[4]  '0' the caller will not wait; '1' a first attempt: queue it when refused;
--          '2' a caller already queued: keep its place when refused, unqueue it when it succeeds
-- ARGV[5]  instance label of the caller
-- ARGV[6]  retention of the fencing record in ms
-- ARGV[7]  a waiter's liveness in ms (renewed by each try: an exclusive waiter ahead last tried
--          this long before its deadline)
-- ARGV[8]  publish command: PUBLISH, SPUBLISH (cluster, Redis >= 7) or an empty string for none
-- ARGV[9]  release channel
-- ARGV[10] reservation in ms, for an exclusive waiter handed a free lock; also the time an
--          exclusive waiter ahead has to answer when asked whether it is alive
-- ARGV[11] '1' to publish '' when nobody is queued, else '0'
-- returns  {1, token}   acquired (or already held by this owner: the token of that grant)
--          {0, pttl}    refused; pttl: ms until a hold (or the lock's lease, or its reservation) ends,
--                       or until the answer of the exclusive waiter ahead is due
--          {-1, limit}  held as another kind: a semaphore of limit permits, 0 for a read-write
--                       lock's shared holds, or -1 held exclusively while a semaphore (limit > 0)
--                       was asked for; nothing changed
local lock, waiters, alive, holds, grants = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local kind = '^' .. ARGV[3]
local now_us, stamp = server_now()
local now_ms = math.floor(now_us / 1000)
local value = lock_get(lock)
local holder, flagged, reserved = read_lock(value)

-- Granted: leave the queue if this caller was in it, and stretch the lock to its latest hold.
-- `handed_on`: a hand-off reserved the hold for this caller, and named the waiters behind it.
local function granted(token, handed_on)
  if ARGV[4] == '2' then
    members(0, 'ZREM', waiters, owner)
    members(0, 'HDEL', alive, owner)
    if handed_on then
      -- The dead at the head (named by a hand-off before this waiter, they never came) go now, so
      -- no later release names them.
      first_live(waiters, alive, now_ms, false)
    else
      -- No hand-off named the first waiter left: it was refused by what kept the lock before
      -- (a lease since released, or holds that may end sooner than this one); it asks again, so
      -- it learns this hold's end and does not sleep on the old one if this hold runs out.
      ask_first(waiters, alive, now_ms, ARGV[8], ARGV[9])
    end
  end
  stretch(lock, holds, grants, now_ms)
  return {1, token}
end

-- `fresh` (or nil): the lock is taken afresh, keeping of the holds before only these owners'.
local function take(handed_on, fresh)
  local token = hold(lock, holds, grants, owner, ttl, now_us, stamp, ARGV[5], ARGV[6])
  if fresh then
    keep_only(holds, grants, fresh)
  end
  return granted(token, handed_on)
end

local wait = lock_pttl(lock)
if limit > 0 and holder ~= nil and not is_shared(holder) then
  -- Held exclusively (a mutex, an exclusive hold, a job's run): a semaphore is another kind.
  return {-1, -1}
end
if is_shared(holder) then
  if holder ~= kind then
    return {-1, tonumber(string.sub(holder, 2))}
  end
  local score = tonumber(members(false, 'ZSCORE', holds, owner) or '0')
  if score > now_ms then
    local grant = members(false, 'HGET', grants, owner)
    if grant then
      return {1, fence_of(grant)}
    end
    -- A permit a hand-off reserved for this waiter.
    return take(true)
  end
  prune(holds, grants, now_ms)
  local writer, entry
  if limit == 0 or in_use(holds, now_ms) < limit then
    writer, entry = exclusive_ahead(waiters, alive, owner, now_ms)
    if not writer then
      return take(false)
    end
  end
  if entry then
    wait = challenge(alive, writer, entry, now_ms, tonumber(ARGV[10]), tonumber(ARGV[7]), ARGV[8], ARGV[9])
  elseif limit > 0 then
    -- The first hold to end frees a permit.
    local first = members({}, 'ZRANGE', holds, 0, 0, 'WITHSCORES')[2]
    if first then
      wait = tonumber(first) - now_ms
    end
  end
elseif holder == nil and reserved_for(reserved, owner) then
  -- The lock reserved for shared waiters, this one among them: theirs now, each of the others
  -- keeping its reservation until it comes.
  lock_set(lock, kind .. (flagged and '*' or ''), math.max(ttl, wait))
  local fresh = {[owner] = true}
  for w in string.gmatch(reserved, '%S+') do
    if w ~= owner then
      redis.call('ZADD', holds, int(now_ms + wait), w)
      fresh[w] = true
    end
  end
  return take(true, fresh)
elseif value == false then
  if not exclusive_ahead(waiters, alive, owner, now_ms) then
    lock_set(lock, kind, ttl)
    return take(false, {[owner] = true})
  end
  -- Free, with an exclusive waiter ahead: it gets the lock, as from a release.
  hand_on(lock, waiters, alive, ARGV[8], ARGV[9], ARGV[10], ARGV[11])
  value = lock_get(lock)
  wait = lock_pttl(lock)
end
if ARGV[4] ~= '0' then
  enqueue(lock, waiters, alive, owner, now_us, tonumber(ARGV[7]), kind)
end
return {0, wait}
