-- Store a processing row's progress (JSON text, built and checked by core), fenced on
-- the row's owner. Nothing else clears it; the dead-letter hash does not carry it.
-- ARGV: prefix, job_id, worker_id, the progress as JSON text.
local id, worker = ARGV[2], ARGV[3]
if not owned(id, worker) then return 0 end
redis.call('HSET', job_key(id), 'progress', ARGV[4])
return 1
