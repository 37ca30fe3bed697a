-- forget-job: delete a job's tick marker and run history (operator tooling). The lock and its
-- fencing counter are left as they are, so a later run's token is still above every earlier one.
-- KEYS[1]  tick marker
-- KEYS[2]  run history
-- returns  how many of the two keys existed
return redis.call('DEL', KEYS[1], KEYS[2])
