-- Lua functions shared by the scripts that index a task (SCRIPT_INDEX,
-- SCRIPT_CRON_NEXT, SCRIPT_RESCHEDULE, SCRIPT_MOVE), so that they route
-- and judge copies by one rule.
-- to_bucket appends the task to its bucket (width ms of due time, 0: no
-- buckets) if that starts after edge (now + the near window), and lists
-- the bucket in bk; it returns false if the task belongs in due/task.
-- set_moved records cur as the task's current due time and the latest due
-- of any copy (last, or the entry's own if later). current tells whether a
-- copy due at due (a string) is still the task's: not in flight, not
-- cancelled, not moved to another due time.
local function to_bucket(kbk, prefix, width, edge, id, due, p)
  if width <= 0 then return false end
  local d = tonumber(due)
  local b = d - d % width
  if b <= edge then return false end
  local m = string.format('%d', b)
  redis.call('RPUSH', prefix .. m, due .. ' ' .. id .. ' ' .. p)
  redis.call('ZADD', kbk, m, m)
  return true
end
local function set_moved(kmv, id, cur, mv, last)
  if mv then
    last = math.max(last, tonumber(string.match(mv, ' (%d+)$')))
  end
  redis.call('HSET', kmv, id, cur .. ' ' .. string.format('%d', last))
end
local function current(kinf, kc, kmv, id, due)
  if redis.call('ZSCORE', kinf, id) or redis.call('ZSCORE', kc, id) then
    return false
  end
  local mv = redis.call('HGET', kmv, id)
  return not mv or string.match(mv, '^%d+') == due
end
