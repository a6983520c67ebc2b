-- Requeue claimed tasks whose lease ends at or before `upto` (their
-- publisher died: upto is now, or after a takeover the end of the leases
-- an earlier owner can have taken). KEYS: due, inflight
-- ARGV: now_ms, upto_ms, id...     Returns how many went back to due.
local now = tonumber(ARGV[1])
local upto = tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if s and tonumber(s) <= upto then
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('ZADD', KEYS[1], now, ARGV[i])
    n = n + 1
  end
end
return n
