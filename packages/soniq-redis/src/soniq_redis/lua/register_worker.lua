-- ARGV: prefix, active-status, worker_id, hostname, pid, queues JSON, concurrency.
local status, id = ARGV[2], ARGV[3]
check_worker_status(status)
local stamp = int(now_us())
local k = worker_key(id)
redis.call('DEL', k)
redis.call('HSET', k, 'id', id, 'hostname', ARGV[4], 'pid', ARGV[5], 'queues', ARGV[6],
  'concurrency', ARGV[7], 'status', status, 'last_heartbeat', stamp, 'started_at', stamp)
redis.call('SADD', P .. 'workers', id)
return 1
