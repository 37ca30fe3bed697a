-- hand-on: the step release, leave and force-release share; scripts.ts puts it in front of each.
-- Pops the first waiter, reserves the lock for it for `ms`, and publishes its owner token on the
-- release channel ('' when nobody waits), so exactly one waiter across all instances wakes.
-- returns  the owner token woken, or ''
local function hand_on(waiters, reserved, publish, channel, ms)
  local head = redis.call('ZPOPMIN', waiters)
  local woken = ''
  if head[1] then
    woken = head[1]
    redis.call('SET', reserved, woken, 'PX', ms)
  end
  if publish ~= '' then
    redis.call(publish, channel, woken)
  end
  return woken
end
