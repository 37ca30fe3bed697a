-- shared: the steps of holds on a lock that admits several holders at once (included after
-- lib/lease.lua and lib/hand-on.lua): a semaphore's permits, or a read-write lock's shared holds.
--
-- While shared holds hold it, the lease's state is '^<limit>' ('*' appended once waiters
-- queued): <limit> permits, or 0 for a read-write lock's shared holders (no bound). The state is
-- the kind: a request of another limit is told what the lock is held as, and changes nothing. The
-- lease ends with the latest hold, and a mutex, a job lock or an
-- exclusive hold (all of which take the lock key itself) is refused while it exists.
-- Beside it:
--   holds   sorted set: owner token -> the end of its lease, server ms; also the permits a
--           hand-off reserved for waiters (-> the end of the reservation), and 0 for a hold
--           released (so a re-sent release answers released, until the next acquisition)
--   grants  hash: owner token -> its grant, as a fencing record writes it (lib/lease.lua), for each hold (not for a
--           reservation)
-- Both expire with the lock key. Only while the lock key holds '^<limit>' do they mean anything:
-- whoever takes the lock otherwise starts them afresh.

-- Whether a lock holder (read_lock's) is the mark of shared holds ('^<limit>').
local function is_shared(holder)
  return holder ~= nil and string.byte(holder, 1) == 94
end

-- Drop the holds and reservations whose time is up, and the released marks.
local function prune(holds, grants, now_ms)
  local gone = members({}, 'ZRANGEBYSCORE', holds, '-inf', now_ms)
  if #gone > 0 then
    members(0, 'ZREMRANGEBYSCORE', holds, '-inf', now_ms)
    members(0, 'HDEL', grants, unpack(gone))
  end
end

-- Live holds and reservations: the permits in use. Expired ones are not counted (reclaimed).
local function in_use(holds, now_ms)
  return members(0, 'ZCOUNT', holds, '(' .. now_ms, '+inf')
end

-- Whether a live waiter of the lock itself (an exclusive one) is queued ahead of `owner`, or at
-- all for an owner that is not queued: then shared requests queue behind it (writers are not
-- starved). Dead waiters met on the way are dropped. Looks at the first 16 waiters; a queue longer
-- than that, with `owner` not among them, counts as one (true). When one is found, returns its
-- owner token and liveness entry instead.
local function exclusive_ahead(waiters, alive, owner, now_ms)
  local first = members({}, 'ZRANGE', waiters, 0, 15)
  for _, w in ipairs(first) do
    if w == owner then
      return false
    end
    local entry = members(false, 'HGET', alive, w)
    local deadline, kind = waiter_of(entry)
    if deadline < now_ms then
      members(0, 'ZREM', waiters, w)
      members(0, 'HDEL', alive, w)
    elseif kind == '' then
      return w, entry
    end
  end
  return #first == 16
end

-- Ask exclusive waiter `w` (its liveness entry `entry`, renewed for `lease` ms by each of its
-- tries), which keeps a shared request out, whether it is alive: unless it tried within the last
-- reservation (`ms`) or was asked already, its deadline comes to one reservation from now, and
-- '?<w>' on the release channel wakes it. A live waiter tries again at once, which renews its
-- deadline; a dead one lapses with it. So a dead writer keeps shared requests out for two
-- reservations at most after its last try, and a live one is asked at most once a reservation.
-- returns  ms after which the request is worth trying again
local function challenge(alive, w, entry, now_ms, ms, lease, publish, channel)
  local deadline = waiter_of(entry)
  if deadline <= now_ms + ms or publish == '' then
    return deadline - now_ms
  end
  local tried = deadline - lease
  if tried > now_ms - ms then
    return math.min(ms, tried + ms - now_ms)
  end
  redis.call('HSET', alive, w, int(now_ms + ms) .. string.match(entry, '^%d+(.*)$'))
  redis.call(publish, channel, '?' .. w)
  return ms
end

-- Stretch the lock key and its holds to the latest live hold's end; false when none is live.
local function stretch(lock, holds, grants, now_ms)
  local last = members({}, 'ZRANGE', holds, -1, -1, 'WITHSCORES')[2]
  if last == nil or tonumber(last) <= now_ms then
    return false
  end
  local left = tonumber(last) - now_ms
  lock_expire(lock, left)
  members(0, 'PEXPIRE', holds, left)
  members(0, 'PEXPIRE', grants, left)
  return true
end

-- Give `owner` a hold of `ttl` ms on `lock` and the next fencing token (issue, lib/lease.lua).
local function hold(lock, holds, grants, owner, ttl, now_us, stamp, instance, retention)
  local token = issue(lock, now_us, stamp, 0, instance, retention)
  redis.call('ZADD', holds, int(math.floor(now_us / 1000) + ttl), owner)
  redis.call('HSET', grants, owner, grant_text(token, now_us, stamp, instance))
  return token
end

-- Drop every hold and grant of `lock` but those of `fresh` (a set of owner tokens, written
-- already): a lock taken afresh keeps nothing of the holds before it. Neither key is emptied and
-- then written again in one call, which a slot being migrated refuses (members, lib/hand-on.lua).
local function keep_only(holds, grants, fresh)
  local function drop(key, listed, remove)
    local stale = {}
    for _, w in ipairs(listed) do
      if not fresh[w] then
        stale[#stale + 1] = w
      end
    end
    for i = 1, #stale, 256 do
      redis.call(remove, key, unpack(stale, i, math.min(i + 255, #stale)))
    end
  end
  drop(holds, redis.call('ZRANGE', holds, 0, -1), 'ZREM')
  drop(grants, redis.call('HKEYS', grants), 'HDEL')
end

-- After a hold ended (released, or a reserved permit given up) on a lock of kind `kind` whose value
-- is flagged or not: with no hold left, the lock is free, and handed on as a release of the lock
-- hands it on (hand_on: the first waiter, exclusive or shared, gets it); otherwise, if waiters are
-- flagged and the first is a shared waiter of this kind, the permits free are reserved for the
-- shared waiters at the head (each told), and the lock is stretched to its latest hold.
local function free_up(lock, kind, flagged, waiters, alive, holds, grants, publish, channel, ms, announce)
  local now_ms = math.floor(server_now() / 1000)
  local used = in_use(holds, now_ms)
  if used == 0 then
    free_lock(lock, flagged, waiters, alive, publish, channel, ms, announce)
    return
  end
  if flagged then
    local limit = tonumber(string.sub(kind, 2))
    local woken = {}
    pop_kind(waiters, alive, now_ms, kind, limit == 0 and MAX_ADMITTED or limit - used, woken)
    for _, w in ipairs(woken) do
      redis.call('ZADD', holds, int(now_ms + ms), w)
    end
    if #woken > 0 then
      local next = following(waiters, alive, now_ms)
      if publish ~= '' then
        summon(alive, next, now_ms, tonumber(ms))
      end
      tell(publish, channel, woken, next)
    else
      -- Nobody admitted (an exclusive waiter at the head, or no permit free), but the lock may now
      -- end sooner than the head waiter was told when refused: it is woken to ask again, and its
      -- next refusal gives it the new end, so it does not sleep on past holds that run out.
      ask_first(waiters, alive, now_ms, publish, channel)
    end
  end
  stretch(lock, holds, grants, now_ms)
end

-- What a call on a hold that is not live answers: 0 expired, unless another owner holds the lock
-- exclusively (-1 not-owner).
local function gone(holder)
  if holder == nil or is_shared(holder) then
    return 0
  end
  return -1
end

-- Whether `owner` is among the waiters a lock reservation names ('<w1> <w2>…').
local function reserved_for(reserved, owner)
  if reserved == nil then
    return false
  end
  for w in string.gmatch(reserved, '%S+') do
    if w == owner then
      return true
    end
  end
  return false
end
