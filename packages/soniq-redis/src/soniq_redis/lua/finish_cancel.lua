-- The handler of a row whose cancel was requested has stopped. Fenced.
-- ARGV: prefix, cancelled-status, job_id, worker_id, message. The row becomes cancelled
-- with last_error = message (attempts untouched, cancel_requested kept), its dependents
-- fail, and a watched row publishes its id. Returns 1 when written, 0 otherwise.
local target, id, worker = ARGV[2], ARGV[3], ARGV[4]
check_status(target)
local k = job_key(id)
local f = redis.call('HMGET', k, 'status', 'worker_id', 'queue', 'created_at', 'watched', 'dependents')
if f[1] ~= 'processing' or f[2] ~= worker then return 0 end
local now = now_us()
transition(id, f[3], f[4], f[1], target)
redis.call('HSET', k, 'last_error', ARGV[5], 'updated_at', int(now))
redis.call('HDEL', k, 'worker_id')
redis.call('SREM', wproc_key(worker), id)
settle(id, 'cancelled', now, f[6])
changed(id, f[5])
return 1
