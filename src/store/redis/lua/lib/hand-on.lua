-- hand-on: what every script that frees a lock does next, and how waiters queue (included after
-- lib/lease.lua). The queue is a sorted set of owner tokens by arrival, with a hash of each
-- waiter's liveness deadline beside it; a waiter whose deadline passed has died (or lost its
-- place) and is dropped where it is met. At most 16 are dropped per call: the rest go on later.
-- A waiter a message tells to try again has one reservation past its turn to do so (summon, and
-- lib/shared.lua's challenge), after which its deadline has passed too (docs/waiting.md).
-- A liveness entry is '<deadline ms>' for a waiter of the lock itself (an exclusive one),
-- '<deadline ms> =<ttl>:<retention>:<room> <instance>' for an exclusive waiter that a release from
-- its own room may grant the lock to outright (see hand_on: what that grant needs), and
-- '<deadline ms> ^<limit>' for a waiter of a shared hold of that kind (lib/shared.lua).

-- A read or a removal on a key of members (the queue and its liveness hash; lib/shared.lua's holds
-- and grants). Redis deletes such a key with its last member, and in a slot being migrated it
-- refuses a script's command on a key that is not there ("non local key"), though every key the
-- script declared was there when it began: on a key this call emptied, the command answers
-- `none`, as it would on a settled slot. A write that would create such a key again is refused
-- all the same, and answers `none` here too: its caller decides what to do instead (enqueue).
local function members(none, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.find(reply.err, 'non local key', 1, true) then
      return none
    end
    error(reply)
  end
  return reply
end

-- A liveness entry (or false): the waiter's deadline in ms and its kind ('' for exclusive); for an
-- exclusive waiter that may be granted outright, its ttl and fencing counter retention in ms, its
-- room and its instance label.
local function waiter_of(entry)
  if not entry then
    return 0, ''
  end
  local deadline, ttl, retention, room, instance = string.match(entry, '^(%d+) =(%d+):(%d+):(%S+) (.*)$')
  if deadline then
    return tonumber(deadline), '', ttl, retention, room, instance
  end
  local kind
  deadline, kind = string.match(entry, '^(%d+) ?(%S*)$')
  return tonumber(deadline) or 0, kind or ''
end

-- A liveness entry's deadline in ms (0 for false), and nothing else of it: cheaper than waiter_of.
local function deadline_of(entry)
  return entry and tonumber(string.match(entry, '^%d+')) or 0
end

-- The room of a liveness entry that may be granted outright (see waiter_of), or nil.
local function room_of(entry)
  return entry and string.match(entry, '^%d+ =%d+:%d+:(%S+) ')
end

-- The first live waiter and its kind (and, see waiter_of, what a grant to it outright needs),
-- dropping dead ones at the head; `pop` takes it off the queue too. '' when nobody live is queued.
local function first_live(waiters, alive, now_ms, pop)
  for _ = 1, 16 do
    local head
    if pop then
      head = members({}, 'ZPOPMIN', waiters)[1]
    else
      head = members({}, 'ZRANGE', waiters, 0, 0)[1]
    end
    if head == nil then
      return '', ''
    end
    local deadline, kind, ttl, retention, room, instance = waiter_of(members(false, 'HGET', alive, head))
    if deadline >= now_ms then
      if pop then
        members(0, 'HDEL', alive, head)
      end
      return head, kind, ttl, retention, room, instance
    end
    members(0, 'ZREM', waiters, head)
    members(0, 'HDEL', alive, head)
  end
  return '', ''
end

-- Take off the queue the live shared waiters of `kind` at its head, at most `room` of them, into
-- `woken` (a list).
local function pop_kind(waiters, alive, now_ms, kind, room, woken)
  while room > 0 do
    local head, of = first_live(waiters, alive, now_ms, false)
    if head == '' or of ~= kind then
      return
    end
    first_live(waiters, alive, now_ms, true)
    woken[#woken + 1] = head
    room = room - 1
  end
end

-- Keep the waiters a hand-off names next ('<next> [<then> <then>]', see following) to their turn:
-- the i-th of them retries i reservations (`ms`) after the message, so a live one has tried again
-- (renewing its deadline, or taking the lock) by i + 1 reservations; its deadline moves there, and
-- one that never comes is dead then and dropped where it is met, never named again.
local function summon(alive, next, now_ms, ms)
  local i = 0
  for w in string.gmatch(next, '%S+') do
    i = i + 1
    local entry = members(false, 'HGET', alive, w)
    local by = now_ms + (i + 1) * ms
    if entry and deadline_of(entry) > by then
      redis.call('HSET', alive, w, int(by) .. string.match(entry, '^%d+(.*)$'))
    end
  end
end

-- The queue's first `n` waiters and their liveness entries, in two calls ({} when it is empty).
local function first_n(waiters, alive, n)
  local heads = members({}, 'ZRANGE', waiters, 0, n - 1)
  if #heads == 0 then
    return heads
  end
  return heads, members({}, 'HMGET', alive, unpack(heads))
end

-- first_n, the first of them live (dead ones ahead of it dropped, as first_live drops them; only a
-- dead head costs more), or {} when nobody live is queued.
local function window(waiters, alive, now_ms, n)
  local heads, entries = first_n(waiters, alive, n)
  if #heads == 0 or deadline_of(entries[1]) >= now_ms then
    return heads, entries
  end
  -- A dead head: first_live drops it (and the dead behind it) and finds the live head, from which
  -- the window is read again.
  if first_live(waiters, alive, now_ms, false) == '' then
    return {}
  end
  return first_n(waiters, alive, n)
end

-- '<next> [<then> <then>]': heads[i] (live) and the live among the four behind it, at most two;
-- and whether every one of them queued from `room` (nil: none is taken to have).
local function named_from(heads, entries, i, now_ms, room)
  local next, after, here = heads[i], 0, room ~= nil and room_of(entries[i]) == room
  for j = i + 1, math.min(#heads, i + 4) do
    if after == 2 then
      break
    end
    if deadline_of(entries[j]) >= now_ms then
      next = next .. ' ' .. heads[j]
      after = after + 1
      here = here and room_of(entries[j]) == room
    end
  end
  return next, here
end

-- Up to three live waiters at the head of the queue, as '<next> [<then> <then>]', or '': the
-- first live one (dead ones ahead of it dropped, as first_live does) and the live among the four
-- behind it.
local function following(waiters, alive, now_ms)
  local heads, entries = window(waiters, alive, now_ms, 5)
  if #heads == 0 then
    return ''
  end
  return named_from(heads, entries, 1, now_ms)
end

-- Tell each waiter in `woken` it was woken, one message each; the last names `next` after it.
-- `here`: every waiter named queued through the releasing store, which tells them from the
-- release's reply (a grant outright, see hand_on): nothing is published, and the list says so.
-- returns  the messages, in order (none when `publish` is ''), with `here` set when unpublished
local function tell(publish, channel, woken, next, here)
  local told = {}
  if publish == '' then
    return told
  end
  for i = 1, #woken - 1 do
    told[i] = woken[i]
  end
  told[#woken] = next ~= '' and woken[#woken] .. ' ' .. next or woken[#woken]
  if here then
    told.here = true
    return told
  end
  for i = 1, #told do
    redis.call(publish, channel, told[i])
  end
  return told
end

-- Shared waiters one hand-off admits together at most, when their kind has no limit.
local MAX_ADMITTED = 64

-- Wake the first live waiter to ask again ('?<w>', as lib/shared.lua's challenge), with the shared
-- waiters of its kind among the `limit - 1` (64 with no limit) waiters right behind it: what keeps
-- them out changed without a hand-off (a waiter ahead left). Nothing is reserved: a live one tries
-- again and learns what keeps it out now, so it does not sleep on an older refusal's fallback.
local function nudge(waiters, alive, now_ms, publish, channel)
  local head, kind = first_live(waiters, alive, now_ms, false)
  if head == '' or publish == '' then
    return
  end
  redis.call(publish, channel, '?' .. head)
  if kind == '' then
    return
  end
  local limit = tonumber(string.sub(kind, 2))
  for _, w in ipairs(members({}, 'ZRANGE', waiters, 1, (limit == 0 and MAX_ADMITTED or limit) - 1)) do
    local deadline, of = waiter_of(members(false, 'HGET', alive, w))
    if deadline >= now_ms then
      if of ~= kind then
        return
      end
      redis.call(publish, channel, '?' .. w)
    end
  end
end

-- Wake the first live waiter, alone, to ask again ('?<w>', as nudge): what keeps it out changed
-- without a hand-off naming it (another waiter took what the lock had free, or holds left it that
-- may end sooner than it was told), so it learns the new end and does not sleep on the old one.
-- Nothing is reserved; dead waiters at the head are dropped all the same.
local function ask_first(waiters, alive, now_ms, publish, channel)
  local head = first_live(waiters, alive, now_ms, false)
  if head ~= '' and publish ~= '' then
    redis.call(publish, channel, '?' .. head)
  end
end

-- Free the lock and hand it to the first live waiter: reserve it for that waiter for `ms`, and
-- publish '<woken> <next> [<then> <then>]' on the release channel: the waiter woken, and up to three
-- live waiters after it, the i-th of which retries i reservations later (summon holds it to that);
-- so each woken or next waiter that died costs the others at most one reservation, and only once.
-- A shared waiter at the head is admitted with the shared waiters of its kind right behind it (up
-- to its limit): the lock is reserved for all of them, and each is told in a message of its own.
-- With nobody to wake, the lock is simply deleted, and '' is published only when `announce` is '1'
-- (for waiters that do not queue, as Redlock's): the messages published are then {''}.
-- `room` (nil or '' for none): the releasing store's own mark. An exclusive waiter at the head
-- that queued from that same room (the releasing instance's own, alive as it runs this release) is
-- granted the lock outright instead, with its own ttl and the next fencing token (recorded with its
-- own instance and retention); the caller tells it from the reply, without another round trip. The
-- message names the waiters behind it as any hand-off does and ends with ' =<ttl>', the grant's
-- lease: they retry once it could have run out rather than after a reservation, and nobody is
-- summoned (the lock is held, not reserved). When every waiter it names queued from that room too,
-- it is not published at all: the caller tells them from the reply as well (tell's `here`).
-- `mark` (or nil): the releasing owner's mark, '|<owner>', which a grant outright writes after the
-- grant it records (issue, lib/lease.lua): a re-sent release still finds its own release.
-- returns  the (first) owner token woken, or ''; the messages (a list: those naming waiters, or
--          {''} for an announcement; `here` when unpublished); and the token of a grant outright
local function hand_on(lock, waiters, alive, publish, channel, ms, announce, room, mark)
  local woken, next, here = {}, '', false
  local now_us, stamp = server_now()
  local now_ms = math.floor(now_us / 1000)
  local ttl, retention, from, instance
  -- The head and the five behind it, in two calls: an exclusive head and a live one right behind
  -- it name the hand-off's next waiters from this one read.
  local heads, entries = window(waiters, alive, now_ms, 6)
  if #heads > 0 then
    local _, kind
    _, kind, ttl, retention, from, instance = waiter_of(entries[1])
    woken[1] = heads[1]
    members(0, 'ZREM', waiters, woken[1])
    members(0, 'HDEL', alive, woken[1])
    if kind ~= '' then
      local limit = tonumber(string.sub(kind, 2))
      pop_kind(waiters, alive, now_ms, kind, (limit == 0 and MAX_ADMITTED or limit) - 1, woken)
      next = following(waiters, alive, now_ms)
    elseif #heads == 1 then
      here = true
    elseif deadline_of(entries[2]) >= now_ms then
      next, here = named_from(heads, entries, 2, now_ms, room)
    else
      next = following(waiters, alive, now_ms)
    end
  end
  if #woken == 0 then
    lock_del(lock)
    if publish ~= '' and announce == '1' then
      redis.call(publish, channel, '')
      return '', {''}
    end
    return '', {}
  end
  if from and room and from == room then
    lock_set(lock, woken[1] .. (next == '' and '' or '*'), ttl)
    local token = issue(lock, now_us, stamp, 0, instance, retention, mark)
    -- Those behind were refused by the lease just released: told this one's length, none of them
    -- sleeps on the old one if this lease runs out unreleased.
    return woken[1], tell(publish, channel, woken, next == '' and '' or next .. ' =' .. ttl, here), token
  end
  lock_set(lock, '~' .. table.concat(woken, ' ') .. (next == '' and '' or '*'), ms)
  if publish ~= '' then
    summon(alive, next, now_ms, tonumber(ms))
  end
  return woken[1], tell(publish, channel, woken, next)
end

-- Free a lock whose lease ended: hand it on if waiters are flagged, else just delete it. Waiters
-- that do not queue flag the lease too (acquire.lua, ARGV[4] '3'), so an unflagged lease has
-- nobody to tell, and its release publishes nothing, even when `announce` is '1'.
-- returns  the messages published (a list, as hand_on's: empty when nobody was told), and the
--          token of a grant outright (see hand_on; `room` and `mark` go to it)
local function free_lock(lock, flagged, waiters, alive, publish, channel, ms, announce, room, mark)
  if flagged then
    local _, told, token = hand_on(lock, waiters, alive, publish, channel, ms, announce, room, mark)
    return told, token
  end
  lock_del(lock)
  return {}
end

-- Queue `owner` (at the tail, unless it is queued already), renew its liveness deadline, and flag
-- the lock's lease, if one is live, so its release hands it on. `kind` is '' for an
-- exclusive waiter, '=<ttl>:<retention>:<room> <instance>' for one that may be granted the lock
-- outright, '^<limit>' for a shared one (see waiter_of). The queue keys expire when no waiter renews them.
-- Scores are the server's time in µs, strictly increasing (one past the last waiter's when two
-- arrive within one µs). A queue this call emptied (a hand-off took its last waiter, or the dead
-- were dropped) cannot be written again while its slot migrates (members): the caller is then
-- left out, and its next try, on whichever node then has the slot, queues it.
local function enqueue(lock, waiters, alive, owner, now_us, lease, kind)
  local score = now_us
  local last = members({}, 'ZRANGE', waiters, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= score then
    score = tonumber(last[2]) + 1
  end
  -- NX: a waiter queued already keeps its place.
  if members(false, 'ZADD', waiters, 'NX', int(score), owner) == false then
    return
  end
  local entry = int(math.floor(now_us / 1000) + lease)
  if kind and kind ~= '' then
    entry = entry .. ' ' .. kind
  end
  if members(false, 'HSET', alive, owner, entry) == false then
    return
  end
  members(0, 'PEXPIRE', waiters, lease)
  members(0, 'PEXPIRE', alive, lease)
  lock_flag(lock)
end

-- End `owner`'s lease on `lock` (whose value the caller read: `value`): mark the fencing counter
-- released by this owner, and free the lock, handing it on if waiters are flagged. When the lease
-- is not the owner's, say why: a counter marked by this owner means it released the lock already
-- (a re-sent command: released again; only until another owner takes the lock, after which a
-- re-sent release answers as if the lease had expired; a grant outright to the next waiter keeps
-- the mark, since that waiter took the lock in the release itself); no lock at all means it
-- expired, and its waiters are woken; a reservation means it expired and was handed on; else
-- another owner holds it.
-- returns  1 released, 0 expired, -1 not-owner; the messages published naming waiters (a list);
--          and the token of a grant outright (see hand_on; `room` goes to it)
local function end_lease(value, lock, owner, waiters, alive, publish, channel, ms, announce, room)
  local holder, flagged = read_lock(value)
  if holder == owner then
    local told, token = free_lock(lock, flagged, waiters, alive, publish, channel, ms, announce, room, '|' .. owner)
    if not token then
      -- A grant outright wrote this owner's mark after the next owner's grant already.
      mark_released(lock, owner)
    end
    return 1, told, token
  end
  local counter = fence_get(lock)
  if counter and string.sub(counter, -#owner - 1) == '|' .. owner then
    return 1
  end
  if value == false then
    local _, told, token = hand_on(lock, waiters, alive, publish, channel, ms, announce, room)
    return 0, told, token
  end
  if holder == nil then
    return 0
  end
  return -1
end
