-- Resume with skip (manager/topics.c), at least PAUSE_SETTLE_MS after the
-- pause (claims made before it reached the workers are published by then;
-- one in flight now is a claim being held): the tasks leave due, inflight
-- and their held set, lose their payload and get a tombstone (so no loader
-- or bucket indexes them again, and a claim or lift finds nothing to
-- publish); the caller then records them expired.
-- KEYS: due, inflight, cancelled, held prefix, task
-- ARGV: now_ms, topic, (id, due_ms)...   Returns the ids it removed.
local k = KEYS[4] .. ARGV[2]
local now = tonumber(ARGV[1])
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', k, id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZADD', KEYS[3], math.max(now, tonumber(ARGV[i + 1])), id)
  out[#out + 1] = id
end
return out
