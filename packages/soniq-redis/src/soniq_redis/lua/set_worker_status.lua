-- ARGV: prefix, worker_id, status, state ('' = leave), last_shutdown JSON ('' = leave).
local status = ARGV[3]
check_worker_status(status)
local k = worker_key(ARGV[2])
local current = redis.call('HGET', k, 'status')
if not current then return 0 end
-- Recovery may already have stopped this worker and handed its rows to others;
-- writing `stopping` or `active` over that would make it look alive again.
if current == 'stopped' and status ~= 'stopped' then return 0 end
local stamp = int(now_us())
redis.call('HSET', k, 'status', status, 'last_heartbeat', stamp)
if ARGV[4] and ARGV[4] ~= '' then redis.call('HSET', k, 'state', ARGV[4], 'state_changed_at', stamp) end
if ARGV[5] and ARGV[5] ~= '' then redis.call('HSET', k, 'last_shutdown', ARGV[5]) end
return 1
