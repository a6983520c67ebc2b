-- A new owner raises the slot's fence; tells whether the index exists.
-- KEYS: epoch, marker     ARGV: epoch
-- Returns -1 if a higher epoch was recorded, else 1 if the slot's index
-- marker exists, 0 if it does not (the index must be rebuilt).
local f = tonumber(redis.call('GET', KEYS[1]) or '0')
local e = tonumber(ARGV[1])
if f > e then return -1 end
if f < e then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('EXISTS', KEYS[2])
