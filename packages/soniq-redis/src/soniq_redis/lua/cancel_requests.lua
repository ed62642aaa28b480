-- Ids of the rows a worker is processing whose cancel was requested.
-- ARGV: prefix, worker_id. Reads only that worker's rows (its `wproc` set).
local worker = ARGV[2]
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', wproc_key(worker))) do
  local f = redis.call('HMGET', job_key(id), 'status', 'worker_id', 'cancel_requested')
  if f[1] == 'processing' and f[2] == worker and f[3] == '1' then found[#found + 1] = id end
end
return found
