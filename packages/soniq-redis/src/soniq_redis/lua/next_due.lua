-- ARGV: prefix, every-queue ('1'/'0'), queue names...
-- Microseconds until the earliest scheduled (not yet promoted) row is due, or false.
local queues
if ARGV[2] == '1' then
  queues = redis.call('SMEMBERS', P .. 'queues')
else
  queues = {}
  for i = 3, #ARGV do queues[#queues + 1] = ARGV[i] end
end
local earliest = nil
for _, queue in ipairs(queues) do
  local first = redis.call('ZRANGE', sched_key(queue), 0, 0, 'WITHSCORES')
  if first[2] then
    local score = tonumber(first[2])
    if earliest == nil or score < earliest then earliest = score end
  end
end
if earliest == nil then return false end
return int(earliest - now_us())
