-- KEYS: due, marker; ARGV: from, step, steps, until. The counts of the
-- steps clipped to until, or nil if the slot's index is lost.
if redis.call('EXISTS', KEYS[2]) == 0 then return false end
local from, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local n, u = tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
for i = 0, n - 1 do
  local a = from + i * step
  local b = math.min(a + step, u)
  out[i + 1] = redis.call('ZCOUNT', KEYS[1], string.format('%.0f', a), '(' .. string.format('%.0f', b))
end
return out
