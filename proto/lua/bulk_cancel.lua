-- Bulk cancel (manager/bulk.c): cancel_one for each task of a slot.
-- KEYS: due, inflight, cancelled, held prefix     ARGV: now_ms, (id,
-- due_ms, series 0/1, topic)...     Returns cancel_one's answer for each,
-- in order.
--#include lib_cancel.lua
local out = {}
for i = 2, #ARGV, 4 do
  out[#out + 1] = cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[i], ARGV[1], ARGV[i + 1], ARGV[i + 2] == '1', ARGV[i + 3])
end
return out
