-- Mark rows so that the script that finishes each publishes its id.
-- ARGV: prefix, job ids... Ids with no row are ignored (no hash is created for them).
for i = 2, #ARGV do
  local k = job_key(ARGV[i])
  if redis.call('EXISTS', k) == 1 then redis.call('HSET', k, 'watched', '1') end
end
return 0
