-- ARGV: prefix, then queue names ('' as the only one = every known queue).
-- Returns per queue: name, queued, processing, done, cancelled, dead_letter,
-- scheduled (queued rows due later), oldest queued created_at ('' = none), oldest
-- created_at among the queued rows already due ('' = none).
local names = {}
if #ARGV == 2 and ARGV[2] == '' then
  names = redis.call('SMEMBERS', P .. 'queues')
else
  for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
end
local now = now_us()
local out = {}
for _, queue in ipairs(names) do
  local row = {queue}
  for _, status in ipairs({'queued', 'processing', 'done', 'cancelled'}) do
    row[#row + 1] = redis.call('ZCARD', P .. 'qs:' .. status .. ':' .. queue)
  end
  row[#row + 1] = redis.call('ZCARD', P .. 'dlq:' .. queue)
  row[#row + 1] = redis.call('ZCOUNT', sched_key(queue), '(' .. int(now), '+inf')
  local first = redis.call('ZRANGE', P .. 'qs:queued:' .. queue, 0, 0, 'WITHSCORES')
  row[#row + 1] = first[2] or ''
  -- Oldest first through the queued rows, up to the first one not waiting in the scheduled set.
  local due, start, sk = '', 0, sched_key(queue)
  while due == '' do
    local chunk = redis.call('ZRANGE', P .. 'qs:queued:' .. queue, start, start + 99, 'WITHSCORES')
    if #chunk == 0 then break end
    for i = 1, #chunk, 2 do
      local at = redis.call('ZSCORE', sk, chunk[i])
      if not at or tonumber(at) <= now then
        due = chunk[i + 1]
        break
      end
    end
    start = start + 100
  end
  row[#row + 1] = due
  out[#out + 1] = row
end
return out
