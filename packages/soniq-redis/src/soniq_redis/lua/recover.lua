-- One stale-worker sweep. The script is atomic, so sweeps serialise by
-- construction and never need to report one as skipped.
-- ARGV: prefix, heartbeat_timeout (microseconds), policy ('requeue' | 'dead_letter').
local timeout, policy = tonumber(ARGV[2]), ARGV[3]
local now = now_us()
local cutoff = now - timeout
local seconds = string.format('%g', timeout / 1000000)

local stale, stale_list = {}, {}
for _, wid in ipairs(redis.call('SMEMBERS', P .. 'workers')) do
  local f = redis.call('HMGET', worker_key(wid), 'status', 'last_heartbeat')
  if (f[1] == 'active' or f[1] == 'stopping') and tonumber(f[2]) < cutoff then
    check_worker_status('stopped')
    redis.call('HSET', worker_key(wid), 'status', 'stopped')
    stale[wid] = true
    stale_list[#stale_list + 1] = wid
  end
end

-- Is the owner of a processing row gone? Live workers' rows are never touched.
local function lost(worker, updated_at)
  if worker == false or worker == nil then return tonumber(updated_at) < cutoff end
  if stale[worker] then return true end
  local w = redis.call('HMGET', worker_key(worker), 'status', 'last_heartbeat')
  if not w[1] then return tonumber(updated_at) < cutoff end
  -- A worker that is already stopped runs nothing.
  return w[1] == 'stopped' and tonumber(w[2]) < cutoff
end

local requeued, dead = {}, {}
for _, id in ipairs(redis.call('ZRANGE', P .. 'st:processing', 0, -1)) do
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'worker_id', 'updated_at', 'started_at', 'attempts', 'max_attempts')
  if lost(f[1], f[2]) then
    local message = 'worker ' .. tostring(f[1] or '?') .. ' was lost (no heartbeat for ' .. seconds .. 's)'
    if not f[3] then
      -- The handler never ran: hand the row back exactly as a nack would.
      requeue(id, int(now), now)
      requeued[#requeued + 1] = id
    else
      local attempts = tonumber(f[4]) + 1
      redis.call('HSET', k, 'attempts', int(attempts))
      if policy == 'dead_letter' then
        move_to_dead(id, message, 'zombie', now)
        dead[#dead + 1] = id
      elseif attempts >= tonumber(f[5]) then
        move_to_dead(id, message, 'worker_lost', now)
        dead[#dead + 1] = id
      else
        redis.call('HSET', k, 'last_error', message)
        requeue(id, int(now), now)
        requeued[#requeued + 1] = id
      end
    end
  end
end
return {stale_list, requeued, dead}
