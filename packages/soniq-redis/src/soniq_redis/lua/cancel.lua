-- ARGV: prefix, cancelled-status, job_id. Only a queued row is cancelled.
local target, id = ARGV[2], ARGV[3]
check_status(target)
local k = job_key(id)
local f = redis.call('HMGET', k, 'status', 'queue', 'created_at')
if f[1] ~= 'queued' then return 0 end
unschedule(id, f[2])
transition(id, f[2], f[3], f[1], target)
redis.call('HSET', k, 'updated_at', int(now_us()))
return 1
