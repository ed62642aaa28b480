-- Take a free or expired lease, or renew one the caller holds, on the server's clock.
-- ARGV: prefix, name, holder, ttl (microseconds). Returns the lease hash, or false (nil).
local k = P .. 'lease:' .. ARGV[2]
local now = now_us()
local held = redis.call('HMGET', k, 'holder', 'expires_at', 'acquired_at')
local live = held[1] and tonumber(held[2]) > now
if live and held[1] ~= ARGV[3] then return false end
local acquired = int(now)
if live then acquired = held[3] end
redis.call('HSET', k, 'name', ARGV[2], 'holder', ARGV[3], 'acquired_at', acquired,
  'renewed_at', int(now), 'expires_at', int(now + tonumber(ARGV[4])))
return redis.call('HGETALL', k)
