-- hand-on: what every script that frees a lock does next (included after lib/lease.lua).
-- Pops the first live waiter (a waiter whose liveness deadline passed has died or lost its place:
-- it is dropped), reserves the lock for it for `ms`, and publishes '<woken> <next>' on the release
-- channel: the waiter woken, and the live waiter after it, which retries when the reservation
-- lapses, so a woken waiter that died costs the others at most the reservation. With nobody to
-- wake, it publishes '' only when `announce` is '1' (waiters that do not queue, as Redlock's).
-- At most 16 dead waiters are dropped per call: the rest go on later calls.
-- returns  the owner token woken, or ''
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

local function hand_on(waiters, alive, reserved, publish, channel, ms, announce)
  local woken, next = '', ''
  if redis.call('EXISTS', waiters) == 1 then
    local _, now_ms = server_now()
    woken = first_live(waiters, alive, now_ms, true)
    if woken ~= '' then
      redis.call('SET', reserved, woken, 'PX', ms)
      next = first_live(waiters, alive, now_ms, false)
    end
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

-- Queue `owner` (at the tail, unless it is queued already) and renew its liveness deadline; the
-- queue keys expire when no waiter renews them. Scores are the server's time in µs, strictly
-- increasing (one past the last waiter's when two arrive within one µs).
local function enqueue(waiters, alive, owner, now_us, now_ms, lease)
  if redis.call('ZSCORE', waiters, owner) == false then
    local score = now_us
    local last = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) >= score then
      score = tonumber(last[2]) + 1
    end
    redis.call('ZADD', waiters, int(score), owner)
  end
  redis.call('HSET', alive, owner, int(now_ms + lease))
  redis.call('PEXPIRE', waiters, lease)
  redis.call('PEXPIRE', alive, lease)
end

-- End `owner`'s lease on `lock` (whose value the caller read: `held`): delete it, leave the
-- release marker, and hand the lock on. When the lease is not the owner's, say why: a marker means
-- this owner released it already (a re-sent command: released again); no lock at all means it
-- expired, and its waiters are woken unless one holds a reservation; else another owner holds it.
-- returns  1 released, 0 expired, -1 not-owner
local function end_lease(held, lock, owner, marker, marker_ms, waiters, alive, reserved, publish, channel, ms, announce)
  if owned_by(held, owner) then
    redis.call('DEL', lock)
    redis.call('SET', marker, '1', 'PX', marker_ms)
    hand_on(waiters, alive, reserved, publish, channel, ms, announce)
    return 1
  end
  if redis.call('EXISTS', marker) == 1 then
    return 1
  end
  if held == false then
    if redis.call('EXISTS', reserved) == 0 then
      hand_on(waiters, alive, reserved, publish, channel, ms, announce)
    end
    return 0
  end
  return -1
end
