-- A recurring task. KEYS, ARGV: as SCRIPT_CANCEL.
--#include lib_cancel.lua
return cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], true, ARGV[4])
