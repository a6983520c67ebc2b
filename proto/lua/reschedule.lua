-- ARGV: id, new_due_ms, payload, edge, width, old_due_ms, topic
--#include lib_reschedule.lua
return reschedule_one(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
