-- Complete one or many claimed rows, each fenced on its own.
-- ARGV: prefix, done-status, worker_id, then (job_id, result JSON, expires_at) triples;
-- expires_at is microseconds, or '' for a row kept until deleted by hand.
-- Returns the ids actually written.
local target, worker = ARGV[2], ARGV[3]
check_status(target)
local stamp = int(now_us())
local written = {}
for i = 4, #ARGV - 2, 3 do
  local id = ARGV[i]
  if owned(id, worker) then
    local k = job_key(id)
    local f = redis.call('HMGET', k, 'queue', 'created_at', 'status')
    transition(id, f[1], f[2], f[3], target)
    redis.call('HSET', k, 'result', ARGV[i + 1], 'updated_at', stamp)
    redis.call('HDEL', k, 'worker_id')
    redis.call('SREM', wproc_key(worker), id)
    local expires = ARGV[i + 2]
    if expires ~= '' then
      redis.call('HSET', k, 'expires_at', expires)
      redis.call('ZADD', P .. 'exp', expires, id)
    end
    written[#written + 1] = id
  end
end
return written
