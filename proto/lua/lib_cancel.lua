-- Cancel, race-free against claims: a task still due is removed (and
-- tombstoned); one in flight cannot be cancelled. The tombstone's time is
-- the later of now and the task's due time (it is trimmed an hour after):
-- it also drops a copy waiting in a bucket when that is moved. A task held
-- for its paused topic (held prefix .. topic; topic "" for none) leaves
-- its held set. A recurring task (series) is tombstoned even while an
-- occurrence is in flight, so that the worker recording that occurrence
-- does not index the next one (SCRIPT_CRON_NEXT). cancel_one returns -1
-- if (an occurrence is) in flight, else the removed due score (0: not
-- indexed).
local function cancel_one(kd, ki, kc, kh, id, now, due, series, topic)
  local t = math.max(tonumber(now), tonumber(due))
  if series then redis.call('ZADD', kc, t, id) end
  if redis.call('ZSCORE', ki, id) then return -1 end
  local h = nil
  if topic ~= '' then
    h = redis.call('ZSCORE', kh .. topic, id)
    if h then redis.call('ZREM', kh .. topic, id) end
  end
  local s = redis.call('ZSCORE', kd, id) or h
  redis.call('ZREM', kd, id)
  if not series then redis.call('ZADD', kc, t, id) end
  if s then return tonumber(s) end
  return 0
end
