-- Insert a batch of jobs, all or none.
-- ARGV: prefix, queued-status, count, then per job: id, job_name, args,
-- queue, priority, scheduled_at, max_attempts, trace_context ('' = none),
-- dedup_key ('' = none), producer_id ('' = none).
-- A job whose dedup_key is held by a queued row (P .. 'dedup:' .. key names it) is not
-- written; the reply lists the stored id of every job in order (the holder's for those).
local status = ARGV[2]
check_status(status)
local count = tonumber(ARGV[3])
local width = 10
local seen = {}
local function holder_of(key)
  local held = redis.call('GET', P .. 'dedup:' .. key)
  if not held then return nil end
  local f = redis.call('HMGET', job_key(held), 'status', 'dedup_key')
  if f[1] == 'queued' and f[2] == key then return held end
  return nil
end
-- Every check runs before the first write: Redis does not roll a script back.
local stored = {}
local keys_in_batch = {}
for i = 0, count - 1 do
  local base = 4 + i * width
  local id, key = ARGV[base], ARGV[base + 8]
  local holder = nil
  if key ~= '' then holder = keys_in_batch[key] or holder_of(key) end
  if holder then
    stored[i + 1] = holder
  else
    if seen[id] or redis.call('EXISTS', job_key(id)) == 1 then
      error({err = 'SONIQ_DUPLICATE a job id in this batch already exists'})
    end
    seen[id] = true
    stored[i + 1] = id
    if key ~= '' then keys_in_batch[key] = id end
  end
end
local now = now_us()
local stamp = int(now)
local touched = {}
for i = 0, count - 1 do
  local base = 4 + i * width
  local id, queue, priority, scheduled_at = ARGV[base], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
  -- Only the jobs that were not deduplicated are written.
  if stored[i + 1] == id then
    local k = job_key(id)
    redis.call('HSET', k, 'id', id, 'job_name', ARGV[base + 1], 'args', ARGV[base + 2],
      'queue', queue, 'priority', priority, 'scheduled_at', scheduled_at,
      'max_attempts', ARGV[base + 6], 'attempts', '0', 'created_at', stamp, 'updated_at', stamp)
    if ARGV[base + 7] ~= '' then redis.call('HSET', k, 'trace_context', ARGV[base + 7]) end
    if ARGV[base + 8] ~= '' then
      redis.call('HSET', k, 'dedup_key', ARGV[base + 8])
      redis.call('SET', P .. 'dedup:' .. ARGV[base + 8], id)
    end
    if ARGV[base + 9] ~= '' then redis.call('HSET', k, 'producer_id', ARGV[base + 9]) end
    transition(id, queue, stamp, nil, status)
    redis.call('ZADD', P .. 'all', stamp, id)
    redis.call('ZADD', P .. 'q:' .. queue, stamp, id)
    redis.call('SADD', P .. 'queues', queue)
    schedule(id, queue, priority, scheduled_at, stamp, now)
    touched[queue] = true
  end
end
-- Woken for later rows too: waiters re-read the earliest scheduled time.
for queue in pairs(touched) do wake(queue) end
return stored
