-- Dead-letter, as unknown_job, every queued row older than the cutoff whose
-- job name no live worker registered. Core decided that; this only stores it.
-- ARGV: prefix, older_than (microseconds), error text, dead-letter reason, known names...
local older_than, error_text, reason = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local known = {}
for i = 5, #ARGV do known[ARGV[i]] = true end
local now = now_us()
-- `st:queued` is scored by created_at, so the old rows are one range.
local candidates = redis.call('ZRANGEBYSCORE', P .. 'st:queued', '-inf', int(now - older_than))
local moved = {}
for _, id in ipairs(candidates) do
  local f = redis.call('HMGET', job_key(id), 'status', 'job_name')
  if f[1] == 'queued' and not known[f[2]] then
    move_to_dead(id, error_text, reason, now)
    moved[#moved + 1] = id
  end
end
return moved
