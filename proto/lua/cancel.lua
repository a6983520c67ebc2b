-- KEYS: due, inflight, cancelled, held prefix
-- ARGV: id, now_ms, due_ms, topic
--#include lib_cancel.lua
return cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], false, ARGV[4])
