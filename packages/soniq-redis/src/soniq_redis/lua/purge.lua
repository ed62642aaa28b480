-- ARGV: prefix, job_id.
local id = ARGV[2]
local queue = redis.call('HGET', dead_key(id), 'queue')
if not queue then return 0 end
redis.call('DEL', dead_key(id))
redis.call('ZREM', P .. 'dl', id)
redis.call('ZREM', P .. 'dlq:' .. queue, id)
return 1
