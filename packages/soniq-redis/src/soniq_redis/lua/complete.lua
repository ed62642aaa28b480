-- Complete one or many claimed rows, each fenced on its own.
-- ARGV: prefix, done-status, worker_id, then (job_id, result JSON, expires_at) triples;
-- expires_at is microseconds, or '' for a row kept until deleted by hand, or 'delete' to
-- delete the row instead (result_ttl = 0).
-- Each written row resolves its dependents and, when watched, publishes its id.
-- Returns the ids actually written.
local target, worker = ARGV[2], ARGV[3]
check_status(target)
local now = now_us()
local stamp = int(now)
local written = {}
for i = 4, #ARGV - 2, 3 do
  local id = ARGV[i]
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'worker_id', 'queue', 'created_at', 'watched', 'dependents')
  if f[1] == 'processing' and f[2] == worker then
    if ARGV[i + 2] == 'delete' then
      index_remove(id, f[3], f[1])
      redis.call('ZREM', P .. 'all', id)
      redis.call('ZREM', P .. 'q:' .. f[3], id)
      redis.call('SREM', wproc_key(worker), id)
      redis.call('DEL', k)
    else
      transition(id, f[3], f[4], f[1], target)
      redis.call('HSET', k, 'result', ARGV[i + 1], 'updated_at', stamp)
      redis.call('HDEL', k, 'worker_id')
      redis.call('SREM', wproc_key(worker), id)
      local expires = ARGV[i + 2]
      if expires ~= '' then
        redis.call('HSET', k, 'expires_at', expires)
        redis.call('ZADD', P .. 'exp', expires, id)
      end
    end
    settle(id, nil, now, f[6])
    changed(id, f[5])
    written[#written + 1] = id
  end
end
return written
