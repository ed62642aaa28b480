-- Schedules as HGETALL replies, in no order. ARGV: prefix, then names (none: every schedule).
local names = {}
if #ARGV > 1 then
  for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
else
  names = redis.call('SMEMBERS', P .. 'schedules')
end
local rows = {}
for _, name in ipairs(names) do
  local row = redis.call('HGETALL', P .. 'schedule:' .. name)
  if #row > 0 then rows[#rows + 1] = row end
end
return rows
