-- KEYS: due, inflight, task, attempt, cancelled, moved, bk, bucket
-- prefix. Returns the pending count (ZCARD due plus the elements of the
-- buckets), ZCARD inflight, the oldest due entry, and the bytes of the
-- slot's index keys (MEMORY USAGE, sampled: cheap on big keys).
local b = 0
for i = 1, 7 do
  b = b + (redis.call('MEMORY', 'USAGE', KEYS[i]) or 0)
end
local n = redis.call('ZCARD', KEYS[1])
for _, m in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do
  local k = KEYS[8] .. m
  n = n + redis.call('LLEN', k)
  b = b + (redis.call('MEMORY', 'USAGE', k) or 0)
end
return {n, redis.call('ZCARD', KEYS[2]), redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES'), b}
