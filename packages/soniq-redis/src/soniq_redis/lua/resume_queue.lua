-- Resume a paused queue, waking the workers that wait on it. Returns 1 when it was
-- paused, 0 (nothing written) when not.
-- ARGV: prefix, queue.
local queue = ARGV[2]
if redis.call('HDEL', P .. 'paused_queues', queue) == 0 then return 0 end
wake(queue)
return 1
