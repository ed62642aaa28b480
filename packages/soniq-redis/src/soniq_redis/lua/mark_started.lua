-- ARGV: prefix, worker_id, job_ids... Each row fenced on its own.
-- Returns the ids actually written.
local worker = ARGV[2]
local stamp = int(now_us())
local written = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if owned(id, worker) then
    redis.call('HSET', job_key(id), 'started_at', stamp)
    written[#written + 1] = id
  end
end
return written
