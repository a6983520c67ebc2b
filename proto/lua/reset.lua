-- Drop a slot's index before rebuilding it from the DB, fenced: due, task,
-- inflight, attempt, marker, the buckets and the moved entries (the DB
-- is the truth the rebuild reads).
-- KEYS: due, task, inflight, attempt, epoch, marker, bk, bucket prefix,
-- moved     ARGV: epoch
local f = tonumber(redis.call('GET', KEYS[5]) or '0')
local e = tonumber(ARGV[1])
if f > e then return -1 end
for _, m in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do
  redis.call('DEL', KEYS[8] .. m)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7],
           KEYS[9])
redis.call('SET', KEYS[5], ARGV[1])
return 1
