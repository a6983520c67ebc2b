-- Release held tasks of a resumed topic, oldest first: up to ARGV[2] of
-- them go back to due with their due time (overdue: the next scan claims
-- them at once). Returns the number released followed by the due times
-- of up to ARGV[3] tasks still held, oldest first (the heads the drain
-- merges across slots).
-- KEYS: due, held prefix     ARGV: topic, count, peek
local k = KEYS[2] .. ARGV[1]
local n = tonumber(ARGV[2])
local out = {0}
if n > 0 then
  local r = redis.call('ZRANGE', k, 0, n - 1, 'WITHSCORES')
  for i = 1, #r, 2 do
    redis.call('ZADD', KEYS[1], r[i + 1], r[i])
    redis.call('ZREM', k, r[i])
  end
  out[1] = #r / 2
end
local m = tonumber(ARGV[3])
if m > 0 then
  local r = redis.call('ZRANGE', k, 0, m - 1, 'WITHSCORES')
  for i = 2, #r, 2 do out[#out + 1] = tonumber(r[i]) end
end
return out
