-- Delete at most `limit` done or cancelled rows whose expires_at <= now, oldest expiry first.
-- ARGV: prefix, now (microseconds, '' = the server's clock), limit. Returns how many went.
-- The `exp` set holds only rows completed with an expiry; a row in any other status is left alone.
local now = ARGV[2]
if now == '' then now = int(now_us()) end
local ids = redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local deleted = 0
for _, id in ipairs(ids) do
  local k = job_key(id)
  local f = redis.call('HMGET', k, 'status', 'queue')
  if not f[1] then
    redis.call('ZREM', P .. 'exp', id)
  elseif f[1] == 'done' or f[1] == 'cancelled' then
    index_remove(id, f[2], f[1])
    redis.call('ZREM', P .. 'all', id)
    redis.call('ZREM', P .. 'q:' .. f[2], id)
    redis.call('ZREM', P .. 'exp', id)
    redis.call('DEL', k)
    deleted = deleted + 1
  end
end
return deleted
