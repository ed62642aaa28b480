-- ARGV: prefix, done-status, job_id, worker_id, result JSON. Fenced.
local target, id, worker = ARGV[2], ARGV[3], ARGV[4]
check_status(target)
if not owned(id, worker) then return 0 end
local k = job_key(id)
local f = redis.call('HMGET', k, 'queue', 'created_at', 'status')
transition(id, f[1], f[2], f[3], target)
redis.call('HSET', k, 'result', ARGV[5], 'updated_at', int(now_us()))
redis.call('HDEL', k, 'worker_id')
redis.call('SREM', wproc_key(worker), id)
return 1
