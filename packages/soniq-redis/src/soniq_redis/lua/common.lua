-- Shared by every Soniq script (prepended to each). ARGV[1] is always the key
-- prefix. Every script reads the clock with TIME, so all timestamps come from
-- the server, and every status write goes through `transition`, which refuses a
-- status outside the four before the script has written anything for that row.

local P = ARGV[1]
local STATUSES = {queued = true, processing = true, done = true, cancelled = true}
local WORKER_STATUSES = {active = true, stopping = true, stopped = true}
-- A ready-set member is "<priority:16>:<scheduled_at:18>:<created_at:18>:<id>";
-- the id starts after the three fixed-width fields and their colons.
local MEMBER_ID_OFFSET = 16 + 1 + 18 + 1 + 18 + 1 + 1
local PRIORITY_OFFSET = 1000000000000000
local MAX_TIME = 999999999999999999

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Lua turns numbers into strings with 14 significant digits; microsecond
-- timestamps need 16, so every number written to Redis is formatted here.
local function int(n)
  return string.format('%d', n)
end

local function job_key(id) return P .. 'job:' .. id end
local function dead_key(id) return P .. 'dead:' .. id end
local function worker_key(id) return P .. 'worker:' .. id end
local function ready_key(queue) return P .. 'ready:' .. queue end
local function sched_key(queue) return P .. 'sched:' .. queue end
local function wproc_key(worker) return P .. 'wproc:' .. worker end

local function check_status(status)
  if not STATUSES[status] then
    error({err = 'SONIQ_STATUS refused to write job status "' .. tostring(status) ..
      '": the only statuses are queued, processing, done and cancelled'})
  end
end

local function check_worker_status(status)
  if not WORKER_STATUSES[status] then
    error({err = 'SONIQ_STATUS refused to write worker status "' .. tostring(status) ..
      '": the only worker statuses are active, stopping and stopped'})
  end
end

local function index_add(id, queue, status, created)
  redis.call('ZADD', P .. 'st:' .. status, created, id)
  redis.call('ZADD', P .. 'qs:' .. status .. ':' .. queue, created, id)
end

local function index_remove(id, queue, status)
  redis.call('ZREM', P .. 'st:' .. status, id)
  redis.call('ZREM', P .. 'qs:' .. status .. ':' .. queue, id)
end

-- The one place a job status is written.
local function transition(id, queue, created, old, new)
  check_status(new)
  redis.call('HSET', job_key(id), 'status', new)
  if old ~= new then
    if old then index_remove(id, queue, old) end
    index_add(id, queue, new, created)
  end
end

local function clamp(n)
  if n < 0 then return 0 end
  if n > MAX_TIME then return MAX_TIME end
  return n
end

local function ready_member(priority, scheduled_at, created_at, id)
  return string.format('%016d:%018d:%018d:', tonumber(priority) + PRIORITY_OFFSET,
    clamp(tonumber(scheduled_at)), clamp(tonumber(created_at))) .. id
end

-- Put a queued row where claim finds it: the ready set when due, else the
-- scheduled set (claim promotes it once due).
local function schedule(id, queue, priority, scheduled_at, created_at, now)
  if tonumber(scheduled_at) <= now then
    local member = ready_member(priority, scheduled_at, created_at, id)
    redis.call('ZADD', ready_key(queue), 0, member)
    redis.call('HSET', job_key(id), 'rk', member)
    return true
  end
  redis.call('ZADD', sched_key(queue), scheduled_at, id)
  redis.call('HDEL', job_key(id), 'rk')
  return false
end

local function unschedule(id, queue)
  local member = redis.call('HGET', job_key(id), 'rk')
  if member then redis.call('ZREM', ready_key(queue), member) end
  redis.call('ZREM', sched_key(queue), id)
  redis.call('HDEL', job_key(id), 'rk')
end

local function wake(queue)
  redis.call('PUBLISH', P .. 'new_job', queue)
end

