-- Insert or replace one schedule's definition; returns its hash (HGETALL).
-- ARGV: prefix, name, job_name, queue, priority, max_attempts, args, cron ('' = none),
-- every_seconds ('' = none), timezone, catch_up, catch_up_limit, paused ('' = keep, '0', '1'),
-- next_run (microseconds), reset_next_run ('0' or '1').
-- A replace keeps the stored next_run while cron, every_seconds and timezone are unchanged.
local name = ARGV[2]
local k = P .. 'schedule:' .. name
local now = int(now_us())
local cron, every, zone, paused, next_run = ARGV[8], ARGV[9], ARGV[10], ARGV[13], ARGV[14]
local old = redis.call('HMGET', k, 'created_at', 'cron', 'every_seconds', 'timezone', 'next_run', 'paused')
if old[1] then
  local same = (old[2] or '') == cron and (old[3] or '') == every and old[4] == zone
  if same and ARGV[15] ~= '1' then next_run = old[5] end
  if paused == '' then paused = old[6] end
else
  if paused == '' then paused = '0' end
  redis.call('HSET', k, 'created_at', now, 'run_count', '0')
end
redis.call('HSET', k, 'name', name, 'job_name', ARGV[3], 'queue', ARGV[4], 'priority', ARGV[5],
  'max_attempts', ARGV[6], 'args', ARGV[7], 'timezone', zone, 'catch_up', ARGV[11],
  'catch_up_limit', ARGV[12], 'paused', paused, 'next_run', next_run, 'updated_at', now)
if cron == '' then redis.call('HDEL', k, 'cron') else redis.call('HSET', k, 'cron', cron) end
if every == '' then redis.call('HDEL', k, 'every_seconds') else redis.call('HSET', k, 'every_seconds', every) end
redis.call('SADD', P .. 'schedules', name)
if paused == '1' then
  redis.call('ZREM', P .. 'schedules_due', name)
else
  redis.call('ZADD', P .. 'schedules_due', next_run, name)
end
return redis.call('HGETALL', k)
