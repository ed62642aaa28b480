-- ARGV: prefix, job_id, worker_id. Fenced.
local id, worker = ARGV[2], ARGV[3]
if not owned(id, worker) then return 0 end
redis.call('HSET', job_key(id), 'started_at', int(now_us()))
return 1
