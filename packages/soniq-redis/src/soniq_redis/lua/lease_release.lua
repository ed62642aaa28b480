-- ARGV: prefix, name, holder. Deletes the lease when `holder` holds it; returns 1 or 0.
local k = P .. 'lease:' .. ARGV[2]
if redis.call('HGET', k, 'holder') ~= ARGV[3] then return 0 end
return redis.call('DEL', k)
