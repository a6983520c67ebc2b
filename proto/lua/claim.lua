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
-- One ZSCORE an id, then one call for all of them for each of the other
-- steps (in chunks that stay under Lua's unpack limit): a call from Lua
-- costs about a microsecond of Redis's time besides its work.
local fence = tonumber(redis.call('GET', KEYS[5]) or '0')
local epoch = tonumber(ARGV[1])
if fence > epoch then return -1 end
if fence < epoch then redis.call('SET', KEYS[5], ARGV[1]) end
local now = tonumber(ARGV[2])
local CHUNK = 1000
local out, due, at, seen = {}, {}, {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  out[#out + 1] = 0
  out[#out + 1] = false
  if not seen[id] then
    seen[id] = true
    local s = redis.call('ZSCORE', KEYS[1], id)
    if s and tonumber(s) <= now then
      due[#due + 1] = id
      at[#at + 1] = 2 * (i - 3)
    end
  end
end
for c = 1, #due, CHUNK do
  local e = math.min(c + CHUNK - 1, #due)
  redis.call('ZREM', KEYS[1], unpack(due, c, e))
  local p = redis.call('HMGET', KEYS[2], unpack(due, c, e))
  local a = redis.call('HMGET', KEYS[4], unpack(due, c, e))
  local fly = {}
  for k = c, e do
    local payload = p[k - c + 1]
    if payload then
      fly[#fly + 1] = ARGV[3]
      fly[#fly + 1] = due[k]
      out[at[k] - 1] = tonumber(a[k - c + 1] or '0') + 1
      out[at[k]] = payload
    end
  end
  if #fly > 0 then redis.call('ZADD', KEYS[3], unpack(fly)) end
end
return out
