-- ARGV: prefix, worker_id, status.
local status = ARGV[3]
check_worker_status(status)
local k = worker_key(ARGV[2])
local current = redis.call('HGET', k, 'status')
if not current then return 0 end
-- Recovery may already have stopped this worker and handed its rows to others;
-- writing `stopping` or `active` over that would make it look alive again.
if current == 'stopped' and status ~= 'stopped' then return 0 end
redis.call('HSET', k, 'status', status, 'last_heartbeat', int(now_us()))
return 1
