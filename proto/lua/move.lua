-- Move the buckets that start at or before ARGV[2] (ms: now + the near
-- window) into due/task, fenced by the owner epoch, at most ARGV[3]
-- elements. A copy is dropped if its task is in flight, cancelled, or
-- moved to another due time (a bucket may hold several copies of a task:
-- indexers may repeat themselves; moving a current one twice is
-- harmless). Moved entries stay until trimmed (SCRIPT_MOVED_TRIM), an
-- hour after the last due time of any copy.
-- KEYS: due, task, inflight, cancelled, bk, bucket prefix, moved, epoch
-- ARGV: epoch, upto_ms, budget
-- Returns -1 if a higher epoch was recorded, else {moved, dropped, more,
-- earliest due moved or 0}: more is 1 if the budget ran out first.
--#include lib_indexing.lua
local fence = tonumber(redis.call('GET', KEYS[8]) or '0')
local epoch = tonumber(ARGV[1])
if fence > epoch then return -1 end
if fence < epoch then redis.call('SET', KEYS[8], ARGV[1]) end
local budget = tonumber(ARGV[3])
local moved, dropped, more, first = 0, 0, 0, 0
local ms = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[2])
for _, m in ipairs(ms) do
  local key = KEYS[6] .. m
  while budget > 0 do
    local els = redis.call('LRANGE', key, 0, math.min(budget, 500) - 1)
    if #els == 0 then break end
    redis.call('LTRIM', key, #els, -1)
    budget = budget - #els
    for _, el in ipairs(els) do
      local a = string.find(el, ' ', 1, true)
      local b = string.find(el, ' ', a + 1, true)
      local due = string.sub(el, 1, a - 1)
      local id = string.sub(el, a + 1, b - 1)
      if current(KEYS[3], KEYS[4], KEYS[7], id, due) then
        redis.call('HSET', KEYS[2], id, string.sub(el, b + 1))
        redis.call('ZADD', KEYS[1], 'NX', due, id)
        moved = moved + 1
        local d = tonumber(due)
        if first == 0 or d < first then first = d end
      else
        dropped = dropped + 1
      end
    end
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[5], m)
  else
    more = 1
    break
  end
end
return {moved, dropped, more, first}
