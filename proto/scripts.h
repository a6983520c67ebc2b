#ifndef PROPHET_SCRIPTS_H
#define PROPHET_SCRIPTS_H

/*
 * Redis Lua scripts. Every script touches the keys of one slot only
 * (KEYS share the {prophet:N} hash tag).
 */

/*
 * Claim due tasks, fenced by the owner epoch.
 * KEYS: due, task, inflight, attempt, epoch
 * ARGV: epoch, now_ms, lease_deadline_ms, id...
 * Returns -1 if a higher epoch was recorded (the caller is stale), else a
 * flat array id, payload, attempt for every id that was still due (score
 * <= now) and is now in flight. attempt is the number this publish will
 * carry; it is only counted (SCRIPT_ATTEMPTED) once the message is handed
 * to Kafka, so a crash between claim and publish does not skip a number.
 */
#define SCRIPT_CLAIM                                                          \
	"local fence = tonumber(redis.call('GET', KEYS[5]) or '0')\n"         \
	"local epoch = tonumber(ARGV[1])\n"                                   \
	"if fence > epoch then return -1 end\n"                               \
	"if fence < epoch then redis.call('SET', KEYS[5], ARGV[1]) end\n"     \
	"local now = tonumber(ARGV[2])\n"                                     \
	"local out = {}\n"                                                    \
	"for i = 4, #ARGV do\n"                                               \
	"  local id = ARGV[i]\n"                                              \
	"  local s = redis.call('ZSCORE', KEYS[1], id)\n"                     \
	"  if s and tonumber(s) <= now then\n"                                \
	"    redis.call('ZREM', KEYS[1], id)\n"                               \
	"    local p = redis.call('HGET', KEYS[2], id)\n"                     \
	"    if p then\n"                                                     \
	"      redis.call('ZADD', KEYS[3], ARGV[3], id)\n"                    \
	"      local a = tonumber(redis.call('HGET', KEYS[4], id) or '0') + " \
	"1\n"                                                                 \
	"      out[#out + 1] = id\n"                                          \
	"      out[#out + 1] = p\n"                                           \
	"      out[#out + 1] = a\n"                                           \
	"    end\n"                                                           \
	"  end\n"                                                             \
	"end\n"                                                               \
	"return out\n"

/*
 * Count a publish attempt for each id.   KEYS: attempt   ARGV: id...
 */
#define SCRIPT_ATTEMPTED                                                       \
	"for i = 1, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], 1) end\n" \
	"return #ARGV\n"

/*
 * Put back claims whose reply was lost with the connection (so they need
 * not wait for their lease). KEYS: due, inflight  ARGV: (id, due_ms)...
 */
#define SCRIPT_UNCLAIM                                            \
	"local n = 0\n"                                           \
	"for i = 1, #ARGV, 2 do\n"                                \
	"  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then\n"   \
	"    redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i])\n" \
	"    n = n + 1\n"                                         \
	"  end\n"                                                 \
	"end\n"                                                   \
	"return n\n"

/*
 * Forget delivered (or expired) tasks.
 * KEYS: inflight, task, attempt     ARGV: id...
 */
#define SCRIPT_FORGET                              \
	"for i = 1, #ARGV do\n"                    \
	"  redis.call('ZREM', KEYS[1], ARGV[i])\n" \
	"  redis.call('HDEL', KEYS[2], ARGV[i])\n" \
	"  redis.call('HDEL', KEYS[3], ARGV[i])\n" \
	"end\n"                                    \
	"return #ARGV\n"

/*
 * Requeue claimed tasks whose lease ends at or before `upto` (their
 * publisher died: upto is now, or after a takeover the end of the leases
 * an earlier owner can have taken). KEYS: due, inflight
 * ARGV: now_ms, upto_ms, id...     Returns how many went back to due.
 */
#define SCRIPT_REQUEUE                                         \
	"local now = tonumber(ARGV[1])\n"                      \
	"local upto = tonumber(ARGV[2])\n"                     \
	"local n = 0\n"                                        \
	"for i = 3, #ARGV do\n"                                \
	"  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])\n" \
	"  if s and tonumber(s) <= upto then\n"                \
	"    redis.call('ZREM', KEYS[2], ARGV[i])\n"           \
	"    redis.call('ZADD', KEYS[1], now, ARGV[i])\n"      \
	"    n = n + 1\n"                                      \
	"  end\n"                                              \
	"end\n"                                                \
	"return n\n"

/*
 * Index tasks loaded from the DB unless they are in flight or were
 * cancelled meanwhile. KEYS: due, task, inflight, cancelled
 * ARGV: (id, due_ms, payload)...
 */
#define SCRIPT_INDEX                                                  \
	"local n = 0\n"                                               \
	"for i = 1, #ARGV, 3 do\n"                                    \
	"  if not redis.call('ZSCORE', KEYS[3], ARGV[i]) and\n"       \
	"     not redis.call('ZSCORE', KEYS[4], ARGV[i]) then\n"      \
	"    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])\n"     \
	"    n = n + redis.call('ZADD', KEYS[1], 'NX', ARGV[i + 1], " \
	"ARGV[i])\n"                                                  \
	"  end\n"                                                     \
	"end\n"                                                       \
	"return n\n"

