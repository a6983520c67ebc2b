-- Give back to due, at retry_ms, claimed tasks whose publish failed
-- without reaching Kafka (their topic is gone): waiting for their retry
-- they are scheduled, so a cancel or a reschedule takes them, where in
-- flight they would answer 409 until the topic came back. Fenced by the
-- lease: only an id still in flight under the deadline its claim set
-- (another claim, after the lease ran out, set another one).
-- KEYS: due, inflight     ARGV: retry_ms, (id, lease_deadline_ms)...
-- Returns how many went back to due.
local n = 0
for i = 2, #ARGV, 2 do
  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if s and tonumber(s) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    n = n + 1
  end
end
return n
