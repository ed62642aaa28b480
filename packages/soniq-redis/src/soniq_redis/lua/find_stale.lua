-- The first half of a stale-worker sweep: mark stale workers stopped and return,
-- as read, the processing rows left by them or by owners already gone. Decides
-- nothing and writes no job row; core decides, and rescue.lua stores that.
-- ARGV: prefix, heartbeat_timeout (microseconds), sweeper token, lock lifetime (ms).
-- Returns {1, stale worker ids, rows as job_row lists}, or {0} when another
-- sweeper holds the lock.
local timeout, token, ttl = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
-- One script is atomic anyway; the lock is there to cover the gap until the
-- rescue script, so a second sweeper does not read and decide the same rows.
local lock = P .. 'sweep_lock'
local holder = redis.call('GET', lock)
if holder and holder ~= token then return {0} end

local now = now_us()
local cutoff = now - timeout

local stale, stale_list = {}, {}
for _, wid in ipairs(redis.call('SMEMBERS', P .. 'workers')) do
  local f = redis.call('HMGET', worker_key(wid), 'status', 'last_heartbeat')
  if not f[1] then
    redis.call('SREM', P .. 'workers', wid)
  elseif (f[1] == 'active' or f[1] == 'stopping') and tonumber(f[2]) < cutoff then
    check_worker_status('stopped')
    redis.call('HSET', worker_key(wid), 'status', 'stopped')
    stale[wid] = true
    stale_list[#stale_list + 1] = wid
  end
end

-- An id whose hash is gone names no row: drop it from every index it may sit in.
local function drop_dangling(id)
  redis.call('ZREM', P .. 'st:processing', id)
  redis.call('ZREM', P .. 'all', id)
  for _, queue in ipairs(redis.call('SMEMBERS', P .. 'queues')) do
    redis.call('ZREM', P .. 'qs:processing:' .. queue, id)
    redis.call('ZREM', P .. 'q:' .. queue, id)
  end
end

-- A live owner's rows are never returned. A missing or stopped owner runs
-- nothing, so its rows are judged by their own updated_at, not its heartbeat.
local function orphaned(worker, updated_at)
  if worker and stale[worker] then return true end
  if worker then
    local status = redis.call('HGET', worker_key(worker), 'status')
    if status and status ~= 'stopped' then return false end
  end
  return tonumber(updated_at) < cutoff
end

local rows = {}
for _, id in ipairs(redis.call('ZRANGE', P .. 'st:processing', 0, -1)) do
  local f = redis.call('HMGET', job_key(id), 'status', 'worker_id', 'updated_at')
  if not f[1] then
    drop_dangling(id)
  elseif f[1] == 'processing' and orphaned(f[2], f[3]) then
    rows[#rows + 1] = job_row(job_key(id))
  end
end

if #rows > 0 then
  redis.call('SET', lock, token, 'PX', ttl)
elseif holder then
  redis.call('DEL', lock)
end
return {1, stale_list, rows}
