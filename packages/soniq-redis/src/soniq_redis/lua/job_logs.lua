-- A job's stored logs: the job hash's, else the dead-letter hash's, else nil. One script,
-- so a move to the dead-letter hash between the two reads cannot hide them.
-- ARGV: prefix, job_id.
local id = ARGV[2]
local logs = redis.call('HGET', job_key(id), 'logs')
if logs then return logs end
return redis.call('HGET', dead_key(id), 'logs')
