-- ARGV: prefix. One consistent snapshot of every worker row.
local rows = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'workers')) do
  local row = redis.call('HGETALL', worker_key(id))
  if #row > 0 then rows[#rows + 1] = row end
end
return rows
