-- hand-on: what every script that frees a lock does next, and how waiters queue (included after
-- lib/lease.lua). The queue is a sorted set of owner tokens by arrival, with a hash of each
-- waiter's liveness deadline beside it; a waiter whose deadline passed has died (or lost its
-- place) and is dropped where it is met. At most 16 are dropped per call: the rest go on later.

-- The first live waiter, dropping dead ones at the head; `pop` takes it off the queue too.
local function first_live(waiters, alive, now_ms, pop)
  for _ = 1, 16 do
    local head
    if pop then
      head = redis.call('ZPOPMIN', waiters)[1]
    else
      head = redis.call('ZRANGE', waiters, 0, 0)[1]
    end
    if head == nil then
      return ''
    end
    if tonumber(redis.call('HGET', alive, head) or '0') >= now_ms then
      if pop then
        redis.call('HDEL', alive, head)
      end
      return head
    end
    redis.call('ZREM', waiters, head)
    redis.call('HDEL', alive, head)
  end
  return ''
end

-- Free the lock and hand it to the first live waiter: reserve it for that waiter for `ms`, and
-- publish '<woken> <next> [<then> <then>]' on the release channel: the waiter woken, and up to three
-- live waiters after it, the i-th of which retries i reservations later; so each woken or next
-- waiter that died costs the others at most one reservation. With nobody to wake, the lock is
-- simply deleted, and '' is published only when `announce` is '1' (for waiters that do not queue,
-- as Redlock's).
-- returns  the owner token woken, or ''
local function hand_on(lock, waiters, alive, publish, channel, ms, announce)
  local woken, next = '', ''
  if redis.call('EXISTS', waiters) == 1 then
    local now_ms = math.floor(server_now() / 1000)
    woken = first_live(waiters, alive, now_ms, true)
    if woken ~= '' then
      next = first_live(waiters, alive, now_ms, false)
      if next ~= '' then
        local after = 0
        for _, w in ipairs(redis.call('ZRANGE', waiters, 1, 4)) do
          if after == 2 then
            break
          end
          if tonumber(redis.call('HGET', alive, w) or '0') >= now_ms then
            next = next .. ' ' .. w
            after = after + 1
          end
        end
      end
    end
  end
  if woken == '' then
    redis.call('DEL', lock)
  elseif next == '' then
    redis.call('SET', lock, '~' .. woken, 'PX', ms)
  else
    redis.call('SET', lock, '~' .. woken .. '*', 'PX', ms)
  end
  if publish ~= '' and (woken ~= '' or announce == '1') then
    if next ~= '' then
      redis.call(publish, channel, woken .. ' ' .. next)
    else
      redis.call(publish, channel, woken)
    end
  end
  return woken
end

-- Queue `owner` (at the tail, unless it is queued already), renew its liveness deadline, and flag
-- the lock (its value `value`) so its release hands it on. The queue keys expire when no waiter
-- renews them. Scores are the server's time in µs, strictly increasing (one past the last
-- waiter's when two arrive within one µs).
local function enqueue(lock, value, waiters, alive, owner, now_us, lease)
  if redis.call('ZSCORE', waiters, owner) == false then
    local score = now_us
    local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) >= score then
      score = tonumber(last[2]) + 1
    end
    redis.call('ZADD', waiters, int(score), owner)
  end
  redis.call('HSET', alive, owner, int(math.floor(now_us / 1000) + lease))
  redis.call('PEXPIRE', waiters, lease)
  redis.call('PEXPIRE', alive, lease)
  if string.byte(value, -1) ~= 42 then
    redis.call('APPEND', lock, '*')
  end
end

-- End `owner`'s lease on `lock` (whose value the caller read: `value`): mark the fencing counter
-- released by this owner, and free the lock, handing it on if waiters are flagged. When the lease
-- is not the owner's, say why: a counter marked by this owner means it released the lock already
-- (a re-sent command: released again; only until another owner takes the lock, after which a
-- re-sent release answers as if the lease had expired); no lock at all means it expired, and its
-- waiters are woken; a reservation means it expired and was handed on; else another owner holds it.
-- returns  1 released, 0 expired, -1 not-owner
local function end_lease(value, lock, fence, owner, waiters, alive, publish, channel, ms, announce)
  local holder, flagged = read_lock(value)
  if holder == owner then
    -- APPEND keeps the counter's TTL; on a counter gone already it would make a key without one.
    if redis.call('APPEND', fence, '|' .. owner) == #owner + 1 then
      redis.call('DEL', fence)
    end
    if flagged then
      hand_on(lock, waiters, alive, publish, channel, ms, announce)
    else
      redis.call('DEL', lock)
      if publish ~= '' and announce == '1' then
        redis.call(publish, channel, '')
      end
    end
    return 1
  end
  local counter = redis.call('GET', fence)
  if counter and string.sub(counter, -#owner - 1) == '|' .. owner then
    return 1
  end
  if value == false then
    hand_on(lock, waiters, alive, publish, channel, ms, announce)
    return 0
  end
  if holder == nil then
    return 0
  end
  return -1
end
