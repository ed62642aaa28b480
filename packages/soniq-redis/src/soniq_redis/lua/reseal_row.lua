-- KeyRotationStore: compare-and-set of one row's sealed values, all given fields or none.
-- ARGV: prefix, which ('jobs' or 'dead_letter'), id, then (field, old JSON text, new JSON text)
-- triples, field one of args, result and progress. Nothing else of the row changes.
-- Returns 1 when written; 0 (nothing written) when the row is gone or any field no longer
-- holds its old text (a worker settled or updated the row since it was read).
local which, id = ARGV[2], ARGV[3]
local k
if which == 'jobs' then
  k = job_key(id)
elseif which == 'dead_letter' then
  k = dead_key(id)
else
  error({err = 'SONIQ_ARGUMENT unknown table "' .. tostring(which) .. '"'})
end
local FIELDS = {args = true, result = true, progress = true}
for i = 4, #ARGV, 3 do
  if not FIELDS[ARGV[i]] then
    error({err = 'SONIQ_ARGUMENT cannot reseal the field "' .. tostring(ARGV[i]) .. '"'})
  end
end
if redis.call('EXISTS', k) == 0 then return 0 end
for i = 4, #ARGV, 3 do
  if redis.call('HGET', k, ARGV[i]) ~= ARGV[i + 1] then return 0 end
end
for i = 4, #ARGV, 3 do redis.call('HSET', k, ARGV[i], ARGV[i + 2]) end
return 1