-- A job hash as a flat HGETALL list less `logs` (JobLogStore), which no JobRecord holds:
-- the claims and the stale scan would otherwise ship a retried row's whole log for nothing.
local function job_row(k)
  local flat = redis.call('HGETALL', k)
  for i = 1, #flat, 2 do
    if flat[i] == 'logs' then
      table.remove(flat, i)
      table.remove(flat, i)
      break
    end
  end
  return flat
end

-- Fencing: a write about a claimed row applies only while its caller owns it.
local function owned(id, worker)
  local f = redis.call('HMGET', job_key(id), 'status', 'worker_id')
  return f[1] == 'processing' and f[2] == worker
end

-- Processing row -> queued at `scheduled_at`, owner cleared (retry, snooze, nack, recovery).
local function requeue(id, scheduled_at, now)
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'queue', 'created_at', 'status', 'worker_id', 'priority')
  transition(id, f[1], f[2], f[3], 'queued')
  redis.call('HSET', k, 'updated_at', int(now), 'scheduled_at', scheduled_at)
  redis.call('HDEL', k, 'worker_id', 'started_at')
  if f[4] then redis.call('SREM', wproc_key(f[4]), id) end
  schedule(id, f[1], f[5], scheduled_at, f[2], now)
  -- Woken even when not due yet: waiters re-read the earliest scheduled time.
  wake(f[1])
end

-- A dedup key is held only by a queued row: a claim, cancel or dead-letter lets it go.
local function release_dedup(id, key)
  if not key then return end
  if redis.call('GET', P .. 'dedup:' .. key) == id then redis.call('DEL', P .. 'dedup:' .. key) end
  redis.call('HDEL', job_key(id), 'dedup_key')
end

-- Protocol 4. A watched row (`watched` = '1', set by watch.lua) publishes its id on
-- the job-changes channel when it finishes; request_cancel.lua publishes always.
local function changed(id, watched)
  if watched == '1' then redis.call('PUBLISH', P .. 'job_changes', id) end
end

