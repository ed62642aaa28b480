-- Retry, snooze and nack: a claimed row goes back to queued. Fenced.
-- ARGV: prefix, mode ('retry' | 'snooze' | 'nack'), job_id, worker_id,
-- scheduled_at (nack: '1' when the handler had started, which adds one to shutdown_nacks,
-- else ''; nack schedules at now), error (retry only). Steps, checkpoint, progress and
-- logs are kept.
local mode, id, worker = ARGV[2], ARGV[3], ARGV[4]
if not owned(id, worker) then return 0 end
local now = now_us()
local k = job_key(id)
if mode == 'retry' then
  redis.call('HINCRBY', k, 'attempts', 1)
  redis.call('HSET', k, 'last_error', ARGV[6])
  requeue(id, ARGV[5], now)
elseif mode == 'snooze' then
  requeue(id, ARGV[5], now)
elseif mode == 'nack' then
  -- The seed's field set: status, worker_id, updated_at, scheduled_at = now.
  if ARGV[5] == '1' then redis.call('HINCRBY', k, 'shutdown_nacks', 1) end
  requeue(id, int(now), now)
else
  error({err = 'SONIQ_MODE unknown requeue mode'})
end
return 1
