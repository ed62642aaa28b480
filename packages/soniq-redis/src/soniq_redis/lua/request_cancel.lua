-- Ask for a job to stop, whatever its status. ARGV: prefix, job_id.
-- queued: cancelled now, dependents following -> 'cancelled'. processing: the flag
-- cancel_requested is set and the id published on the job-changes channel, which
-- the owner's watcher hears -> 'requested'. done, cancelled or dead-lettered: nothing
-- written -> 'already_finished'. No row at all -> 'not_found'.
local id = ARGV[2]
local k = job_key(id)
local f = redis.call('HMGET', k, 'status', 'queue', 'created_at', 'watched', 'dedup_key',
  'dependents')
if f[1] == 'queued' then
  f[4] = '1'  -- published whether watched or not
  cancel_queued(id, f, now_us())
  return 'cancelled'
end
if f[1] == 'processing' then
  redis.call('HSET', k, 'cancel_requested', '1')
  redis.call('PUBLISH', P .. 'job_changes', id)
  return 'requested'
end
if f[1] or redis.call('EXISTS', dead_key(id)) == 1 then return 'already_finished' end
return 'not_found'
