-- The second half of a stale-worker sweep: store core's decisions exactly as
-- given, each fenced on the row as find_stale.lua read it, and release the
-- sweep lock this sweeper holds.
-- ARGV: prefix, sweeper token, count, then per rescue: job_id, expected worker_id
-- ('' = none), expected updated_at, action ('release' | 'requeue' | 'dead_letter'),
-- attempts, has-error ('1'/'0'), error, reason. Returns the ids actually written.
local token, count = ARGV[2], tonumber(ARGV[3])
local width = 8
local ACTIONS = {release = true, requeue = true, dead_letter = true}
-- Every check runs before the first write: Redis does not roll a script back.
check_status('queued')
for i = 0, count - 1 do
  local action = ARGV[4 + i * width + 3]
  if not ACTIONS[action] then
    error({err = 'SONIQ_MODE unknown rescue action "' .. tostring(action) .. '"'})
  end
end
local now = now_us()
local written = {}
for i = 0, count - 1 do
  local base = 4 + i * width
  local id, worker, updated, action = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'worker_id', 'updated_at')
  if f[1] == 'processing' and (f[2] or '') == worker and f[3] == updated then
    redis.call('HSET', k, 'attempts', ARGV[base + 4])
    if ARGV[base + 5] == '1' then redis.call('HSET', k, 'last_error', ARGV[base + 6]) end
    if action == 'dead_letter' then
      move_to_dead(id, false, ARGV[base + 7], now)
    else
      -- Release and requeue write the same fields; they differ only in what core gave.
      requeue(id, int(now), now)
    end
    written[#written + 1] = id
  end
end
if redis.call('GET', P .. 'sweep_lock') == token then redis.call('DEL', P .. 'sweep_lock') end
return written
