-- Forget delivered (or expired) tasks.
-- KEYS: inflight, task, attempt     ARGV: id...
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('HDEL', KEYS[3], ARGV[i])
end
return #ARGV
