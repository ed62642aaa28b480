-- Insert a batch of jobs, all or none.
-- ARGV: prefix, queued-status, count, then per job: id, job_name, args, queue, priority,
-- scheduled_at, max_attempts, trace_context ('' = none), dedup_key ('' = none),
-- producer_id ('' = none), version, then the count e of protocol-4 extras that follow: 0 for a
-- job with none of them (policy cancel, no limit key, no dependencies), else
-- dependency_policy, has-limit-key ('1'/'0'), limit_key, depends_on as JSON, and the
-- e - 4 dependency ids.
-- A job whose dedup_key is held by a queued row (P .. 'dedup:' .. key names it) is not
-- written; the reply lists the stored id of every job in order (the holder's for those).
-- Dependencies: each must be a job row, a dead-letter row or a job earlier in
-- the batch, else SONIQ_UNKNOWN_DEPENDENCY with the missing ids as JSON and nothing written.
local status = ARGV[2]
check_status(status)
local count = tonumber(ARGV[3])
-- A job's first dependency id is at base + DEPS. NONE is never written to.
local DEPS = 16
local NONE = {}
local bases, ndeps_at = {}, {}
local pos = 4
for i = 1, count do
  local extra = tonumber(ARGV[pos + 11])
  bases[i] = pos
  ndeps_at[i] = math.max(extra - 4, 0)
  pos = pos + 12 + extra
end
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
-- A job's id as given -> its stored id, for jobs later in the batch that depend on it.
local in_batch = {}
local missing, missing_seen = {}, {}
for i = 1, count do
  local base = bases[i]
  local id, key = ARGV[base], ARGV[base + 8]
  local holder = nil
  if key ~= '' then holder = keys_in_batch[key] or holder_of(key) end
  if holder then
    stored[i] = holder
  else
    if in_batch[id] or redis.call('EXISTS', job_key(id)) == 1 then
      error({err = 'SONIQ_DUPLICATE a job id in this batch already exists'})
    end
    stored[i] = id
    if key ~= '' then keys_in_batch[key] = id end
    for d = base + DEPS, base + DEPS - 1 + ndeps_at[i] do
      local dep = ARGV[d]
      if not in_batch[dep] and not missing_seen[dep] and redis.call('EXISTS', job_key(dep)) == 0
          and redis.call('EXISTS', dead_key(dep)) == 0 then
        missing_seen[dep] = true
        missing[#missing + 1] = dep
      end
    end
  end
  in_batch[id] = stored[i]
end
if #missing > 0 then
  error({err = 'SONIQ_UNKNOWN_DEPENDENCY ' .. cjson.encode(missing)})
end
local now = now_us()
local stamp = int(now)
local touched = {}
for i = 1, count do
  local base = bases[i]
  local id, queue, priority, scheduled_at = ARGV[base], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
  -- Only the jobs that were not deduplicated are written.
  if stored[i] == id then
    local k = job_key(id)
    redis.call('HSET', k, 'id', id, 'job_name', ARGV[base + 1], 'args', ARGV[base + 2],
      'queue', queue, 'priority', priority, 'scheduled_at', scheduled_at,
      'max_attempts', ARGV[base + 6], 'attempts', '0', 'created_at', stamp, 'updated_at', stamp,
      'shutdown_nacks', '0', 'version', ARGV[base + 10], 'steps', '{}')
    if ARGV[base + 7] ~= '' then redis.call('HSET', k, 'trace_context', ARGV[base + 7]) end
    if ARGV[base + 9] ~= '' then redis.call('HSET', k, 'producer_id', ARGV[base + 9]) end
    local policy, ndeps = 'cancel', ndeps_at[i]
    if ARGV[base + 11] ~= '0' then
      policy = ARGV[base + 12]
      if ARGV[base + 13] == '1' then redis.call('HSET', k, 'limit_key', ARGV[base + 14]) end
    end
    if policy ~= 'cancel' or ndeps > 0 then redis.call('HSET', k, 'dependency_policy', policy) end
    -- Each dependency as it stands now: done resolves, cancelled or dead-lettered fails,
    -- queued or processing is pending (an edge makes its end find this row).
    local pending, failed, counted = NONE, nil, nil
    if ndeps > 0 then pending, counted = {}, {} end
    for d = base + DEPS, base + DEPS - 1 + ndeps do
      local dep = in_batch[ARGV[d]] or ARGV[d]
      local st = redis.call('HGET', job_key(dep), 'status')
      if counted[dep] then
        st = 'done'  -- named twice: one edge, counted once
      end
      counted[dep] = true
      if st == 'cancelled' then
        failed = failed or ('dependency ' .. dep .. ' was cancelled')
      elseif not st then
        failed = failed or ('dependency ' .. dep .. ' was dead-lettered')
      elseif st ~= 'done' then
        pending[#pending + 1] = dep
      end
    end
    if ndeps > 0 then redis.call('HSET', k, 'depends_on', ARGV[base + 15]) end
    redis.call('ZADD', P .. 'all', stamp, id)
    redis.call('ZADD', P .. 'q:' .. queue, stamp, id)
    redis.call('SADD', P .. 'queues', queue)
    if failed and policy == 'cancel' then
      transition(id, queue, stamp, nil, 'cancelled')
      redis.call('HSET', k, 'waiting_on', '0', 'last_error', failed)
    else
      if ARGV[base + 8] ~= '' then
        redis.call('HSET', k, 'dedup_key', ARGV[base + 8])
        redis.call('SET', P .. 'dedup:' .. ARGV[base + 8], id)
      end
      transition(id, queue, stamp, nil, status)
      if ndeps > 0 then redis.call('HSET', k, 'waiting_on', int(#pending)) end
      if #pending > 0 then
        for _, dep in ipairs(pending) do
          redis.call('SADD', P .. 'dependents:' .. dep, id)
          redis.call('HSET', job_key(dep), 'dependents', '1')
        end
      else
        schedule(id, queue, priority, scheduled_at, stamp, now)
        touched[queue] = true
      end
    end
  end
end
-- Woken for later rows too: waiters re-read the earliest scheduled time.
for queue in pairs(touched) do wake(queue) end
return stored
