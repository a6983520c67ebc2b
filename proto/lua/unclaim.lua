-- Put back claims whose reply was lost with the connection (so they need
-- not wait for their lease). KEYS: due, inflight  ARGV: (id, due_ms)...
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i])
    n = n + 1
  end
end
return n
