-- lease: the steps every script that grants, finds or ends a lease shares (included, never copied).
-- One key per lock holds the lease and the lock's fencing record: '<lease end ms> <state>\n<record>'
-- (every form: docs/stored-formats.md). The lease is empty while nobody holds the lock, and one
-- whose end has passed reads as none, as a key past its PX would: Redis no longer ends a lease by
-- itself, every read compares its end with the server's clock (TIME). The key's PX is the record's
-- retention, or the lease's end if later, so a released name keeps its record for the retention.
-- A script reads the key once and writes it once: the steps below change the record in memory,
-- and `run_call` writes it back when the script's body returns. Every script touches one lock key
-- (KEYS[1]); a step on another key writes the one read before back first.

-- Per call: the record of the one lock key read (its fields in locals: no table per call), and
-- the clock. at = the lease's end in ms (0 for none), state = the lease's state or false, fence =
-- the fencing record or false, kept = the lease end the key's PX already covers, exists = the key
-- was there, retention = ms to keep the record from now when written anew (false: as it is),
-- dirty = changed in this call.
local rec_key, rec_at, rec_state, rec_fence, rec_kept, rec_exists, rec_retention, rec_dirty
local clock_us, clock_stamp, clock_in_ms

-- The server's clock in µs since the epoch, as a number and as its decimal string (built from
-- TIME's two parts: formatting a float that large costs more than the rest of a grant). Read once
-- per call: every step of one script sees the same time, as Redis's own expiry does.
local function server_now()
  if clock_us == nil then
    local t = redis.call('TIME')
    clock_us, clock_stamp = tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. string.sub('00000' .. t[2], -6)
    clock_in_ms = math.floor(clock_us / 1000)
  end
  return clock_us, clock_stamp
end

local function clock_ms()
  if clock_in_ms == nil then
    server_now()
  end
  return clock_in_ms
end

