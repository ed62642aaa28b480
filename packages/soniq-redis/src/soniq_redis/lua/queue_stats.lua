-- ARGV: prefix, queue ('' = all), has-queue ('1'/'0').
-- Returns counts of queued, processing, done, cancelled, dead_letter.
local queue, has_queue = ARGV[2], ARGV[3] == '1'
local counts = {}
for _, status in ipairs({'queued', 'processing', 'done', 'cancelled'}) do
  local index
  if has_queue then index = P .. 'qs:' .. status .. ':' .. queue else index = P .. 'st:' .. status end
  counts[#counts + 1] = redis.call('ZCARD', index)
end
if has_queue then
  counts[#counts + 1] = redis.call('ZCARD', P .. 'dlq:' .. queue)
else
  counts[#counts + 1] = redis.call('ZCARD', P .. 'dl')
end
return counts