-- `dependents:<id>` holds the ids of rows that wait for row `id` (an edge per pending
-- dependency, written by enqueue.lua, which also sets the row's field `dependents` = '1',
-- passed here as `flag`). Called by every script that finishes a row, in
-- the same script: `how` nil means `id` is done (resolved); 'cancelled', 'dead-lettered'
-- or 'deleted' means it failed. A waiting dependent (queued, waiting_on > 0) counts one
-- down on resolved, or on failed under policy run, and at 0 is scheduled as an enqueue
-- would and its queue woken; under policy cancel it becomes cancelled, which fails its
-- own dependents in turn (iteratively, so no depth limit). Free for a row without
-- dependents (its flag was read with its other fields); edges of rows that left
-- meanwhile are skipped by the status check.
local function settle(id, how, now, flag)
  if flag ~= '1' then return end
  local work = {{id, how}}
  local woken = {}
  while #work > 0 do
    local item = table.remove(work)
    local children = redis.call('SMEMBERS', P .. 'dependents:' .. item[1])
    if #children > 0 then redis.call('DEL', P .. 'dependents:' .. item[1]) end
    for _, child in ipairs(children) do
      local ck = job_key(child)
      local f = redis.call('HMGET', ck, 'status', 'waiting_on', 'dependency_policy', 'queue',
        'created_at', 'priority', 'scheduled_at', 'watched', 'dedup_key', 'dependents')
      if f[1] == 'queued' and tonumber(f[2] or '0') > 0 then
        if item[2] == nil or f[3] == 'run' then
          if redis.call('HINCRBY', ck, 'waiting_on', -1) <= 0 then
            schedule(child, f[4], f[6], f[7], f[5], now)
            woken[f[4]] = true
          end
        else
          transition(child, f[4], f[5], 'queued', 'cancelled')
          redis.call('HSET', ck, 'waiting_on', '0', 'updated_at', int(now),
            'last_error', 'dependency ' .. item[1] .. ' was ' .. item[2])
          release_dedup(child, f[9])
          changed(child, f[8])
          if f[10] == '1' then work[#work + 1] = {child, 'cancelled'} end
        end
      end
    end
  end
  for queue in pairs(woken) do wake(queue) end
end

-- A queued row (waiting or not) -> cancelled, its dependents following (cancel_job,
-- request_cancel). `f` is {status, queue, created_at, watched, dedup_key, dependents} as read.
local function cancel_queued(id, f, now)
  unschedule(id, f[2])
  transition(id, f[2], f[3], f[1], 'cancelled')
  redis.call('HSET', job_key(id), 'updated_at', int(now))
  release_dedup(id, f[5])
  settle(id, 'cancelled', now, f[6])
  changed(id, f[4])
end

-- Delete the job row (and every index entry of it) and write its dead-letter row.
-- `error_text` false keeps the row's own `last_error`. Fails the row's dependents.
local function move_to_dead(id, error_text, reason, now)
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'job_name', 'args', 'queue', 'attempts', 'max_attempts',
    'priority', 'status', 'worker_id', 'last_error', 'watched', 'dedup_key', 'dependents', 'version',
    'logs')
  if not error_text then error_text = f[9] end
  local queue = f[3]
  unschedule(id, queue)
  release_dedup(id, f[11])
  if f[7] then index_remove(id, queue, f[7]) end
  if f[8] then redis.call('SREM', wproc_key(f[8]), id) end
  redis.call('ZREM', P .. 'all', id)
  redis.call('ZREM', P .. 'q:' .. queue, id)
  redis.call('DEL', k)
  local dk = dead_key(id)
  redis.call('DEL', dk)
  redis.call('HSET', dk, 'id', id, 'job_name', f[1], 'args', f[2], 'queue', queue,
    'attempts', f[4], 'max_attempts', f[5], 'priority', f[6],
    'dead_letter_reason', reason, 'moved_to_dead_letter_at', int(now), 'resurrection_count', '0')
  if error_text then redis.call('HSET', dk, 'last_error', error_text) end
  -- Kept (not shown in the dead-letter record) so that a replay runs the row's version again;
  -- its steps, checkpoint and progress are not carried: a replayed job starts afresh.
  if f[13] then redis.call('HSET', dk, 'version', f[13]) end
  -- The job's log stays readable (get_job_logs) on every path here; a replay does not copy it.
  if f[14] then redis.call('HSET', dk, 'logs', f[14]) end
  redis.call('ZADD', P .. 'dl', int(now), id)
  redis.call('ZADD', P .. 'dlq:' .. queue, int(now), id)
  settle(id, 'dead-lettered', now, f[12])
  changed(id, f[10])
end

-- The claim scripts (claim.lua, claim_limited.lua) --------------------------------

-- Move rows of `queues` that became due since the last claim to their ready sets.
local function promote_due(queues, now)
  local stamp = int(now)
  for _, queue in ipairs(queues) do
    local sk = sched_key(queue)
    local due = redis.call('ZRANGEBYSCORE', sk, '-inf', stamp)
    if #due > 0 then
      for _, id in ipairs(due) do
        local f = redis.call('HMGET', job_key(id), 'priority', 'scheduled_at', 'created_at', 'status')
        if f[4] == 'queued' then schedule(id, queue, f[1], f[2], f[3], now) end
      end
      redis.call('ZREMRANGEBYSCORE', sk, '-inf', stamp)
    end
  end
end

-- Byte order, as Redis sorts members; Lua's `<` would use the locale.
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Job names under a job-scope max_concurrent: `limited_jobs` maps each to the
-- time (microseconds) until which claims keep `pj:<name>`, the ids of its rows claimed
-- since; claim_limited.lua registers names, rebuilds the set from the processing rows
-- when it registers one anew, and drops ids no longer processing. Nil when none is live,
-- which costs a claim one HGETALL of a missing key.
local function tracked_names(now)
  local flat = redis.call('HGETALL', P .. 'limited_jobs')
  if #flat == 0 then return nil end
  local names = nil
  for i = 1, #flat, 2 do
    if tonumber(flat[i + 1]) > now then
      names = names or {}
      names[flat[i]] = true
    end
  end
  return names
