-- Insert a batch of jobs, all or none.
-- ARGV: prefix, queued-status, count, then per job: id, job_name, args,
-- queue, priority, scheduled_at, max_attempts, trace_context ('' = none).
local status = ARGV[2]
check_status(status)
local count = tonumber(ARGV[3])
local width = 8
local seen = {}
-- Every check runs before the first write: Redis does not roll a script back.
for i = 0, count - 1 do
  local id = ARGV[4 + i * width]
  if seen[id] or redis.call('EXISTS', job_key(id)) == 1 then
    error({err = 'SONIQ_DUPLICATE a job id in this batch already exists'})
  end
  seen[id] = true
end
local now = now_us()
local stamp = int(now)
local touched = {}
for i = 0, count - 1 do
  local base = 4 + i * width
  local id, queue, priority, scheduled_at = ARGV[base], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
  local k = job_key(id)
  redis.call('HSET', k, 'id', id, 'job_name', ARGV[base + 1], 'args', ARGV[base + 2],
    'queue', queue, 'priority', priority, 'scheduled_at', scheduled_at,
    'max_attempts', ARGV[base + 6], 'attempts', '0', 'created_at', stamp, 'updated_at', stamp)
  if ARGV[base + 7] ~= '' then redis.call('HSET', k, 'trace_context', ARGV[base + 7]) end
  transition(id, queue, stamp, nil, status)
  redis.call('ZADD', P .. 'all', stamp, id)
  redis.call('ZADD', P .. 'q:' .. queue, stamp, id)
  redis.call('SADD', P .. 'queues', queue)
  schedule(id, queue, priority, scheduled_at, stamp, now)
  touched[queue] = true
end
-- Woken for later rows too: waiters re-read the earliest scheduled time.
for queue in pairs(touched) do wake(queue) end
return count
