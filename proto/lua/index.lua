-- Index tasks loaded from the DB unless they are in flight, were cancelled
-- meanwhile or were rescheduled to another time (moved). A task whose
-- bucket (width ms of due time, 0: none) starts after edge (now + the
-- near window) is appended to it, the others go to due/task. In bulk: a
-- command per bucket and per key, not per task (a rebuild sends 2,000
-- tasks a call), and the in-flight/cancelled/moved lookups only where one
-- of those keys exists (none does after a rebuild's reset, or on a slot
-- nobody cancels or reschedules in).
-- KEYS: due, task, inflight, cancelled, bk, bucket prefix, moved
-- ARGV: edge, width, (id, due_ms, payload)...
--#include lib_indexing.lua
local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])
local any = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[7]) > 0
local function batch(cmd, key, opt, t)
  local r = 0
  for j = 1, #t, 1000 do
    local k = math.min(j + 999, #t)
    if opt then
      r = r + redis.call(cmd, key, opt, unpack(t, j, k))
    else
      r = r + redis.call(cmd, key, unpack(t, j, k))
    end
  end
  return r
end
local n = 0
local lists, names, bk, hs, zs = {}, {}, {}, {}, {}
for i = 3, #ARGV, 3 do
  local id, due = ARGV[i], ARGV[i + 1]
  if not any or current(KEYS[3], KEYS[4], KEYS[7], id, due) then
    local b = edge
    if width > 0 then
      local d = tonumber(due)
      b = d - d % width
    end
    if b > edge then
      local m = string.format('%d', b)
      local l = lists[m]
      if not l then
        l = {}
        lists[m] = l
        names[#names + 1] = m
        bk[#bk + 1] = m
        bk[#bk + 1] = m
      end
      l[#l + 1] = due .. ' ' .. id .. ' ' .. ARGV[i + 2]
      n = n + 1
    else
      hs[#hs + 1] = id
      hs[#hs + 1] = ARGV[i + 2]
      zs[#zs + 1] = due
      zs[#zs + 1] = id
    end
  end
end
for _, m in ipairs(names) do batch('RPUSH', KEYS[6] .. m, nil, lists[m]) end
batch('ZADD', KEYS[5], nil, bk)
batch('HSET', KEYS[2], nil, hs)
return n + batch('ZADD', KEYS[1], 'NX', zs)
