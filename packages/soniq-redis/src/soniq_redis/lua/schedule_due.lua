-- Unpaused schedules with next_run <= now, earliest first (ties by name).
-- ARGV: prefix, now (microseconds, '' = the server's clock), limit.
local now = ARGV[2]
if now == '' then now = int(now_us()) end
local names = redis.call('ZRANGEBYSCORE', P .. 'schedules_due', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local rows = {}
for _, name in ipairs(names) do
  local row = redis.call('HGETALL', P .. 'schedule:' .. name)
  if #row > 0 then rows[#rows + 1] = row end
end
return rows
