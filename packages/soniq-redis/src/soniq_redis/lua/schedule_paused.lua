-- Pause or resume a schedule, optionally moving next_run. ARGV: prefix, name, '0'|'1', next_run ('' = keep).
-- Returns 1, or 0 when there is no such schedule.
local name = ARGV[2]
local k = P .. 'schedule:' .. name
local next_run = redis.call('HGET', k, 'next_run')
if not next_run then return 0 end
if ARGV[4] ~= '' then next_run = ARGV[4] end
redis.call('HSET', k, 'paused', ARGV[3], 'next_run', next_run, 'updated_at', int(now_us()))
if ARGV[3] == '1' then
  redis.call('ZREM', P .. 'schedules_due', name)
else
  redis.call('ZADD', P .. 'schedules_due', next_run, name)
end
return 1
