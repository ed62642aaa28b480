-- Move up to `limit` due queued rows to processing, in priority, scheduled_at,
-- created_at, id order across the requested queues.
-- ARGV: prefix, processing-status, worker_id, limit, mark_started ('1'/'0'),
-- every-queue ('1'/'0'), queue names...
local target = ARGV[2]
check_status(target)
local worker, limit, mark = ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
local queues
if ARGV[6] == '1' then
  queues = redis.call('SMEMBERS', P .. 'queues')
else
  queues = {}
  for i = 7, #ARGV do queues[#queues + 1] = ARGV[i] end
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

local heads = {}
for i, queue in ipairs(queues) do
  heads[i] = redis.call('ZRANGE', ready_key(queue), 0, 0)[1]
end
local claimed = {}
while #claimed < limit do
  local best = nil
  for i = 1, #queues do
    if heads[i] and (best == nil or before(heads[i], heads[best])) then best = i end
  end
  if best == nil then break end
  local member = heads[best]
  local rk = ready_key(queues[best])
  redis.call('ZREM', rk, member)
  heads[best] = redis.call('ZRANGE', rk, 0, 0)[1]
  local id = string.sub(member, MEMBER_ID_OFFSET)
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'queue', 'created_at', 'rk')
  -- Skip a member left behind by a row that has since moved on.
  if f[1] == 'queued' and f[4] == member then
    transition(id, f[2], f[3], f[1], target)
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
end
return claimed
