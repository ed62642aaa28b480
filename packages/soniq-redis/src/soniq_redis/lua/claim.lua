-- Move up to `limit` due queued rows to processing, in priority, scheduled_at,
-- created_at, id order across the requested queues; with job names, only rows
-- of those names (the others keep their place and are not written at all).
-- ARGV: prefix, processing-status, worker_id, limit, mark_started ('1'/'0'),
-- name count (-1 = any name), job names..., excluded queues and max versions (see
-- claim_arguments in common.lua), every-queue ('1'/'0'), queue names...
-- Rows of excluded queues are not read; rows above the claim's version for their name
-- are passed over like rows of other names. Neither given: the same commands as without.
local claim, qpos = claim_arguments()
local target, worker, limit, mark, names = claim.target, claim.worker, claim.limit, claim.mark, claim.names
local versions = claim.versions
local queues = claim_queues(qpos, claim.excluded)
local now = now_us()
local stamp = int(now)

promote_due(queues, now)
local tracked = false

-- Members of rows of other names stay in the ready set; `skipped[i]` counts
-- those in front of queue i's head, so the head is read past them.
local skipped = {}
local function head(i)
  local rk = ready_key(queues[i])
  while true do
    local member = redis.call('ZRANGE', rk, skipped[i], skipped[i])[1]
    if member == nil then return nil end
    local id = string.sub(member, MEMBER_ID_OFFSET)
    local f
    if versions == nil then
      f = redis.call('HMGET', job_key(id), 'status', 'rk', 'job_name')
    else
      f = redis.call('HMGET', job_key(id), 'status', 'rk', 'job_name', 'version')
    end
    if f[1] ~= 'queued' or f[2] ~= member then
      -- A member left behind by a row that has since moved on.
      redis.call('ZREM', rk, member)
    elseif (names ~= nil or versions ~= nil) and passed_over(claim, f[3], f[4]) then
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
  if tracked == false then tracked = tracked_names(now) end
  claimed[#claimed + 1] = take(string.sub(member, MEMBER_ID_OFFSET), target, worker, stamp, mark, tracked)
end
return claimed
