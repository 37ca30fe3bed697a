-- inspect: read a lock's state in one step.
-- KEYS[1]  lock key
-- KEYS[2]  fencing counter
-- returns  {value or false, pttl, counter or false}: the lock key's value (see lib/lease.lua); its
--          pttl, -2 when there is no key; the fencing counter's value ('<token> <taken-at µs>
--          <instance>', then '|<owner>' once released), false if none is kept
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
