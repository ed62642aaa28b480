-- ARGV: prefix, cancelled-status, job_id. Only a queued row (waiting or not) is cancelled;
-- its dependents follow in the same script.
local target, id = ARGV[2], ARGV[3]
check_status(target)
local f = redis.call('HMGET', job_key(id), 'status', 'queue', 'created_at', 'watched', 'dedup_key',
  'dependents')
if f[1] ~= 'queued' then return 0 end
cancel_queued(id, f, now_us())
return 1