-- Whether the record holds a lease now (a lease lives through its last ms, as a key's PX does).
local function live()
  return rec_state ~= false and rec_at >= clock_ms()
end

-- Write the record back if it changed: one SET (a DEL once nothing is left). The key's PX covers
-- the record's retention and the lease's end; a write that ends no later than what the key covers
-- already keeps its TTL.
local function write_record()
  if not rec_dirty then
    return
  end
  rec_dirty = false
  local k = rec_key
  if live() then
    -- '..' writes a ms count whole (it has 13 digits until the year 2286; Lua's '%.14g' keeps 14).
    local value = rec_at .. ' ' .. rec_state .. '\n' .. (rec_fence or '')
    local need = rec_at - clock_in_ms + 1
    if rec_retention then
      redis.call('SET', k, value, 'PX', math.max(rec_retention, need))
    elseif rec_exists and (rec_at <= rec_kept or redis.call('PTTL', k) >= need) then
      redis.call('SET', k, value, 'KEEPTTL')
    else
      redis.call('SET', k, value, 'PX', need)
    end
  elseif rec_fence then
    if rec_retention then
      redis.call('SET', k, '\n' .. rec_fence, 'PX', rec_retention)
    else
      redis.call('SET', k, '\n' .. rec_fence, 'KEEPTTL')
    end
  elseif rec_exists then
    redis.call('DEL', k)
  end
end

-- Read lock key `k` into the record, unless it is there already. A value without a newline was
-- written by a layout that kept the lease alone in the key, with Redis ending it: it is read as a
-- lease that ends with the key's PX.
local function record(k)
  if rec_key == k then
    return
  end
  write_record()
  rec_key, rec_at, rec_state, rec_fence, rec_kept, rec_exists, rec_retention = k, 0, false, false, 0, false, false
  local raw = redis.call('GET', k)
  if not raw then
    return
  end
  rec_exists = true
  local nl = string.find(raw, '\n', 1, true)
  if nl == nil then
    local left = redis.call('PTTL', k)
    if left > 0 then
      rec_at, rec_state = clock_ms() + left, raw
    end
  else
    if nl > 1 then
      local space = string.find(raw, ' ', 1, true)
      rec_at, rec_state = tonumber(string.sub(raw, 1, space - 1)), string.sub(raw, space + 1, nl - 1)
    end
    if nl < #raw then
      rec_fence = string.sub(raw, nl + 1)
    end
  end
  rec_kept = rec_at
end

-- The lease's state of lock key `k` (see above), or false when no lease is live: a GET of the lock.
local function lock_get(k)
  record(k)
  return live() and rec_state
end

-- ms until the lease of `k` ends, -2 with none live: a PTTL of the lock.
local function lock_pttl(k)
  record(k)
  return live() and rec_at - clock_ms() or -2
end

-- Set the lease of `k` to `state` for `ms` from now.
local function lock_set(k, state, ms)
  record(k)
  rec_state, rec_at, rec_dirty = state, clock_ms() + tonumber(ms), true
end

-- Reset the end of a live lease of `k` to `ms` from now (false with none live): a PEXPIRE.
local function lock_expire(k, ms)
  record(k)
  if not live() then
    return false
  end
  rec_at, rec_dirty = clock_ms() + tonumber(ms), true
  return true
end

-- Flag the live lease of `k`, unless it is flagged already: waiters queued since it was taken (an
-- APPEND of '*'). No lease, no flag.
local function lock_flag(k)
  record(k)
  if live() and string.byte(rec_state, -1) ~= 42 then
    rec_state, rec_dirty = rec_state .. '*', true
  end
end

-- End the lease of `k`; its fencing record stays: a DEL of the lock.
local function lock_del(k)
  record(k)
  if rec_state ~= false then
    rec_state, rec_at, rec_dirty = false, 0, true
  end
end

-- The fencing record of `k`, or false.
local function fence_get(k)
  record(k)
  return rec_fence
end

-- Write the fencing record of `k`, kept `retention` ms from now (nil: its retention unchanged).
local function fence_set(k, value, retention)
  record(k)
  rec_fence, rec_dirty = value, true
  if retention then
    rec_retention = tonumber(retention)
  end
end

-- Run a script's body, a function of (KEYS, ARGV), write back the record it changed, and return
-- its reply. Each call starts with nothing read and the clock unread.
local function run_call(body, keys, argv)
  rec_key, rec_dirty, clock_us, clock_stamp, clock_in_ms = nil, false, nil, nil, nil
  local reply = body(keys, argv)
  write_record()
  return reply
end

-- An integer as Redis should store it: Lua would write a large number with an exponent.
local function int(n)
  return string.format('%.0f', n)
end

-- A lease's state says who holds the lock, or whom it is kept for:
--   '<owner>'     held by that owner token; '<owner>*' once waiters queued: its release hands it on
--   '~<waiter>'   free, reserved for that waiter (a release handed it on) until the lease's end;
--                 '~<w1> <w2>…' for several shared waiters a hand-off admitted together
--   '^<limit>'    held by shared holds, listed beside it (lib/shared.lua): a semaphore of <limit>
--                 permits, or with limit 0 a read-write lock's shared holders; its end is the
--                 latest hold's, and a mutex, a job lock or an exclusive hold sees it as held
-- '*' flags waiters on each form. Owner tokens are base64url, so no mark can be part of one.

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

-- The fencing record holds the latest grant: '<token> <taken-at µs> <instance>', or
-- '<token>=<instance>' when taken at its token's µs (the usual case: a token is the clock's µs),
-- then '|<owner>' once that owner released it (a release that grants the lock outright to the next
-- waiter writes that waiter's grant and keeps its own mark after it). So a command re-sent after
-- its reply was lost finds its own grant (or its own release), and an operator sees who holds a
-- lock and since when.

-- The token a fencing record (or false: none) holds; 0 when there is none.
local function fence_of(counter)
  if counter == false then
    return 0
  end
  return tonumber(string.match(counter, '^%d+')) or 0
end

-- The grant a fencing record (or false) records: its token and its time in µs (0, 0 if none).
local function grant_of(counter)
  local token = fence_of(counter)
  if counter and string.byte(counter, #string.match(counter, '^%d*') + 1) == 61 then
    return token, token
  end
  return token, tonumber(string.match(counter or '', '^%d+ (%d+)')) or 0
end

-- A grant as a record keeps it: '<token>=<instance>' when taken at its token's µs, else
-- '<token> <taken-at µs> <instance>'.
local function grant_text(token, now_us, stamp, instance)
  if token == now_us then
    return stamp .. '=' .. instance
  end
  return int(token) .. ' ' .. stamp .. ' ' .. instance
end

-- Mark the grant recorded for `lock` released by `owner`: '<grant>|<owner>', its retention kept.
-- A record gone already stays gone.
local function mark_released(lock, owner)
  local counter = fence_get(lock)
  if counter then
    fence_set(lock, counter .. '|' .. owner)
  end
end

-- Issue the next fencing token of `lock` and record the grant (with its retention): one above the
-- record's token, and never below the server's clock in µs (`now_us`, `stamp` as a string) nor
-- below `floor`. A record lost to a failover, a restart without persistence or an eviction
-- therefore restarts above every token issued before, as long as the clock of the server that
-- issues it has not stepped back by more than the time the record was missing. µs since the epoch
-- stay below 2^53 (exact in a Lua number and a JavaScript one) until the year 2255.
-- `mark` ('' or nil for none) is written after the grant: '|<owner>' of a release that grants the
-- lock outright in the same call (lib/hand-on.lua), so that release needs no write of its own.
local function issue(lock, now_us, stamp, floor, instance, retention, mark)
  -- The token is the clock's value, or the floor when that is ahead (Redlock proposes one a little
  -- ahead of every node's clock), unless the record is ahead of both.
  local token = math.max(fence_of(fence_get(lock)) + 1, now_us, floor)
  fence_set(lock, grant_text(token, now_us, stamp, instance) .. (mark or ''), retention)
  return token
end

-- Take `lock` for `owner` with a lease of `ttl` ms if it is free or reserved for this owner, and
-- issue the next fencing token (see issue; `floor`, `instance`, `retention` go to it). A reserved
-- lock keeps its flag of the waiters behind. Idempotent per owner: a lock this owner holds already
-- is its grant, read back from the record. Every script that grants a lease takes it here.
-- returns  token, taken_us, fresh: the grant and its time in µs; fresh says how it was taken, 'free'
--          (nobody held or was kept it) or 'reserved' (a hand-off kept it for this owner), and is
--          false for a grant found already this owner's (a re-sent command, or a direct grant)
--          nil, nil, nil, value: refused; value is the lease's state (held, or reserved for another)
local function take(lock, owner, ttl, floor, instance, retention, now_us, stamp)
  local value = lock_get(lock)
  if not value then
    lock_set(lock, owner, ttl)
    return issue(lock, now_us, stamp, floor, instance, retention), now_us, 'free'
  end
  local holder, flagged, reserved = read_lock(value)
  if holder == owner then
    -- A re-sent command, or a waiter granted the lock directly by a release (lib/hand-on.lua)
    -- that heard of it by this attempt: its caller counts the lease from this attempt, so it lasts
    -- `ttl` from now.
    lock_expire(lock, ttl)
    local token, taken_us = grant_of(fence_get(lock))
    return token, taken_us, false
  end
  if reserved ~= owner then
    return nil, nil, nil, value
  end
  lock_set(lock, flagged and owner .. '*' or owner, ttl)
  return issue(lock, now_us, stamp, floor, instance, retention), now_us, 'reserved'
end
