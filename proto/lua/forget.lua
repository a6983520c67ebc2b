-- Forget delivered (or expired) tasks.
-- KEYS: inflight, task, attempt     ARGV: id...
-- Three calls for up to a thousand ids (Lua's unpack limit), not three an id.
for c = 1, #ARGV, 1000 do
  local e = math.min(c + 999, #ARGV)
  redis.call('ZREM', KEYS[1], unpack(ARGV, c, e))
  redis.call('HDEL', KEYS[2], unpack(ARGV, c, e))
  redis.call('HDEL', KEYS[3], unpack(ARGV, c, e))
end
return #ARGV
