-- After the DB recorded an occurrence of a recurring task and scheduled
-- the next: its claim is dropped and the next occurrence indexed (in its
-- bucket if that starts after edge), unless the series was cancelled
-- meanwhile (tombstone) or the next occurrence is beyond the horizon
-- (payload "": the loader indexes it in time). A moved entry (the series
-- was rescheduled) takes the next occurrence as current.
-- KEYS: inflight, task, attempt, due, cancelled, bk, bucket prefix, moved
-- ARGV: edge, width, (id, next_due_ms, payload)...     Returns how many
-- were indexed.
--#include lib_indexing.lua
local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV, 3 do
  local id, due = ARGV[i], ARGV[i + 1]
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  local mv = redis.call('HGET', KEYS[8], id)
  if mv then set_moved(KEYS[8], id, due, mv, tonumber(due)) end
  if ARGV[i + 2] == '' or redis.call('ZSCORE', KEYS[5], id) then
    redis.call('HDEL', KEYS[2], id)
  elseif to_bucket(KEYS[6], KEYS[7], width, edge, id, due, ARGV[i + 2]) then
    redis.call('HDEL', KEYS[2], id)
    n = n + 1
  else
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    redis.call('ZADD', KEYS[4], due, id)
    n = n + 1
  end
end
return n
