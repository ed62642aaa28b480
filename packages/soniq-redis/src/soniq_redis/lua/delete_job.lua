-- Delete one job row, whatever its status, with every index entry of it.
-- A row deleted before it was done fails its dependents; a watched one publishes.
-- ARGV: prefix, job_id. Returns 1 when a row went, 0 when there was none.
local id = ARGV[2]
local k = job_key(id)
local f = redis.call('HMGET', k, 'status', 'queue', 'worker_id', 'dedup_key', 'watched', 'dependents')
if not f[1] then return 0 end
unschedule(id, f[2])
index_remove(id, f[2], f[1])
redis.call('ZREM', P .. 'all', id)
redis.call('ZREM', P .. 'q:' .. f[2], id)
redis.call('ZREM', P .. 'exp', id)
if f[3] then redis.call('SREM', wproc_key(f[3]), id) end
if f[4] and redis.call('GET', P .. 'dedup:' .. f[4]) == id then redis.call('DEL', P .. 'dedup:' .. f[4]) end
redis.call('DEL', k)
if f[1] ~= 'done' then settle(id, 'deleted', now_us(), f[6]) end
changed(id, f[5])
return 1
