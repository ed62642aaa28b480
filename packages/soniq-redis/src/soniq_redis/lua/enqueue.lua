-- Insert a batch of jobs, all or none.
-- ARGV: prefix, queued-status, count, then per job: id, job_name, args, queue, priority,
-- scheduled_at, max_attempts, trace_context ('' = none), dedup_key ('' = none),
-- producer_id ('' = none), version, then the count e of extras that follow: 0 for a job with
-- none of them (policy cancel, no limit key, no dependencies, no debounce, no window), else
-- dependency_policy, has-limit-key ('1'/'0'), limit_key, depends_on as JSON,
-- debounce_deadline ('' = none), has-window ('1'/'0'), window key, window starts_at,
-- window expires_at (microseconds, the producer's clock), the window's PEXPIREAT time in
-- milliseconds, and the e - 10 dependency ids.
-- A job whose dedup_key is held by a queued row (P .. 'dedup:' .. key names it) is not
-- written; the reply lists the stored id of every job in order (the holder's for those).
-- DebouncedJobs: when both that job and the holder carry a debounce_deadline, the holder
-- takes the job's args and scheduled_at = min(job's scheduled_at, holder's deadline), is
-- re-filed where claims look for it (ready or scheduled set) and its queue woken.
-- UniqueWindows: P .. 'window:' .. key is a hash {id, expires_at} that expires (PEXPIREAT)
-- at the window's end. A window job whose key holds expires_at > its starts_at is not
-- written (the reply has the hash's id, whatever became of that row); else the job is
-- written and the hash set to it. Nothing but the expiry releases a window.
-- Dependencies: each must be a job row, a dead-letter row or a job earlier in
-- the batch, else SONIQ_UNKNOWN_DEPENDENCY with the missing ids as JSON and nothing written.
local status = ARGV[2]
check_status(status)
local count = tonumber(ARGV[3])
-- A job's first dependency id is at base + DEPS. NONE is never written to.
local EXTRAS = 10
local DEPS = 12 + EXTRAS
local NONE = {}
local bases, ndeps_at = {}, {}
local pos = 4
for i = 1, count do
  local extra = tonumber(ARGV[pos + 11])
  bases[i] = pos
  ndeps_at[i] = math.max(extra - EXTRAS, 0)
  pos = pos + 12 + extra
end
-- A job's debounce deadline and window key, nil for none.
local function debounce_of(base)
  if ARGV[base + 11] == '0' or ARGV[base + 16] == '' then return nil end
  return ARGV[base + 16]
end
local function window_of(base)
  if ARGV[base + 11] == '0' or ARGV[base + 17] ~= '1' then return nil end
  return ARGV[base + 18]
end
local function window_key(key) return P .. 'window:' .. key end
-- The id whose window holds `key` at `starts_at` (microseconds), or nil.
local function window_holder(key, starts_at)
  local f = redis.call('HMGET', window_key(key), 'id', 'expires_at')
  if f[1] and f[2] and tonumber(f[2]) > tonumber(starts_at) then return f[1] end
  return nil
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
local windows_in_batch = {}
-- Debounced holders to move, as {holder id, index of the job whose args and time it takes}.
local moves = {}
-- A job's id as given -> its stored id, for jobs later in the batch that depend on it.
local in_batch = {}
local missing, missing_seen = {}, {}
for i = 1, count do
  local base = bases[i]
  local id, key = ARGV[base], ARGV[base + 8]
  local window = window_of(base)
  local holder = nil
  if window then
    holder = windows_in_batch[window] or window_holder(window, ARGV[base + 19])
  end
  if not holder and key ~= '' then
    holder = keys_in_batch[key]
    if not holder then
      holder = holder_of(key)
      if holder and debounce_of(base)
          and redis.call('HEXISTS', job_key(holder), 'debounce_deadline') == 1 then
        moves[#moves + 1] = {holder, i}
      end
    end
  end
  if holder then
    stored[i] = holder
  else
    if in_batch[id] or redis.call('EXISTS', job_key(id)) == 1 then
      error({err = 'SONIQ_DUPLICATE a job id in this batch already exists'})
    end
    stored[i] = id
    if key ~= '' then keys_in_batch[key] = id end
    if window then windows_in_batch[window] = id end
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
    local deadline = debounce_of(base)
    if deadline then redis.call('HSET', k, 'debounce_deadline', deadline) end
    local window = window_of(base)
    if window then
      local wk = window_key(window)
      -- Replaces an expired window's fields and expiry.
      redis.call('HSET', wk, 'id', id, 'expires_at', ARGV[base + 20])
      redis.call('PEXPIREAT', wk, ARGV[base + 21])
    end
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
-- Debounced holders: the last args, a start never past the holder's deadline, re-filed.
for _, move in ipairs(moves) do
  local id, base = move[1], bases[move[2]]
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'queue', 'priority', 'created_at', 'debounce_deadline', 'waiting_on')
  local scheduled_at = ARGV[base + 5]
  if tonumber(f[4]) < tonumber(scheduled_at) then scheduled_at = f[4] end
  redis.call('HSET', k, 'args', ARGV[base + 2], 'scheduled_at', scheduled_at, 'updated_at', stamp)
  -- A row still waiting on dependencies is in neither set; its last one files it.
  if tonumber(f[5] or '0') <= 0 then
    unschedule(id, f[1])
    schedule(id, f[1], f[2], scheduled_at, f[3], now)
    touched[f[1]] = true
  end
end
-- Woken for later rows too: waiters re-read the earliest scheduled time.
for queue in pairs(touched) do wake(queue) end
return stored
