-- ARGV: prefix, name. The unexpired lease's hash, or false (nil) when it is free.
local k = P .. 'lease:' .. ARGV[2]
local expires = redis.call('HGET', k, 'expires_at')
if not expires or tonumber(expires) <= now_us() then return false end
return redis.call('HGETALL', k)
