-- One HSCAN step of a slot's moved entries: deletes those whose last copy
-- was due before ARGV[2]. KEYS: moved   ARGV: cursor, before_ms
-- Returns the next cursor.
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', 500)
local before = tonumber(ARGV[2])
for i = 1, #r[2], 2 do
  local last = tonumber(string.match(r[2][i + 1], ' (%d+)$') or '0')
  if last < before then redis.call('HDEL', KEYS[1], r[2][i]) end
end
return r[1]
