-- Reschedule, race-free against claims. The task leaves due/task; if a
-- copy may wait in a bucket (the bucket of its old due time exists, or it
-- was moved before), the moved entry records the new due time as current
-- and the latest due of any copy. It is indexed at the new time (in a
-- bucket if that starts after edge) unless payload is "" (beyond the
-- horizon: the loader indexes it). A task held for its paused topic
-- leaves its held set (it is held again when it falls due while the
-- topic is still paused). reschedule_one returns -1 if in flight, -2 if
-- cancelled, 1 if indexed at the new time, 0 if dropped from the index.
-- KEYS (of both scripts): due, task, inflight, cancelled, bk, bucket
-- prefix, moved, held prefix.
--#include lib_indexing.lua
local function reschedule_one(id, nd, p, edge, width, old, topic)
  if redis.call('ZSCORE', KEYS[3], id) then return -1 end
  if redis.call('ZSCORE', KEYS[4], id) then return -2 end
  if topic ~= '' then redis.call('ZREM', KEYS[8] .. topic, id) end
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  local mv = redis.call('HGET', KEYS[7], id)
  local ob = width > 0 and old - old % width or 0
  if mv or (width > 0 and redis.call('ZSCORE', KEYS[5], string.format('%d', ob))) then
    set_moved(KEYS[7], id, nd, mv, math.max(old, tonumber(nd)))
  end
  if p == '' then return 0 end
  if not to_bucket(KEYS[5], KEYS[6], width, edge, id, nd, p) then
    redis.call('HSET', KEYS[2], id, p)
    redis.call('ZADD', KEYS[1], nd, id)
  end
  return 1
end
