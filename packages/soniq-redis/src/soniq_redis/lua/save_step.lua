-- Set one key of a processing row's `steps` (a JSON object text), keeping the others,
-- fenced on the row's owner. The stored texts are spliced, never decoded, so every
-- value comes back exactly as core encoded it.
-- ARGV: prefix, job_id, worker_id, the step name as JSON text, the value as JSON text.
local id, worker, name, value = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not owned(id, worker) then return 0 end
local k = job_key(id)
local text = redis.call('HGET', k, 'steps') or '{}'

-- The top-level entries of an object text ('"key":value' each), found by jumping from
-- one structural character to the next.
local entries = {}
local depth, start, i = 0, nil, 1
while true do
  i = string.find(text, '[\\"{}%[%],]', i)
  if i == nil then break end
  local c = string.sub(text, i, i)
  if c == '"' then
    -- Skip the string: its end is the next quote not escaped by a backslash.
    local j = i + 1
    while true do
      j = string.find(text, '[\\"]', j)
      if j == nil then
        error({err = 'SONIQ_STEPS the stored steps of job ' .. id .. ' are not a JSON object'})
      end
      if string.sub(text, j, j) == '\\' then j = j + 2 else break end
    end
    i = j
  elseif c == '{' or c == '[' then
    depth = depth + 1
    if depth == 1 then start = i + 1 end
  elseif c == '}' or c == ']' then
    if depth == 1 then
      local entry = string.match(string.sub(text, start, i - 1), '^%s*(.-)%s*$')
      if entry ~= '' then entries[#entries + 1] = entry end
    end
    depth = depth - 1
  elseif depth == 1 then  -- a comma between two entries
    entries[#entries + 1] = string.match(string.sub(text, start, i - 1), '^%s*(.-)%s*$')
    start = i + 1
  end
  i = i + 1
end

-- An entry whose text starts with the name's JSON text and a colon has that key (a JSON
-- string ends at its first unescaped quote); names are encoded by one encoder, so equal
-- names have equal texts.
local prefix = name .. ':'
local replaced = false
for n, entry in ipairs(entries) do
  if string.sub(entry, 1, #prefix) == prefix then
    entries[n] = prefix .. value
    replaced = true
    break
  end
end
if not replaced then entries[#entries + 1] = prefix .. value end
redis.call('HSET', k, 'steps', '{' .. table.concat(entries, ',') .. '}')
return 1
