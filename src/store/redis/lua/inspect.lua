-- inspect: read a lock's state in one step.
-- include: lib/lease.lua
-- KEYS[1]  lock key
-- returns  {state or false, pttl, record or false}: the lease's state (see lib/lease.lua), false
--          with no lease live; ms until the lease ends, -2 with none; the fencing record
--          ('<token> <taken-at µs> <instance>' or '<token>=<instance>', then '|<owner>' once
--          released), false if none is kept
return {lock_get(KEYS[1]), lock_pttl(KEYS[1]), fence_get(KEYS[1])}
