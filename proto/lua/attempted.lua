-- Count a publish attempt for each id (an id given twice counts twice).
-- KEYS: attempt   ARGV: id...
-- Read in one HMGET and written in one HSET a thousand ids at a time,
-- instead of a HINCRBY an id.
local val, order = {}, {}
for c = 1, #ARGV, 1000 do
  local e = math.min(c + 999, #ARGV)
  local cur = redis.call('HMGET', KEYS[1], unpack(ARGV, c, e))
  for k = c, e do
    local id = ARGV[k]
    if val[id] == nil then
      val[id] = tonumber(cur[k - c + 1] or '0')
      order[#order + 1] = id
    end
    val[id] = val[id] + 1
  end
end
for c = 1, #order, 1000 do
  local e = math.min(c + 999, #order)
  local kv = {}
  for k = c, e do
    kv[#kv + 1] = order[k]
    kv[#kv + 1] = val[order[k]]
  end
  redis.call('HSET', KEYS[1], unpack(kv))
end
return #ARGV
