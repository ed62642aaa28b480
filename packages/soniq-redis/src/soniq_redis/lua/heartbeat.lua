-- ARGV: prefix, worker_id. A row marked stopped (by recovery or by the worker) stays silent.
local k = worker_key(ARGV[2])
local current = redis.call('HGET', k, 'status')
if not current or current == 'stopped' then return 0 end
redis.call('HSET', k, 'last_heartbeat', int(now_us()))
return 1
