-- lease: the steps every script that grants, finds or ends a lease shares (included, never copied).
--
-- A lock key's value says who holds the lock, or whom it is kept for:
--   '<owner>'     held by that owner token
--   '<owner>*'    held, and waiters have queued since: its release must hand it on
--   '~<waiter>'   free, reserved for that waiter (a release handed it on) until the key's PX ends
--   '~<waiter>*'  reserved, with more waiters queued behind
--   '~<w1> <w2>…' reserved for several shared waiters a hand-off admitted together (lib/shared.lua)
--   '^<limit>'    held by shared holds, listed beside it (lib/shared.lua): a semaphore of <limit>
--                 permits, or with limit 0 a read-write lock's shared holders; its PX is the
--                 latest hold's end. A mutex, a job lock or an exclusive hold of the name sees it
--                 as held by another owner; '^<limit>*' with waiters queued
-- Owner tokens are base64url, so none of the marks can be part of one. The flag lets an
-- uncontended release skip the queue altogether.
--
-- The lock's fencing counter holds the latest grant: '<token> <taken-at> <instance>' (the fencing
-- token, the server's time of the grant in µs, the taker's instance label), and '|<owner>' is
-- appended once that owner released it (a release that grants the lock outright to the next waiter
-- writes that waiter's grant and keeps its own mark after it). So a command re-sent after its reply
-- was lost finds its own grant (or its own release), and an operator sees who holds a lock and
-- since when.

-- The server's clock in µs since the epoch, as a number and as its decimal string (built from
-- TIME's two parts: formatting a float that large costs more than the rest of a grant).
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
end

-- An integer as Redis should store it: Lua would write a large number with an exponent.
local function int(n)
  return string.format('%.0f', n)
end

-- Read a lock value (or false: no key): the owner holding it (nil when free or reserved), whether
-- waiters are flagged, and the waiter it is reserved for (nil unless reserved).
local function read_lock(value)
  if value == false then
    return nil, false, nil
  end
  local flagged = string.byte(value, -1) == 42
  if flagged then
    value = string.sub(value, 1, -2)
  end
  if string.byte(value, 1) == 126 then
    return nil, flagged, string.sub(value, 2)
  end
  return value, flagged, nil
end

-- The token a fencing counter's value (or false: none) records; 0 when there is none.
local function fence_of(counter)
  if counter == false then
    return 0
  end
  return tonumber(string.match(counter, '^%d+')) or 0
end

-- The grant a fencing counter's value (or false) records: its token and its time in µs (0, 0 if none).
local function grant_of(counter)
  return fence_of(counter), tonumber(string.match(counter or '', '^%d+ (%d+)')) or 0
end

-- Mark the grant on `fence` released by `owner`: '<grant>|<owner>', its TTL kept. A counter gone
-- already stays gone. Written whole rather than by APPEND, which would leave the string room to
-- grow that it never uses (about 80 B more per released name, kept for the retention).
local function mark_released(fence, owner)
  local counter = redis.call('GET', fence)
  if counter then
    redis.call('SET', fence, counter .. '|' .. owner, 'KEEPTTL')
  end
end

-- Issue the next fencing token and record the grant in the counter (with its retention): one
-- above the counter's token, and never below the server's clock in µs (`now_us`, `stamp` as a
-- string) nor below `floor`. A counter lost to a failover, a restart without persistence or an
-- eviction therefore restarts above every token issued before, as long as the clock of the server
-- that issues it has not stepped back by more than the time the counter was missing. µs since the
-- epoch stay below 2^53 (exact in a Lua number and a JavaScript one) until the year 2255.
-- `mark` ('' or nil for none) is written after the grant: '|<owner>' of a release that grants the
-- lock outright in the same call (lib/hand-on.lua), so that release needs no write of its own.
local function issue(fence, now_us, stamp, floor, instance, retention, mark)
  -- The token is the clock's value, or the floor when that is ahead (Redlock proposes one a little
  -- ahead of every node's clock), unless the counter is ahead of both: write that guess and read
  -- the counter in one call, and write again only in that rare case.
  local guess, text = now_us, stamp
  if floor > now_us then
    guess, text = floor, int(floor)
  end
  local tail = ' ' .. stamp .. ' ' .. instance .. (mark or '')
  local previous = redis.call('SET', fence, text .. tail, 'PX', retention, 'GET')
  local token = fence_of(previous) + 1
  if token <= guess then
    return guess
  end
  redis.call('SET', fence, int(token) .. tail, 'PX', retention)
  return token
end

-- Take `lock` for `owner` with a lease of `ttl` ms if it is free or reserved for this owner, and
-- issue the next fencing token (see issue; `floor`, `instance`, `retention` go to it). A reserved
-- lock keeps its flag of the waiters behind. Idempotent per owner: a lock this owner holds already
-- is its grant, read back from the counter. Every script that grants a lease takes it here.
-- returns  token, taken_us, fresh: the grant and its time in µs; fresh says how it was taken, 'free'
--          (nobody held or was kept it) or 'reserved' (a hand-off kept it for this owner), and is
--          false for a grant found already this owner's (a re-sent command, or a direct grant)
--          nil, nil, nil, value: refused; value is the lock key's value (held, or reserved for another)
local function take(lock, fence, owner, ttl, floor, instance, retention, now_us, stamp)
  if redis.call('SET', lock, owner, 'NX', 'PX', ttl) then
    return issue(fence, now_us, stamp, floor, instance, retention), now_us, 'free'
  end
  local value = redis.call('GET', lock)
  local holder, flagged, reserved = read_lock(value)
  if holder == owner then
    -- A re-sent command, or a waiter granted the lock directly by a release (lib/hand-on.lua)
    -- that heard of it by this attempt: its caller counts the lease from this attempt, so it lasts
    -- `ttl` from now.
    redis.call('PEXPIRE', lock, ttl)
    local token, taken_us = grant_of(redis.call('GET', fence))
    return token, taken_us, false
  end
  if reserved ~= owner then
    return nil, nil, nil, value
  end
  redis.call('SET', lock, flagged and owner .. '*' or owner, 'PX', ttl)
  return issue(fence, now_us, stamp, floor, instance, retention), now_us, 'reserved'
end
