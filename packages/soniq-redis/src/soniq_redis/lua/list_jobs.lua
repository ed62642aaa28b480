-- ARGV: prefix, kind ('jobs' | 'dead'), queue ('' = any), has-queue ('1'/'0'),
-- status ('' = any), offset, limit, include results ('1'/'0'). Newest first.
local kind, queue, has_queue, status = ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local offset, limit, with_results = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
if limit <= 0 then return {} end
local index
if kind == 'dead' then
  if has_queue then index = P .. 'dlq:' .. queue else index = P .. 'dl' end
elseif status ~= '' and has_queue then
  index = P .. 'qs:' .. status .. ':' .. queue
elseif status ~= '' then
  index = P .. 'st:' .. status
elseif has_queue then
  index = P .. 'q:' .. queue
else
  index = P .. 'all'
end
local rows = {}
for _, id in ipairs(redis.call('ZREVRANGE', index, offset, offset + limit - 1)) do
  local key
  if kind == 'dead' then key = dead_key(id) else key = job_key(id) end
  local row = redis.call('HGETALL', key)
  if #row > 0 and not with_results then
    -- Results can be large: leave them on the server unless asked.
    local kept = {}
    for i = 1, #row, 2 do
      if row[i] ~= 'result' then
        kept[#kept + 1] = row[i]
        kept[#kept + 1] = row[i + 1]
      end
    end
    row = kept
  end
  if #row > 0 then rows[#rows + 1] = row end
end
return rows