end

-- Claim one queued row whose ready-set member was just removed; returns its hash (job_row).
-- `tracked` is what tracked_names returned.
local function take(id, target, worker, stamp, mark, tracked)
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'queue', 'created_at', 'dedup_key', 'job_name')
  if tracked and tracked[f[5]] then redis.call('SADD', P .. 'pj:' .. f[5], id) end
  transition(id, f[2], f[3], f[1], target)
  -- A claim releases the row's dedup key.
  if f[4] then
    if redis.call('GET', P .. 'dedup:' .. f[4]) == id then redis.call('DEL', P .. 'dedup:' .. f[4]) end
    redis.call('HDEL', k, 'dedup_key')
  end
  redis.call('HSET', k, 'worker_id', worker, 'updated_at', stamp)
  if mark then
    redis.call('HSET', k, 'started_at', stamp)
  else
    redis.call('HDEL', k, 'started_at')
  end
  redis.call('HDEL', k, 'rk')
  redis.call('SADD', wproc_key(worker), id)
  return job_row(k)
end

-- The arguments every claim script starts with: ARGV[2] the processing status, [3] the
-- worker id, [4] the limit, [5] mark_started ('1'/'0'), [6] the name count (-1 = any
-- name), then the job names; then the count of excluded (paused) queues and their names;
-- then the max-versions count m (0 = none), a shared maximum ('' = one per name) and
-- either m names (all under the shared maximum) or m name/maximum pairs. Returns them
-- and the ARGV position that follows them.
local function claim_arguments()
  local claim = {target = ARGV[2], worker = ARGV[3], limit = tonumber(ARGV[4]), mark = ARGV[5] == '1'}
  check_status(claim.target)
  local count = tonumber(ARGV[6])
  if count >= 0 then
    claim.names = {}
    for i = 7, 6 + count do claim.names[ARGV[i]] = true end
  end
  local pos = 7 + math.max(count, 0)
  local excluded = tonumber(ARGV[pos])
  if excluded > 0 then
    claim.excluded = {}
    for i = pos + 1, pos + excluded do claim.excluded[ARGV[i]] = true end
  end
  pos = pos + 1 + excluded
  local versioned, shared = tonumber(ARGV[pos]), ARGV[pos + 1]
  pos = pos + 2
  if versioned > 0 then
    claim.versions = {}
    if shared ~= '' then
      local max = tonumber(shared)
      for i = pos, pos + versioned - 1 do claim.versions[ARGV[i]] = max end
      pos = pos + versioned
    else
      for i = pos, pos + 2 * versioned - 1, 2 do claim.versions[ARGV[i]] = tonumber(ARGV[i + 1]) end
      pos = pos + 2 * versioned
    end
  end
  return claim, pos
end

-- Whether a claim passes over a queued row of `job_name` stored at `version` (nil: 1):
-- a name the claim does not run, or a version newer than the claim's maximum for it.
local function passed_over(claim, job_name, version)
  if claim.names ~= nil and not claim.names[job_name] then return true end
  if claim.versions ~= nil then
    local max = claim.versions[job_name]
    if max ~= nil and tonumber(version or '1') > max then return true end
  end
  return false
end

-- The queues a claim reads, from ARGV[pos] on: '1' means every queue, '0' the names after
-- it; less the claim's excluded (paused) queues, whose rows are neither claimed nor promoted.
local function claim_queues(pos, excluded)
  local queues = {}
  if ARGV[pos] == '1' then
    queues = redis.call('SMEMBERS', P .. 'queues')
  else
    for i = pos + 1, #ARGV do queues[#queues + 1] = ARGV[i] end
  end
  if excluded == nil then return queues end
  local kept = {}
  for _, queue in ipairs(queues) do
    if not excluded[queue] then kept[#kept + 1] = queue end
  end
  return kept
end
