-- ARGV: prefix, active-status, worker_id, hostname, pid, queues JSON, concurrency,
-- job names JSON ('' = not reported), job versions JSON ('' = not reported).
local status, id = ARGV[2], ARGV[3]
check_worker_status(status)
local stamp = int(now_us())
local k = worker_key(id)
redis.call('DEL', k)
redis.call('HSET', k, 'id', id, 'hostname', ARGV[4], 'pid', ARGV[5], 'queues', ARGV[6],
  'concurrency', ARGV[7], 'status', status, 'last_heartbeat', stamp, 'started_at', stamp)
if ARGV[8] ~= '' then redis.call('HSET', k, 'job_names', ARGV[8]) end
if ARGV[9] and ARGV[9] ~= '' then redis.call('HSET', k, 'job_versions', ARGV[9]) end
redis.call('SADD', P .. 'workers', id)
return 1
