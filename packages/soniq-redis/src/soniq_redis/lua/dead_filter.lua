-- Dead-letter rows matching a filter: delete a bounded batch, or count. (Listing is
-- `dead_letter_page`, in `soniq_redis.reads`.)
-- ARGV: prefix, mode ('delete' | 'stats'), names, queues, reasons (JSON arrays, '' = any),
-- moved_from, moved_to (microseconds, '' = open), resurrected ('1' | '0' | ''), limit.
-- The date range narrows the scan through the `dl` index (scored by the move time); the other
-- fields are read from each row. delete: oldest first, the ids deleted. stats: total,
-- resurrected, oldest, newest, then a JSON object per grouping.
local mode = ARGV[2]
local function set_of(text)
  if text == '' then return nil end
  local wanted = {}
  for _, value in ipairs(cjson.decode(text)) do wanted[value] = true end
  return wanted
end
local names, queues, reasons = set_of(ARGV[3]), set_of(ARGV[4]), set_of(ARGV[5])
local low, high = ARGV[6], ARGV[7]
if low == '' then low = '-inf' end
if high == '' then high = '+inf' end
local resurrected = ARGV[8]
local limit = tonumber(ARGV[9])

local function matches(id)
  local f = redis.call('HMGET', dead_key(id), 'job_name', 'queue', 'dead_letter_reason', 'resurrection_count')
  if not f[1] then return nil end
  if names and not names[f[1]] then return nil end
  if queues and not queues[f[2]] then return nil end
  if reasons and not reasons[f[3]] then return nil end
  local count = tonumber(f[4] or '0') or 0
  if resurrected == '1' and count == 0 then return nil end
  if resurrected == '0' and count > 0 then return nil end
  return f
end

if mode == 'delete' then
  local deleted = {}
  local ids = redis.call('ZRANGEBYSCORE', P .. 'dl', low, high, 'WITHSCORES')
  for i = 1, #ids, 2 do
    if #deleted >= limit then break end
    local id = ids[i]
    local f = matches(id)
    if f then
      redis.call('DEL', dead_key(id))
      redis.call('ZREM', P .. 'dl', id)
      redis.call('ZREM', P .. 'dlq:' .. f[2], id)
      deleted[#deleted + 1] = id
    end
  end
  return deleted
end
-- stats
local total, revived, oldest, newest = 0, 0, '', ''
local by_name, by_queue, by_reason = {}, {}, {}
local ids = redis.call('ZRANGEBYSCORE', P .. 'dl', low, high, 'WITHSCORES')
for i = 1, #ids, 2 do
  local f = matches(ids[i])
  if f then
    total = total + 1
    if tonumber(f[4] or '0') > 0 then revived = revived + 1 end
    if oldest == '' then oldest = ids[i + 1] end
    newest = ids[i + 1]
    by_name[f[1]] = (by_name[f[1]] or 0) + 1
    by_queue[f[2]] = (by_queue[f[2]] or 0) + 1
    by_reason[f[3]] = (by_reason[f[3]] or 0) + 1
  end
end
local function encoded(counts)
  if next(counts) == nil then return '{}' end
  return cjson.encode(counts)
end
return {total, revived, oldest, newest, encoded(by_name), encoded(by_queue), encoded(by_reason)}
