-- Replace a processing row's logs (the whole JSON text, trimmed by core), fenced on the
-- row's owner. move_to_dead carries them to the dead-letter hash.
-- ARGV: prefix, job_id, worker_id, the logs as JSON text.
local id, worker = ARGV[2], ARGV[3]
if not owned(id, worker) then return 0 end
redis.call('HSET', job_key(id), 'logs', ARGV[4])
return 1
