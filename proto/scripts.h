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
 * Lua functions shared by the scripts that index a task (SCRIPT_INDEX,
 * SCRIPT_CRON_NEXT, SCRIPT_RESCHEDULE, SCRIPT_MOVE), so that they route
 * and judge copies by one rule.
 * to_bucket appends the task to its bucket (width ms of due time, 0: no
 * buckets) if that starts after edge (now + the near window), and lists
 * the bucket in bk; it returns false if the task belongs in due/task.
 * set_moved records cur as the task's current due time and the latest due
 * of any copy (last, or the entry's own if later). current tells whether a
 * copy due at due (a string) is still the task's: not in flight, not
 * cancelled, not moved to another due time.
 */
#define LUA_INDEXING                                                         \
	"local function to_bucket(kbk, prefix, width, edge, id, due, p)\n"   \
	"  if width <= 0 then return false end\n"                            \
	"  local d = tonumber(due)\n"                                        \
	"  local b = d - d % width\n"                                        \
	"  if b <= edge then return false end\n"                             \
	"  local m = string.format('%d', b)\n"                               \
	"  redis.call('RPUSH', prefix .. m, due .. ' ' .. id .. ' ' .. p)\n" \
	"  redis.call('ZADD', kbk, m, m)\n"                                  \
	"  return true\n"                                                    \
	"end\n"                                                              \
	"local function set_moved(kmv, id, cur, mv, last)\n"                 \
	"  if mv then\n"                                                     \
	"    last = math.max(last, tonumber(string.match(mv, ' (%d+)$')))\n" \
	"  end\n"                                                            \
	"  redis.call('HSET', kmv, id, cur .. ' ' .. string.format('%d', "   \
	"last))\n"                                                           \
	"end\n"                                                              \
	"local function current(kinf, kc, kmv, id, due)\n"                   \
	"  if redis.call('ZSCORE', kinf, id) or redis.call('ZSCORE', kc, "   \
	"id) then\n"                                                         \
	"    return false\n"                                                 \
	"  end\n"                                                            \
	"  local mv = redis.call('HGET', kmv, id)\n"                         \
	"  return not mv or string.match(mv, '^%d+') == due\n"               \
	"end\n"

/*
 * Index tasks loaded from the DB unless they are in flight, were cancelled
 * meanwhile or were rescheduled to another time (moved). A task whose
 * bucket (width ms of due time, 0: none) starts after edge (now + the
 * near window) is appended to it, the others go to due/task. In bulk: a
 * command per bucket and per key, not per task (a rebuild sends 2,000
 * tasks a call), and the in-flight/cancelled/moved lookups only where one
 * of those keys exists (none does after a rebuild's reset, or on a slot
 * nobody cancels or reschedules in).
 * KEYS: due, task, inflight, cancelled, bk, bucket prefix, moved
 * ARGV: edge, width, (id, due_ms, payload)...
 */
#define SCRIPT_INDEX                                                         \
	LUA_INDEXING                                                         \
	"local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])\n"         \
	"local any = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[7]) > 0\n"  \
	"local function batch(cmd, key, opt, t)\n"                           \
	"  local r = 0\n"                                                    \
	"  for j = 1, #t, 1000 do\n"                                         \
	"    local k = math.min(j + 999, #t)\n"                              \
	"    if opt then\n"                                                  \
	"      r = r + redis.call(cmd, key, opt, unpack(t, j, k))\n"         \
	"    else\n"                                                         \
	"      r = r + redis.call(cmd, key, unpack(t, j, k))\n"              \
	"    end\n"                                                          \
	"  end\n"                                                            \
	"  return r\n"                                                       \
	"end\n"                                                              \
	"local n = 0\n"                                                      \
	"local lists, names, bk, hs, zs = {}, {}, {}, {}, {}\n"              \
	"for i = 3, #ARGV, 3 do\n"                                           \
	"  local id, due = ARGV[i], ARGV[i + 1]\n"                           \
	"  if not any or current(KEYS[3], KEYS[4], KEYS[7], id, due) then\n" \
	"    local b = edge\n"                                               \
	"    if width > 0 then\n"                                            \
	"      local d = tonumber(due)\n"                                    \
	"      b = d - d % width\n"                                          \
	"    end\n"                                                          \
	"    if b > edge then\n"                                             \
	"      local m = string.format('%d', b)\n"                           \
	"      local l = lists[m]\n"                                         \
	"      if not l then\n"                                              \
	"        l = {}\n"                                                   \
	"        lists[m] = l\n"                                             \
	"        names[#names + 1] = m\n"                                    \
	"        bk[#bk + 1] = m\n"                                          \
	"        bk[#bk + 1] = m\n"                                          \
	"      end\n"                                                        \
	"      l[#l + 1] = due .. ' ' .. id .. ' ' .. ARGV[i + 2]\n"         \
	"      n = n + 1\n"                                                  \
	"    else\n"                                                         \
	"      hs[#hs + 1] = id\n"                                           \
	"      hs[#hs + 1] = ARGV[i + 2]\n"                                  \
	"      zs[#zs + 1] = due\n"                                          \
	"      zs[#zs + 1] = id\n"                                           \
	"    end\n"                                                          \
	"  end\n"                                                            \
	"end\n"                                                              \
	"for _, m in ipairs(names) do batch('RPUSH', KEYS[6] .. m, nil, "    \
	"lists[m]) end\n"                                                    \
	"batch('ZADD', KEYS[5], nil, bk)\n"                                  \
	"batch('HSET', KEYS[2], nil, hs)\n"                                  \
	"return n + batch('ZADD', KEYS[1], 'NX', zs)\n"

/*
 * Move the buckets that start at or before ARGV[2] (ms: now + the near
 * window) into due/task, fenced by the owner epoch, at most ARGV[3]
 * elements. A copy is dropped if its task is in flight, cancelled, or
 * moved to another due time (a bucket may hold several copies of a task:
 * indexers may repeat themselves; moving a current one twice is
 * harmless). Moved entries stay until trimmed (SCRIPT_MOVED_TRIM), an
 * hour after the last due time of any copy.
 * KEYS: due, task, inflight, cancelled, bk, bucket prefix, moved, epoch
 * ARGV: epoch, upto_ms, budget
 * Returns -1 if a higher epoch was recorded, else {moved, dropped, more,
 * earliest due moved or 0}: more is 1 if the budget ran out first.
 */
#define SCRIPT_MOVE                                                           \
	LUA_INDEXING                                                          \
	"local fence = tonumber(redis.call('GET', KEYS[8]) or '0')\n"         \
	"local epoch = tonumber(ARGV[1])\n"                                   \
	"if fence > epoch then return -1 end\n"                               \
	"if fence < epoch then redis.call('SET', KEYS[8], ARGV[1]) end\n"     \
	"local budget = tonumber(ARGV[3])\n"                                  \
	"local moved, dropped, more, first = 0, 0, 0, 0\n"                    \
	"local ms = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[2])\n"  \
	"for _, m in ipairs(ms) do\n"                                         \
	"  local key = KEYS[6] .. m\n"                                        \
	"  while budget > 0 do\n"                                             \
	"    local els = redis.call('LRANGE', key, 0, math.min(budget, 500) " \
	"- 1)\n"                                                              \
	"    if #els == 0 then break end\n"                                   \
	"    redis.call('LTRIM', key, #els, -1)\n"                            \
	"    budget = budget - #els\n"                                        \
	"    for _, el in ipairs(els) do\n"                                   \
	"      local a = string.find(el, ' ', 1, true)\n"                     \
	"      local b = string.find(el, ' ', a + 1, true)\n"                 \
	"      local due = string.sub(el, 1, a - 1)\n"                        \
	"      local id = string.sub(el, a + 1, b - 1)\n"                     \
	"      if current(KEYS[3], KEYS[4], KEYS[7], id, due) then\n"         \
	"        redis.call('HSET', KEYS[2], id, string.sub(el, b + 1))\n"    \
	"        redis.call('ZADD', KEYS[1], 'NX', due, id)\n"                \
	"        moved = moved + 1\n"                                         \
	"        local d = tonumber(due)\n"                                   \
	"        if first == 0 or d < first then first = d end\n"             \
	"      else\n"                                                        \
	"        dropped = dropped + 1\n"                                     \
	"      end\n"                                                         \
	"    end\n"                                                           \
	"  end\n"                                                             \
	"  if redis.call('EXISTS', key) == 0 then\n"                          \
	"    redis.call('ZREM', KEYS[5], m)\n"                                \
	"  else\n"                                                            \
	"    more = 1\n"                                                      \
	"    break\n"                                                         \
	"  end\n"                                                             \
	"end\n"                                                               \
	"return {moved, dropped, more, first}\n"

/*
 * One HSCAN step of a slot's moved entries: deletes those whose last copy
 * was due before ARGV[2]. KEYS: moved   ARGV: cursor, before_ms
 * Returns the next cursor.
 */
#define SCRIPT_MOVED_TRIM                                                    \
	"local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', 500)\n"    \
	"local before = tonumber(ARGV[2])\n"                                 \
	"for i = 1, #r[2], 2 do\n"                                           \
	"  local last = tonumber(string.match(r[2][i + 1], ' (%d+)$') or "   \
	"'0')\n"                                                             \
	"  if last < before then redis.call('HDEL', KEYS[1], r[2][i]) end\n" \
	"end\n"                                                              \
	"return r[1]\n"

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
 * Drop a slot's index before rebuilding it from the DB, fenced: due, task,
 * inflight, attempt, marker, the buckets and the moved entries (the DB
 * is the truth the rebuild reads).
 * KEYS: due, task, inflight, attempt, epoch, marker, bk, bucket prefix,
 * moved     ARGV: epoch
 */
#define SCRIPT_RESET                                                      \
	"local f = tonumber(redis.call('GET', KEYS[5]) or '0')\n"         \
	"local e = tonumber(ARGV[1])\n"                                   \
	"if f > e then return -1 end\n"                                   \
	"for _, m in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do\n"   \
	"  redis.call('DEL', KEYS[8] .. m)\n"                             \
	"end\n"                                                           \
	"redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], " \
	"KEYS[7],\n"                                                      \
	"           KEYS[9])\n"                                           \
	"redis.call('SET', KEYS[5], ARGV[1])\n"                           \
	"return 1\n"

/*
 * Cancel, race-free against claims: a task still due is removed (and
 * tombstoned); one in flight cannot be cancelled. The tombstone's time is
 * the later of now and the task's due time (it is trimmed an hour after):
 * it also drops a copy waiting in a bucket when that is moved. A task held
 * for its paused topic (held prefix .. topic; topic "" for none) leaves
 * its held set. A recurring task (series) is tombstoned even while an
 * occurrence is in flight, so that the worker recording that occurrence
 * does not index the next one (SCRIPT_CRON_NEXT). cancel_one returns -1
 * if (an occurrence is) in flight, else the removed due score (0: not
 * indexed).
 */
#define LUA_CANCEL                                                         \
	"local function cancel_one(kd, ki, kc, kh, id, now, due, series, " \
	"topic)\n"                                                         \
	"  local t = math.max(tonumber(now), tonumber(due))\n"             \
	"  if series then redis.call('ZADD', kc, t, id) end\n"             \
	"  if redis.call('ZSCORE', ki, id) then return -1 end\n"           \
	"  local h = nil\n"                                                \
	"  if topic ~= '' then\n"                                          \
	"    h = redis.call('ZSCORE', kh .. topic, id)\n"                  \
	"    if h then redis.call('ZREM', kh .. topic, id) end\n"          \
	"  end\n"                                                          \
	"  local s = redis.call('ZSCORE', kd, id) or h\n"                  \
	"  redis.call('ZREM', kd, id)\n"                                   \
	"  if not series then redis.call('ZADD', kc, t, id) end\n"         \
	"  if s then return tonumber(s) end\n"                             \
	"  return 0\n"                                                     \
	"end\n"

/* KEYS: due, inflight, cancelled, held prefix
 * ARGV: id, now_ms, due_ms, topic */
#define SCRIPT_CANCEL                                                     \
	LUA_CANCEL                                                        \
	"return cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], " \
	"ARGV[2], ARGV[3], false, ARGV[4])\n"

/* A recurring task. KEYS, ARGV: as SCRIPT_CANCEL. */
#define SCRIPT_CANCEL_SERIES                                              \
	LUA_CANCEL                                                        \
	"return cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], " \
	"ARGV[2], ARGV[3], true, ARGV[4])\n"

/*
 * Bulk cancel (manager/bulk.c): cancel_one for each task of a slot.
 * KEYS: due, inflight, cancelled, held prefix     ARGV: now_ms, (id,
 * due_ms, series 0/1, topic)...     Returns cancel_one's answer for each,
 * in order.
 */
#define SCRIPT_BULK_CANCEL                                                  \
	LUA_CANCEL                                                          \
	"local out = {}\n"                                                  \
	"for i = 2, #ARGV, 4 do\n"                                          \
	"  out[#out + 1] = cancel_one(KEYS[1], KEYS[2], KEYS[3], KEYS[4], " \
	"ARGV[i], ARGV[1], ARGV[i + 1], ARGV[i + 2] == '1', ARGV[i + 3])\n" \
	"end\n"                                                             \
	"return out\n"

/*
 * After the DB recorded an occurrence of a recurring task and scheduled
 * the next: its claim is dropped and the next occurrence indexed (in its
 * bucket if that starts after edge), unless the series was cancelled
 * meanwhile (tombstone) or the next occurrence is beyond the horizon
 * (payload "": the loader indexes it in time). A moved entry (the series
 * was rescheduled) takes the next occurrence as current.
 * KEYS: inflight, task, attempt, due, cancelled, bk, bucket prefix, moved
 * ARGV: edge, width, (id, next_due_ms, payload)...     Returns how many
 * were indexed.
 */
#define SCRIPT_CRON_NEXT                                                       \
	LUA_INDEXING                                                           \
	"local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])\n"           \
	"local n = 0\n"                                                        \
	"for i = 3, #ARGV, 3 do\n"                                             \
	"  local id, due = ARGV[i], ARGV[i + 1]\n"                             \
	"  redis.call('ZREM', KEYS[1], id)\n"                                  \
	"  redis.call('HDEL', KEYS[3], id)\n"                                  \
	"  redis.call('ZREM', KEYS[4], id)\n"                                  \
	"  local mv = redis.call('HGET', KEYS[8], id)\n"                       \
	"  if mv then set_moved(KEYS[8], id, due, mv, tonumber(due)) end\n"    \
	"  if ARGV[i + 2] == '' or redis.call('ZSCORE', KEYS[5], id) then\n"   \
	"    redis.call('HDEL', KEYS[2], id)\n"                                \
	"  elseif to_bucket(KEYS[6], KEYS[7], width, edge, id, due, ARGV[i + " \
	"2]) then\n"                                                           \
	"    redis.call('HDEL', KEYS[2], id)\n"                                \
	"    n = n + 1\n"                                                      \
	"  else\n"                                                             \
	"    redis.call('HSET', KEYS[2], id, ARGV[i + 2])\n"                   \
	"    redis.call('ZADD', KEYS[4], due, id)\n"                           \
	"    n = n + 1\n"                                                      \
	"  end\n"                                                              \
	"end\n"                                                                \
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
 * Reschedule, race-free against claims. The task leaves due/task; if a
 * copy may wait in a bucket (the bucket of its old due time exists, or it
 * was moved before), the moved entry records the new due time as current
 * and the latest due of any copy. It is indexed at the new time (in a
 * bucket if that starts after edge) unless payload is "" (beyond the
 * horizon: the loader indexes it). A task held for its paused topic
 * leaves its held set (it is held again when it falls due while the
 * topic is still paused). reschedule_one returns -1 if in flight, -2 if
 * cancelled, 1 if indexed at the new time, 0 if dropped from the index.
 * KEYS (of both scripts): due, task, inflight, cancelled, bk, bucket
 * prefix, moved, held prefix.
 */
#define LUA_RESCHEDULE                                                         \
	LUA_INDEXING                                                           \
	"local function reschedule_one(id, nd, p, edge, width, old, topic)\n"  \
	"  if redis.call('ZSCORE', KEYS[3], id) then return -1 end\n"          \
	"  if redis.call('ZSCORE', KEYS[4], id) then return -2 end\n"          \
	"  if topic ~= '' then redis.call('ZREM', KEYS[8] .. topic, id) end\n" \
	"  redis.call('ZREM', KEYS[1], id)\n"                                  \
	"  redis.call('HDEL', KEYS[2], id)\n"                                  \
	"  local mv = redis.call('HGET', KEYS[7], id)\n"                       \
	"  local ob = width > 0 and old - old % width or 0\n"                  \
	"  if mv or (width > 0 and redis.call('ZSCORE', KEYS[5], "             \
	"string.format('%d', ob))) then\n"                                     \
	"    set_moved(KEYS[7], id, nd, mv, math.max(old, tonumber(nd)))\n"    \
	"  end\n"                                                              \
	"  if p == '' then return 0 end\n"                                     \
	"  if not to_bucket(KEYS[5], KEYS[6], width, edge, id, nd, p) then\n"  \
	"    redis.call('HSET', KEYS[2], id, p)\n"                             \
	"    redis.call('ZADD', KEYS[1], nd, id)\n"                            \
	"  end\n"                                                              \
	"  return 1\n"                                                         \
	"end\n"

/* ARGV: id, new_due_ms, payload, edge, width, old_due_ms, topic */
#define SCRIPT_RESCHEDULE                                   \
	LUA_RESCHEDULE                                      \
	"return reschedule_one(ARGV[1], ARGV[2], ARGV[3], " \
	"tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])\n"

/*
 * Bulk reschedule (manager/bulk.c): reschedule_one for each task of a
 * slot. ARGV: edge, width, (id, new_due_ms, payload, old_due_ms, topic)...
 * Returns reschedule_one's answer for each, in order.
 */
#define SCRIPT_BULK_RESCHEDULE                                            \
	LUA_RESCHEDULE                                                    \
	"local edge, width = tonumber(ARGV[1]), tonumber(ARGV[2])\n"      \
	"local out = {}\n"                                                \
	"for i = 3, #ARGV, 5 do\n"                                        \
	"  out[#out + 1] = reschedule_one(ARGV[i], ARGV[i + 1], "         \
	"ARGV[i + 2], edge, width, tonumber(ARGV[i + 3]), ARGV[i + 4])\n" \
	"end\n"                                                           \
	"return out\n"

/*
 * Hold claimed tasks of a paused topic: out of inflight (their claim is
 * undone, the attempt was not counted) into the topic's held set, keyed by
 * their due time. Held even if no longer in flight (a rebuild reset the
 * slot meanwhile and skipped the task as ours): a copy also back in due is
 * held again by its claim, one without a payload is dropped by the claim
 * after the resume (and swept from the DB).
 * KEYS: inflight, held prefix     ARGV: topic, (id, due_ms)...
 * Returns how many were held.
 */
#define SCRIPT_HOLD                                       \
	"local k = KEYS[2] .. ARGV[1]\n"                  \
	"for i = 2, #ARGV, 2 do\n"                        \
	"  redis.call('ZREM', KEYS[1], ARGV[i])\n"        \
	"  redis.call('ZADD', k, ARGV[i + 1], ARGV[i])\n" \
	"end\n"                                           \
	"return (#ARGV - 1) / 2\n"

/*
 * Resume with skip (manager/topics.c), at least PAUSE_SETTLE_MS after the
 * pause (claims made before it reached the workers are published by then;
 * one in flight now is a claim being held): the tasks leave due, inflight
 * and their held set, lose their payload and get a tombstone (so no loader
 * or bucket indexes them again, and a claim or lift finds nothing to
 * publish); the caller then records them expired.
 * KEYS: due, inflight, cancelled, held prefix, task
 * ARGV: now_ms, topic, (id, due_ms)...   Returns the ids it removed.
 */
#define SCRIPT_SKIP                                                            \
	"local k = KEYS[4] .. ARGV[2]\n"                                       \
	"local now = tonumber(ARGV[1])\n"                                      \
	"local out = {}\n"                                                     \
	"for i = 3, #ARGV, 2 do\n"                                             \
	"  local id = ARGV[i]\n"                                               \
	"  redis.call('ZREM', KEYS[1], id)\n"                                  \
	"  redis.call('ZREM', KEYS[2], id)\n"                                  \
	"  redis.call('ZREM', k, id)\n"                                        \
	"  redis.call('HDEL', KEYS[5], id)\n"                                  \
	"  redis.call('ZADD', KEYS[3], math.max(now, tonumber(ARGV[i + 1])), " \
	"id)\n"                                                                \
	"  out[#out + 1] = id\n"                                               \
	"end\n"                                                                \
	"return out\n"

/*
 * Release held tasks of a resumed topic, oldest first: up to ARGV[2] of
 * them go back to due with their due time (overdue: the next scan claims
 * them at once). Returns the number released followed by the due times
 * of up to ARGV[3] tasks still held, oldest first (the heads the drain
 * merges across slots).
 * KEYS: due, held prefix     ARGV: topic, count, peek
 */
#define SCRIPT_LIFT                                                     \
	"local k = KEYS[2] .. ARGV[1]\n"                                \
	"local n = tonumber(ARGV[2])\n"                                 \
	"local out = {0}\n"                                             \
	"if n > 0 then\n"                                               \
	"  local r = redis.call('ZRANGE', k, 0, n - 1, 'WITHSCORES')\n" \
	"  for i = 1, #r, 2 do\n"                                       \
	"    redis.call('ZADD', KEYS[1], r[i + 1], r[i])\n"             \
	"    redis.call('ZREM', k, r[i])\n"                             \
	"  end\n"                                                       \
	"  out[1] = #r / 2\n"                                           \
	"end\n"                                                         \
	"local m = tonumber(ARGV[3])\n"                                 \
	"if m > 0 then\n"                                               \
	"  local r = redis.call('ZRANGE', k, 0, m - 1, 'WITHSCORES')\n" \
	"  for i = 2, #r, 2 do out[#out + 1] = tonumber(r[i]) end\n"    \
	"end\n"                                                         \
	"return out\n"

#endif
