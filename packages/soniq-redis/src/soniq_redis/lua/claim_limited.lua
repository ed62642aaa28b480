-- The claim with fleet-wide limits: as claim.lua, but a row is taken only
-- while every limit that matches it has room, and a row held back is passed over (it
-- keeps its place, unwritten) so that rows of other groups behind it are still claimed.
-- One script, so the check and the claim are atomic against every other claim.
-- ARGV: prefix, processing-status, worker_id, limit, mark_started ('1'/'0'),
-- name count (-1 = any name), job names..., excluded queues and max versions (see
-- claim_arguments in common.lua), limit count, then per limit: scope
-- ('queue' | 'job'), name, max_concurrent ('' = none), rate_limit ('' = none),
-- rate period (microseconds), partitioned ('1'/'0'); then every-queue ('1'/'0'), queue names...
--
-- Concurrency is counted from the real rows, whoever claimed them: a whole queue's group
-- is the size of `qs:processing:<queue>`; a partitioned queue's is counted by reading each
-- row of that index once per call. A job name's group reads `pj:<name>`, the ids of its
-- rows claimed (by any claim) since the name was registered in `limited_jobs` (see
-- tracked_names in common.lua): registering anew rebuilds it from `st:processing`, and
-- each read drops the ids no longer processing, so no other script has to remove them.
-- Every count is read once per call, and only when a candidate needs it.
-- Rate: `lrate:<group>:<period>:<window>` counts the claims of one fixed window of the
-- server's clock (TIME), aligned to the epoch, and expires after it. Work is bounded:
-- at most STEP_BUDGET ready-set members are looked at per call.
local STEP_BUDGET = 1000
local claim, lpos = claim_arguments()
local target, worker, limit, mark, names = claim.target, claim.worker, claim.limit, claim.mark, claim.names
local limits = {}
for j = 1, tonumber(ARGV[lpos]) do
  local b = lpos + 1 + (j - 1) * 6
  limits[j] = {
    by_queue = ARGV[b] == 'queue',
    name = ARGV[b + 1],
    max = tonumber(ARGV[b + 2]),
    rate = tonumber(ARGV[b + 3]),
    period = tonumber(ARGV[b + 4]),
    partitioned = ARGV[b + 5] == '1',
  }
  -- The index whose rows a full read counts (a whole queue's count is one ZCARD).
  if limits[j].by_queue then
    limits[j].source = P .. 'qs:processing:' .. limits[j].name
  else
    limits[j].source = P .. 'pj:' .. limits[j].name
  end
end
local queues = claim_queues(lpos + 1 + #limits * 6, claim.excluded)
local versions = claim.versions
local now = now_us()
local stamp = int(now)

promote_due(queues, now)

-- Register (or keep registered) every job name under a max_concurrent, rebuilding its
-- `pj:<name>` set from the processing rows when the registration is new or lapsed.
local TRACK_US = 600 * 1000000
for _, lim in ipairs(limits) do
  if lim.max and not lim.by_queue then
    local registered = tonumber(redis.call('HGET', P .. 'limited_jobs', lim.name) or '0')
    if registered <= now then
      redis.call('DEL', lim.source)
      for _, id in ipairs(redis.call('ZRANGE', P .. 'st:processing', 0, -1)) do
        local f = redis.call('HMGET', job_key(id), 'status', 'job_name')
        if f[1] == 'processing' and f[2] == lim.name then redis.call('SADD', lim.source, id) end
      end
    end
    redis.call('HSET', P .. 'limited_jobs', lim.name, int(now + TRACK_US))
    redis.call('PEXPIRE', lim.source, int(2 * TRACK_US / 1000))
  end
end
local tracked = tracked_names(now)

-- A group's text: scope, the name's length and the name (so names may hold any byte),
-- then, for a partitioned limit, '=' and the row's limit_key or '-' for none.
local function group_of(lim, limit_key)
  local gid = (lim.by_queue and 'queue:' or 'job:') .. #lim.name .. ':' .. lim.name
  if not lim.partitioned then return gid .. '|*' end
  if limit_key then return gid .. '|=' .. limit_key end
  return gid .. '|-'
end

-- Processing rows per (limit, group), from one read of each index a limit needs.
local counted = {}
local scanned = {}
local function count_rows(source, by_queue)
  if scanned[source] then return end
  scanned[source] = true
  local ids
  if by_queue then ids = redis.call('ZRANGE', source, 0, -1) else ids = redis.call('SMEMBERS', source) end
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', job_key(id), 'status', 'queue', 'job_name', 'limit_key')
    if f[1] ~= 'processing' and not by_queue then
      redis.call('SREM', source, id)
    elseif f[1] == 'processing' then
      for j, lim in ipairs(limits) do
        local value = f[3]
        if lim.by_queue then value = f[2] end
        if lim.max and lim.source == source and value == lim.name then
          local sk = j .. '#' .. group_of(lim, f[4])
          counted[sk] = (counted[sk] or 0) + 1
        end
      end
    end
  end
end

-- One state per (limit, group) met in this call: running and started counts, kept
-- up to date by this call's own claims.
local states = {}
local function state_of(j, lim, gid)
  local sk = j .. '#' .. gid
  local s = states[sk]
  if s then return s end
  s = {running = 0, started = 0}
  if lim.max then
    if lim.by_queue and not lim.partitioned then
      s.running = redis.call('ZCARD', lim.source)
    else
      count_rows(lim.source, lim.by_queue)
      s.running = counted[sk] or 0
    end
  end
  if lim.rate then
    local window = math.floor(now / lim.period)
    s.rate_key = P .. 'lrate:' .. gid .. ':' .. int(lim.period) .. ':' .. int(window)
    s.started = tonumber(redis.call('GET', s.rate_key) or '0')
    -- Kept a second past the window's end; a later window has a key of its own.
    s.rate_ttl = math.ceil(((window + 1) * lim.period - now) / 1000) + 1000
  end
  states[sk] = s
  return s
end

-- The states a row counts against, or nil and the first limit that holds it back.
local function admit(queue, job_name, limit_key)
  local hit = {}
  for j, lim in ipairs(limits) do
    local value = job_name
    if lim.by_queue then value = queue end
    if value == lim.name then
      local s = state_of(j, lim, group_of(lim, limit_key))
      if (lim.max and s.running >= lim.max) or (lim.rate and s.started >= lim.rate) then
        return nil, lim
      end
      hit[#hit + 1] = s
    end
  end
  return hit, nil
end

local steps = 0
local offset = {}
-- The first member of queue i at or after its offset that may be claimed by name,
-- with its row's fields; members left behind by rows that moved on are removed.
local function head(i)
  local rk = ready_key(queues[i])
  while steps < STEP_BUDGET do
    steps = steps + 1
    local member = redis.call('ZRANGE', rk, offset[i], offset[i])[1]
    if member == nil then return nil end
    local id = string.sub(member, MEMBER_ID_OFFSET)
    local f
    if versions == nil then
      f = redis.call('HMGET', job_key(id), 'status', 'rk', 'job_name', 'limit_key')
    else
      f = redis.call('HMGET', job_key(id), 'status', 'rk', 'job_name', 'limit_key', 'version')
    end
    if f[1] ~= 'queued' or f[2] ~= member then
      redis.call('ZREM', rk, member)
    elseif (names ~= nil or versions ~= nil) and passed_over(claim, f[3], f[5]) then
      offset[i] = offset[i] + 1
    else
      return {member, f[3], f[4]}
    end
  end
  return nil
end

local heads = {}
for i = 1, #queues do
  offset[i] = 0
  heads[i] = head(i)
end
local claimed = {}
while #claimed < limit do
  local best = nil
  for i = 1, #queues do
    if heads[i] and (best == nil or before(heads[i][1], heads[best][1])) then best = i end
  end
  if best == nil then break end
  local member, job_name, limit_key = heads[best][1], heads[best][2], heads[best][3]
  local hit, full = admit(queues[best], job_name, limit_key)
  if hit then
    redis.call('ZREM', ready_key(queues[best]), member)
    for _, s in ipairs(hit) do
      s.running = s.running + 1
      if s.rate_key then
        redis.call('INCR', s.rate_key)
        redis.call('PEXPIRE', s.rate_key, s.rate_ttl)
        s.started = s.started + 1
      end
    end
    claimed[#claimed + 1] = take(string.sub(member, MEMBER_ID_OFFSET), target, worker, stamp, mark, tracked)
    heads[best] = head(best)
  elseif full.by_queue and not full.partitioned then
    -- The whole queue is one full group: nothing behind this row can be taken either.
    heads[best] = nil
  else
    offset[best] = offset[best] + 1
    heads[best] = head(best)
  end
end
return claimed
