-- ARGV: prefix, job_id, worker_id, error, reason. Fenced.
local id, worker = ARGV[2], ARGV[3]
if not owned(id, worker) then return 0 end
redis.call('HINCRBY', job_key(id), 'attempts', 1)
move_to_dead(id, ARGV[4], ARGV[5], now_us())
return 1