/*
 * A new owner raises the slot's fence; tells whether the index exists.
 * KEYS: epoch, marker     ARGV: epoch
 * Returns -1 if a higher epoch was recorded, else 1 if the slot's index
 * marker exists, 0 if it does not (the index must be rebuilt).
 */
#define SCRIPT_FENCE                                              \
	"local f = tonumber(redis.call('GET', KEYS[1]) or '0')\n" \
	"local e = tonumber(ARGV[1])\n"                           \
	"if f > e then return -1 end\n"                           \
	"if f < e then redis.call('SET', KEYS[1], ARGV[1]) end\n" \
	"return redis.call('EXISTS', KEYS[2])\n"

/*
 * Drop a slot's index before rebuilding it from the DB, fenced.
 * KEYS: due, task, inflight, attempt, epoch, marker     ARGV: epoch
 */
#define SCRIPT_RESET                                                       \
	"local f = tonumber(redis.call('GET', KEYS[5]) or '0')\n"          \
	"local e = tonumber(ARGV[1])\n"                                    \
	"if f > e then return -1 end\n"                                    \
	"redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6])\n" \
	"redis.call('SET', KEYS[5], ARGV[1])\n"                            \
	"return 1\n"

/*
 * Cancel, race-free against claims: a task still due is removed (and
 * tombstoned); one in flight cannot be cancelled.
 * KEYS: due, inflight, cancelled     ARGV: id, now_ms
 * Returns -1 if in flight, else the removed due score (0: not indexed).
 */
#define SCRIPT_CANCEL                                                    \
	"if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return -1 end\n" \
	"local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"             \
	"redis.call('ZREM', KEYS[1], ARGV[1])\n"                         \
	"redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"                \
	"if s then return tonumber(s) end\n"                             \
	"return 0\n"

/*
 * Cancel a recurring task: as SCRIPT_CANCEL, but the tombstone is set even
 * while an occurrence is in flight, so that the worker recording that
 * occurrence does not index the next one (SCRIPT_CRON_NEXT).
 * KEYS: due, inflight, cancelled     ARGV: id, now_ms
 * Returns -1 if an occurrence is in flight, else the removed due score.
 */
#define SCRIPT_CANCEL_SERIES                                             \
	"redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])\n"                \
	"if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return -1 end\n" \
	"local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"             \
	"redis.call('ZREM', KEYS[1], ARGV[1])\n"                         \
	"if s then return tonumber(s) end\n"                             \
	"return 0\n"

/*
 * After the DB recorded an occurrence of a recurring task and scheduled
 * the next: its claim is dropped and the next occurrence indexed, unless
 * the series was cancelled meanwhile (tombstone) or the next occurrence
 * is beyond the horizon (payload "": the loader indexes it in time).
 * KEYS: inflight, task, attempt, due, cancelled
 * ARGV: (id, next_due_ms, payload)...     Returns how many were indexed.
 */
#define SCRIPT_CRON_NEXT                                                     \
	"local n = 0\n"                                                      \
	"for i = 1, #ARGV, 3 do\n"                                           \
	"  local id = ARGV[i]\n"                                             \
	"  redis.call('ZREM', KEYS[1], id)\n"                                \
	"  redis.call('HDEL', KEYS[3], id)\n"                                \
	"  if ARGV[i + 2] == '' or redis.call('ZSCORE', KEYS[5], id) then\n" \
	"    redis.call('HDEL', KEYS[2], id)\n"                              \
	"    redis.call('ZREM', KEYS[4], id)\n"                              \
	"  else\n"                                                           \
	"    redis.call('HSET', KEYS[2], id, ARGV[i + 2])\n"                 \
	"    redis.call('ZADD', KEYS[4], ARGV[i + 1], id)\n"                 \
	"    n = n + 1\n"                                                    \
	"  end\n"                                                            \
	"end\n"                                                              \
	"return n\n"

/*
 * Undo a cancel whose DB update failed.
 * KEYS: due, cancelled     ARGV: id, due_ms (0: was not indexed)
 */
#define SCRIPT_UNCANCEL                                     \
	"redis.call('ZREM', KEYS[2], ARGV[1])\n"            \
	"if tonumber(ARGV[2]) > 0 then\n"                   \
	"  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])\n" \
	"end\n"                                             \
	"return 1\n"

/*
 * Reschedule, race-free against claims. KEYS: due, task, inflight,
 * cancelled. ARGV: id, new_due_ms, payload ("" to drop it from the index:
 * the new time is beyond the horizon). Returns -1 if in flight, -2 if
 * cancelled, 1 if indexed at the new time, 0 if dropped from the index.
 */
#define SCRIPT_RESCHEDULE                                                \
	"if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return -1 end\n" \
	"if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return -2 end\n" \
	"if ARGV[3] == '' then\n"                                        \
	"  redis.call('ZREM', KEYS[1], ARGV[1])\n"                       \
	"  redis.call('HDEL', KEYS[2], ARGV[1])\n"                       \
	"  return 0\n"                                                   \
	"end\n"                                                          \
	"redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])\n"                \
	"redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])\n"                \
	"return 1\n"

#endif
