-- Hold claimed tasks of a paused topic: out of inflight (their claim is
-- undone, the attempt was not counted) into the topic's held set, keyed by
-- their due time. Held even if no longer in flight (a rebuild reset the
-- slot meanwhile and skipped the task as ours): a copy also back in due is
-- held again by its claim, one without a payload is dropped by the claim
-- after the resume (and swept from the DB).
-- The same from due for the next occurrence of a fire_all series that fell
-- due while the topic was paused, the topic draining at a rate: the drain
-- releases it at the rate (worker/pause.c, pause_pace).
-- KEYS: inflight (or due), held prefix     ARGV: topic, (id, due_ms)...
-- Returns how many were held.
local k = KEYS[2] .. ARGV[1]
for i = 2, #ARGV, 2 do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('ZADD', k, ARGV[i + 1], ARGV[i])
end
return (#ARGV - 1) / 2
