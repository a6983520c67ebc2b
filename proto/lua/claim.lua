-- Claim due tasks, fenced by the owner epoch.
-- KEYS: due, task, inflight, attempt, epoch
-- ARGV: epoch, now_ms, lease_deadline_ms, id...
-- Returns -1 if a higher epoch was recorded (the caller is stale), else a
-- flat array of two elements for every id sent, in the order sent: the
-- attempt and the payload if the id was still due (score <= now) and is
-- now in flight, else 0 and nil. The ids are not sent back: the caller
-- knows them by position. attempt is the number this publish will carry;
-- it is only counted (SCRIPT_ATTEMPTED) once the message is handed to
-- Kafka, so a crash between claim and publish does not skip a number.
local fence = tonumber(redis.call('GET', KEYS[5]) or '0')
local epoch = tonumber(ARGV[1])
if fence > epoch then return -1 end
if fence < epoch then redis.call('SET', KEYS[5], ARGV[1]) end
local now = tonumber(ARGV[2])
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local a, p = 0, false
  local s = redis.call('ZSCORE', KEYS[1], id)
  if s and tonumber(s) <= now then
    redis.call('ZREM', KEYS[1], id)
    p = redis.call('HGET', KEYS[2], id)
    if p then
      redis.call('ZADD', KEYS[3], ARGV[3], id)
      a = tonumber(redis.call('HGET', KEYS[4], id) or '0') + 1
    else
      p = false
    end
  end
  out[#out + 1] = a
  out[#out + 1] = p
end
return out
