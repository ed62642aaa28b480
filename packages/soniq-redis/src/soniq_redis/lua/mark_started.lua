-- ARGV: prefix, worker_id, job_ids... Each row fenced on its own.
-- Returns the ids actually written.
-- The mark moves updated_at like every other write to a claimed row: a stale sweep fences its
-- rescue on the updated_at it read, and decided to release a row that had not started (attempts
-- kept); a start marked between its read and its write must make that write miss, not pass.
local worker = ARGV[2]
local stamp = int(now_us())
local written = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if owned(id, worker) then
    redis.call('HSET', job_key(id), 'started_at', stamp, 'updated_at', stamp)
    written[#written + 1] = id
  end
end
return written
