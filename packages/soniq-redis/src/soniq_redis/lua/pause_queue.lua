-- Pause a queue fleet-wide: `paused_queues` maps the queue name to the JSON text
-- {"reason": <text or null>, "paused_at": <microseconds, the server's clock>}.
-- Returns 1 when the queue was not paused; a second pause replaces the reason, keeps
-- paused_at, and returns 0. The claim scripts are sent the paused names by core.
-- ARGV: prefix, queue, reason as JSON text (a string or null).
local key = P .. 'paused_queues'
local queue, reason = ARGV[2], ARGV[3]
local old = redis.call('HGET', key, queue)
local paused_at = nil
if old then paused_at = string.match(old, '"paused_at":(%d+)') end
local fresh = paused_at == nil
if fresh then paused_at = int(now_us()) end
redis.call('HSET', key, queue, '{"reason":' .. reason .. ',"paused_at":' .. paused_at .. '}')
if not old then return 1 end
return 0
