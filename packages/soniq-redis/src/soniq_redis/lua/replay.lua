-- ARGV: prefix, queued-status, dead job_id, new_job_id, scheduled_at, then the overrides
-- queue, priority, max_attempts ('' keeps the dead row's) and attempts.
local status, id, new_id, scheduled_at = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
check_status(status)
local dk = dead_key(id)
local f = redis.call('HMGET', dk, 'job_name', 'args', 'queue', 'priority', 'max_attempts', 'version')
if not f[1] then return false end
if redis.call('EXISTS', job_key(new_id)) == 1 then
  error({err = 'SONIQ_DUPLICATE the new job id already exists'})
end
local now = now_us()
local stamp = int(now)
local queue = f[3]
if ARGV[6] and ARGV[6] ~= '' then queue = ARGV[6] end
if ARGV[7] and ARGV[7] ~= '' then f[4] = ARGV[7] end
if ARGV[8] and ARGV[8] ~= '' then f[5] = ARGV[8] end
local attempts = ARGV[9] or '0'
redis.call('HSET', job_key(new_id), 'id', new_id, 'job_name', f[1], 'args', f[2], 'queue', queue,
  'priority', f[4], 'scheduled_at', scheduled_at, 'max_attempts', f[5], 'attempts', attempts,
  'created_at', stamp, 'updated_at', stamp, 'shutdown_nacks', '0', 'version', f[6] or '1', 'steps', '{}')
transition(new_id, queue, stamp, nil, status)
redis.call('ZADD', P .. 'all', stamp, new_id)
redis.call('ZADD', P .. 'q:' .. queue, stamp, new_id)
redis.call('SADD', P .. 'queues', queue)
schedule(new_id, queue, f[4], scheduled_at, stamp, now)
wake(queue)
redis.call('HINCRBY', dk, 'resurrection_count', 1)
redis.call('HSET', dk, 'last_resurrection_at', stamp)
return new_id
