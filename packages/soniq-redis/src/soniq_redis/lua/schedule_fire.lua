-- Advance a schedule and insert its jobs, fenced on the next_run the caller read.
-- ARGV: prefix, queued-status, name, expected next_run, new next_run, fired_at, count,
-- then per job (as enqueue.lua): id, job_name, args, queue, priority, scheduled_at,
-- max_attempts, trace_context ('' = none), has-limit-key ('1'/'0'), limit_key, version.
-- Returns the inserted ids, or false (nil) with nothing written when the fence fails:
-- the script runs alone, so of all callers holding one expected next_run only the first fires.
local status, name = ARGV[2], ARGV[3]
check_status(status)
local k = P .. 'schedule:' .. name
local current = redis.call('HMGET', k, 'next_run', 'paused')
if not current[1] or current[1] ~= ARGV[4] or current[2] == '1' then return false end
local count = tonumber(ARGV[7])
local width, first = 11, 8
local ids = {}
-- Every check runs before the first write: Redis does not roll a script back.
local seen = {}
for i = 0, count - 1 do
  local id = ARGV[first + i * width]
  if seen[id] or redis.call('EXISTS', job_key(id)) == 1 then
    error({err = 'SONIQ_DUPLICATE a job id in this batch already exists'})
  end
  seen[id] = true
  ids[#ids + 1] = id
end
local now = now_us()
local stamp = int(now)
local touched = {}
for i = 0, count - 1 do
  local base = first + i * width
  local id, queue, priority, scheduled_at = ARGV[base], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
  local jk = job_key(id)
  redis.call('HSET', jk, 'id', id, 'job_name', ARGV[base + 1], 'args', ARGV[base + 2],
    'queue', queue, 'priority', priority, 'scheduled_at', scheduled_at,
    'max_attempts', ARGV[base + 6], 'attempts', '0', 'created_at', stamp, 'updated_at', stamp,
    'shutdown_nacks', '0', 'version', ARGV[base + 10], 'steps', '{}')
  if ARGV[base + 7] ~= '' then redis.call('HSET', jk, 'trace_context', ARGV[base + 7]) end
  if ARGV[base + 8] == '1' then redis.call('HSET', jk, 'limit_key', ARGV[base + 9]) end
  transition(id, queue, stamp, nil, status)
  redis.call('ZADD', P .. 'all', stamp, id)
  redis.call('ZADD', P .. 'q:' .. queue, stamp, id)
  redis.call('SADD', P .. 'queues', queue)
  schedule(id, queue, priority, scheduled_at, stamp, now)
  touched[queue] = true
end
redis.call('HSET', k, 'next_run', ARGV[5], 'updated_at', stamp)
redis.call('ZADD', P .. 'schedules_due', ARGV[5], name)
if count > 0 then
  redis.call('HINCRBY', k, 'run_count', count)
  redis.call('HSET', k, 'last_run', ARGV[6], 'last_job_id', ids[#ids])
end
for queue in pairs(touched) do wake(queue) end
return ids
