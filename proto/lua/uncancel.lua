-- Undo a cancel whose DB update failed.
-- KEYS: due, cancelled     ARGV: id, due_ms (0: was not indexed)
redis.call('ZREM', KEYS[2], ARGV[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
return 1
