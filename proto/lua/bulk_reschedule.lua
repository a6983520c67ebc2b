-- Bulk reschedule (manager/bulk.c): reschedule_one for each task of a
-- slot. ARGV: edge, width, (id, new_due_ms, payload, old_due_ms, topic)...
-- Returns reschedule_one's answer for each, in order.
--#include lib_reschedule.lua
local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 5 do
  out[#out + 1] = reschedule_one(ARGV[i], ARGV[i + 1], ARGV[i + 2], edge, width, tonumber(ARGV[i + 3]), ARGV[i + 4])
end
return out
