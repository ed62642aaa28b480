-- KeyRotationStore: look at the next `limit` members of one row index and return the rows whose
-- stored JSON holds any of the marks (the texts of a sealed value). Reads only.
-- ARGV: prefix, which ('jobs': the index `all` of job rows, scored by created_at; 'dead_letter':
-- the index `dl` of dead-letter rows, scored by moved_to_dead_letter_at), after_score and
-- after_id (both '' = from the first member), limit (at least 1), then the marks.
-- Members sort by (score, id in byte order), so the walk resumes just past (after_score,
-- after_id) even when that member has left the index since: a bisection over the members of
-- that score finds its place. A member whose hash is gone is passed over.
-- Returns {rows, members looked at, last score, last id}, each row {id, args, result, progress},
-- false where the hash has no such field (dead-letter hashes keep only args).
local which, after_score, after_id, limit = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local index, row_key
if which == 'jobs' then
  index, row_key = P .. 'all', job_key
elseif which == 'dead_letter' then
  index, row_key = P .. 'dl', dead_key
else
  error({err = 'SONIQ_ARGUMENT unknown table "' .. tostring(which) .. '"'})
end
local marks = {}
for i = 6, #ARGV do marks[#marks + 1] = ARGV[i] end

local start = 0
if after_id ~= '' then
  local score = redis.call('ZSCORE', index, after_id)
  if score and tonumber(score) == tonumber(after_score) then
    start = redis.call('ZRANK', index, after_id) + 1
  else
    local lo = redis.call('ZCOUNT', index, '-inf', '(' .. after_score)
    local hi = lo + redis.call('ZCOUNT', index, after_score, after_score)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(after_id, redis.call('ZRANGE', index, mid, mid)[1]) then hi = mid else lo = mid + 1 end
    end
    start = lo
  end
end

local function marked(text)
  if not text then return false end
  for _, mark in ipairs(marks) do
    if string.find(text, mark, 1, true) then return true end
  end
  return false
end

local members = redis.call('ZRANGE', index, start, start + limit - 1, 'WITHSCORES')
local rows = {}
for i = 1, #members, 2 do
  local id = members[i]
  local f = redis.call('HMGET', row_key(id), 'args', 'result', 'progress')
  if marked(f[1]) or marked(f[2]) or marked(f[3]) then
    rows[#rows + 1] = {id, f[1], f[2], f[3]}
  end
end
if #members > 0 then
  after_score, after_id = members[#members], members[#members - 1]
end
return {rows, #members / 2, after_score, after_id}
