-- ARGV: prefix, worker_id, new status ('' = keep).
local k = worker_key(ARGV[2])
local current = redis.call('HGET', k, 'status')
if not current or current == 'stopped' then return 0 end
if ARGV[3] ~= '' then
  check_worker_status(ARGV[3])
  redis.call('HSET', k, 'status', ARGV[3])
end
redis.call('HSET', k, 'last_heartbeat', int(now_us()))
return 1
