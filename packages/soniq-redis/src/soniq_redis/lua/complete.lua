-- Complete one or many claimed rows, each fenced on its own.
-- ARGV: prefix, done-status, worker_id, then (job_id, result JSON) pairs.
-- Returns the ids actually written.
local target, worker = ARGV[2], ARGV[3]
check_status(target)
local stamp = int(now_us())
local written = {}
for i = 4, #ARGV - 1, 2 do
  local id = ARGV[i]
  if owned(id, worker) then
    local k = job_key(id)
    local f = redis.call('HMGET', k, 'queue', 'created_at', 'status')
    transition(id, f[1], f[2], f[3], target)
    redis.call('HSET', k, 'result', ARGV[i + 1], 'updated_at', stamp)
    redis.call('HDEL', k, 'worker_id')
    redis.call('SREM', wproc_key(worker), id)
    written[#written + 1] = id
  end
end
return written
