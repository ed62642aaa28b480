-- Store a processing row's checkpoint (JSON text), fenced on the row's owner.
-- ARGV: prefix, job_id, worker_id, the value as JSON text.
local id, worker = ARGV[2], ARGV[3]
if not owned(id, worker) then return 0 end
redis.call('HSET', job_key(id), 'checkpoint', ARGV[4])
return 1
