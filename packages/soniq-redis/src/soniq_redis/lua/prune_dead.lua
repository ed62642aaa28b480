-- Delete at most `limit` dead-letter rows moved strictly before `before`, oldest first.
-- ARGV: prefix, before (microseconds), limit. Returns how many went.
local ids = redis.call('ZRANGEBYSCORE', P .. 'dl', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local queue = redis.call('HGET', dead_key(id), 'queue')
  redis.call('DEL', dead_key(id))
  redis.call('ZREM', P .. 'dl', id)
  if queue then redis.call('ZREM', P .. 'dlq:' .. queue, id) end
end
return #ids
