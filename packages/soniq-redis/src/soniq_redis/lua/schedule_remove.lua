-- ARGV: prefix, name. Returns 1, or 0 when there was no such schedule.
local name = ARGV[2]
redis.call('ZREM', P .. 'schedules_due', name)
redis.call('SREM', P .. 'schedules', name)
return redis.call('DEL', P .. 'schedule:' .. name)
