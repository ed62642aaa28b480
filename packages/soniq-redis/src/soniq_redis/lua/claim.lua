-- Move up to `limit` due queued rows to processing, in priority, scheduled_at,
-- created_at, id order across the requested queues; with job names, only rows
-- of those names (the others keep their place and are not written at all).
-- ARGV: prefix, processing-status, worker_id, limit, mark_started ('1'/'0'),
-- name count (-1 = any name), job names..., every-queue ('1'/'0'), queue names...
local target = ARGV[2]
check_status(target)
local worker, limit, mark = ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
local name_count = tonumber(ARGV[6])
local names = nil
if name_count >= 0 then
  names = {}
  for i = 7, 6 + name_count do names[ARGV[i]] = true end
end
local qpos = 7 + math.max(name_count, 0)
local queues
if ARGV[qpos] == '1' then
  queues = redis.call('SMEMBERS', P .. 'queues')
else
  queues = {}
  for i = qpos + 1, #ARGV do queues[#queues + 1] = ARGV[i] end
end
local now = now_us()
local stamp = int(now)

-- Promote rows that became due since the last claim.
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

-- Byte order, as Redis sorts members; Lua's `<` would use the locale.
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Members of rows of other names stay in the ready set; `skipped[i]` counts
-- those in front of queue i's head, so the head is read past them.
local skipped = {}
local function head(i)
  local rk = ready_key(queues[i])
  while true do
    local member = redis.call('ZRANGE', rk, skipped[i], skipped[i])[1]
    if member == nil then return nil end
    local id = string.sub(member, MEMBER_ID_OFFSET)
    local f = redis.call('HMGET', job_key(id), 'status', 'rk', 'job_name')
    if f[1] ~= 'queued' or f[2] ~= member then
      -- A member left behind by a row that has since moved on.
      redis.call('ZREM', rk, member)
    elseif names ~= nil and not names[f[3]] then
      skipped[i] = skipped[i] + 1
    else
      return member
    end
  end
end

local heads = {}
for i = 1, #queues do
  skipped[i] = 0
  heads[i] = head(i)
end
local claimed = {}
while #claimed < limit do
  local best = nil
  for i = 1, #queues do
    if heads[i] and (best == nil or before(heads[i], heads[best])) then best = i end
  end
  if best == nil then break end
  local member = heads[best]
  redis.call('ZREM', ready_key(queues[best]), member)
  heads[best] = head(best)
  local id = string.sub(member, MEMBER_ID_OFFSET)
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'queue', 'created_at', 'dedup_key')
  transition(id, f[2], f[3], f[1], target)
  -- A claim releases the row's dedup key (issue 12).
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
  claimed[#claimed + 1] = redis.call('HGETALL', k)
end
return claimed
