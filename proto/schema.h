#ifndef PROPHET_SCHEMA_H
#define PROPHET_SCHEMA_H

#include <stddef.h>

/*
 * SQL schema, migrations and every statement the programs run. Statements
 * are constants with ? placeholders: user data only ever travels as bound
 * parameters.
 */
struct schema_migration {
	int version;
	const char *name;
	const char *const *stmts; /* NULL-terminated */
	/* A migration that rebuilds this table by copy (ALGORITHM=COPY: the
	 * table is locked while it runs), or NULL; such a migration runs at
	 * start only on a table of at most db.migrate_copy_max_rows rows. */
	const char *copies;
	/* A SELECT that counts more than 0 when the change is already in
	 * place (made by hand in a maintenance window): recorded, not run. */
	const char *done_sql;
};

extern const struct schema_migration schema_migrations[];
extern const size_t schema_migration_count;

/*
 * Columns written on submit, in bind order; one "(?,...)" row per task.
 * An id that exists already is left as it is (0 affected rows: the batch
 * then tells replays from conflicts). Not INSERT IGNORE: that would also
 * turn a value the column cannot hold into a warning and store it cut.
 * fired_at and delivered_at start as 0 ("not yet", as NULL is; both read
 * as null): the delivered record then no longer grows the row by two
 * 8-byte columns, which made InnoDB move rows and split full pages (an
 * UPDATE of 256 such rows: 49-60 -> 36 us of MariaDB CPU a row).
 */
#define SQL_TASK_INSERT_PREFIX                                             \
	"INSERT INTO tasks (id, slot, topic, msg_key, body, headers, "     \
	"callback, due_at, ttl_ms, max_attempts, status, "                 \
	"content_hash, batch_id, created_at, updated_at, cron, timezone, " \
	"misfire, start_at, end_at, max_occurrences, fired_at, "           \
	"delivered_at) VALUES "
#define SQL_TASK_INSERT_ROW \
	"(?,?,?,?,?,?,?,?,?,?,'scheduled',?,?,?,?,?,?,?,?,?,?,0,0)"
#define SQL_TASK_INSERT_SUFFIX " ON DUPLICATE KEY UPDATE id = id"
#define SQL_TASK_INSERT_NCOLS 20

/* Which of a batch's client-chosen ids were there before it. */
#define SQL_TASK_HASH_BY_ID \
	"SELECT content_hash, batch_id, status FROM tasks WHERE id = ?"

#define SQL_TASK_COLUMNS                                                      \
	"id, slot, topic, msg_key, body, headers, callback, due_at, ttl_ms, " \
	"max_attempts, status, attempt, epoch, owner, created_at, "           \
	"updated_at, fired_at, delivered_at, callback_status, cron, "         \
	"timezone, misfire, start_at, end_at, max_occurrences, occurrences"
enum sql_task_col {
	SQL_TC_ID,
	SQL_TC_SLOT,
	SQL_TC_TOPIC,
	SQL_TC_KEY,
	SQL_TC_BODY,
	SQL_TC_HEADERS,
	SQL_TC_CALLBACK,
	SQL_TC_DUE_AT,
	SQL_TC_TTL_MS,
	SQL_TC_MAX_ATTEMPTS,
	SQL_TC_STATUS,
	SQL_TC_ATTEMPT,
	SQL_TC_EPOCH,
	SQL_TC_OWNER,
	SQL_TC_CREATED_AT,
	SQL_TC_UPDATED_AT,
	SQL_TC_FIRED_AT,
	SQL_TC_DELIVERED_AT,
	SQL_TC_CALLBACK_STATUS,
	SQL_TC_CRON,
	SQL_TC_TIMEZONE,
	SQL_TC_MISFIRE,
	SQL_TC_START_AT,
	SQL_TC_END_AT,
	SQL_TC_MAX_OCCURRENCES,
	SQL_TC_OCCURRENCES,
	SQL_TC__COUNT
};
#define SQL_TASK_GET "SELECT " SQL_TASK_COLUMNS " FROM tasks WHERE id = ?"

/* The newest rows of a task's log, oldest first: (id, how many). */
#define SQL_TASK_LOG_GET                                                  \
	"SELECT from_status, to_status, actor, epoch, attempt, at, note " \
	"FROM (SELECT seq, from_status, to_status, actor, epoch, "        \
	"attempt, at, note FROM task_log WHERE task_id = ? "              \
	"ORDER BY seq DESC LIMIT ?) l ORDER BY seq"

/*
 * Outbox rule: a task leaves scheduled/firing only from a delivery report
 * (delivered, batched in worker/firing.c) or its ttl (expired, here), and
 * the epoch guard refuses a stale owner.
 */
#define SQL_TASK_MARK_EXPIRED                                       \
	"UPDATE tasks t LEFT JOIN slot_state s ON s.slot = t.slot " \
	"SET t.status = 'expired', t.updated_at = ? "               \
	"WHERE t.id = ? AND t.status IN ('scheduled', 'firing') "   \
	"AND COALESCE(s.epoch, 0) <= ?"

/* The fences a batch of delivered updates checks, FENCE_SLOTS slots a
 * statement (a shorter list repeats a slot). */
#define FENCE_SLOTS 16
#define SQL_SLOT_FENCES_SHARED                              \
	"SELECT slot, epoch FROM slot_state WHERE slot IN " \
	"(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) LOCK IN SHARE MODE"

/* A new owner raises the slot's fence before it publishes. */
/* Exactly-once: a slot's marker checkpoint (-1: none), and moving it
 * forward for the epoch that owns the slot (0 rows: not ours, or
 * backwards). */
#define SQL_EOS_CKPT_GET \
	"SELECT COALESCE(MAX(eos_offset), -1) FROM slot_state WHERE slot = ?"
#define SQL_EOS_CKPT_SET                                                       \
	"UPDATE slot_state SET eos_offset = ?, updated_at = ? WHERE slot = ? " \
	"AND epoch = ? AND eos_part = ? AND "                                  \
	"(eos_offset IS NULL OR eos_offset <= ?)"
/* Exactly-once: the slot's fence epoch, checkpoint and last producer
 * (its transactional id, NULL: none or handed over drained); recording
 * ours for the epoch that owns the slot (0 rows: not ours); clearing it
 * at a drained handover. eos_gen counts the changes (a row always
 * changes). */
#define SQL_EOS_SLOT_GET                                                      \
	"SELECT epoch, eos_offset, eos_txid, eos_part FROM slot_state WHERE " \
	"slot = ?"
#define SQL_EOS_CLAIM                                                 \
	"UPDATE slot_state SET eos_txid = ?, eos_gen = eos_gen + 1, " \
	"updated_at = ? WHERE slot = ? AND epoch = ?"
#define SQL_EOS_CLEAR                                                    \
	"UPDATE slot_state SET eos_txid = NULL, eos_gen = eos_gen + 1, " \
	"updated_at = ? WHERE slot = ? AND epoch = ? AND eos_txid = ?"
/* Exactly-once: once an open has recorded every marker it read in the
 * slot's last partition, the checkpoint moves to ours (an offset of it
 * before any marker of the slot we write), for our epoch and producer. */
#define SQL_EOS_SWITCH                                                      \
	"UPDATE slot_state SET eos_part = ?, eos_offset = ?, "              \
	"eos_gen = eos_gen + 1, updated_at = ? WHERE slot = ? AND epoch = " \
	"? AND eos_txid = ?"

#define SQL_SLOT_FENCE                                                       \
	"INSERT INTO slot_state (slot, epoch, updated_at) VALUES (?, ?, ?) " \
	"ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch)), "   \
	"updated_at = VALUES(updated_at)"

#define SQL_TASK_LOG_INSERT_PREFIX                                       \
	"INSERT INTO task_log (task_id, from_status, to_status, actor, " \
	"epoch, "                                                        \
	"attempt, at, note) VALUES "
#define SQL_TASK_LOG_INSERT_ROW "(?,?,?,?,?,?,?,?)"
#define SQL_TASK_LOG_INSERT_NCOLS 8

/* A callback outcome (notifier) of an occurrence (0 for a one-shot task):
 * ok and failed are final for that occurrence, so a replayed older attempt
 * cannot undo them; a later occurrence's outcome replaces them, an earlier
 * one's does not (params: status, occurrence, now, id, occurrence x2). */
#define SQL_TASK_CALLBACK_STATUS                                          \
	"UPDATE tasks SET callback_status = ?, callback_occurrence = ?, " \
	"updated_at = ? WHERE id = ? AND (callback_occurrence < ? OR "    \
	"(callback_occurrence = ? AND callback_status NOT IN ('ok', "     \
	"'failed')))"

/* The columns payload_from_row() reads, in its order. */
#define SQL_TASK_COLS_INDEX                                            \
	"id, topic, msg_key, body, headers, due_at, ttl_ms, attempt, " \
	"misfire, callback, max_attempts"

/* Scheduled tasks of one slot due in [from, to), for the horizon loader. */
#define SQL_TASK_DUE_IN_SLOT                                                  \
	"SELECT " SQL_TASK_COLS_INDEX " "                                     \
	"FROM tasks WHERE slot = ? AND status = 'scheduled' AND due_at >= ? " \
	"AND due_at < ? ORDER BY due_at LIMIT ?"

/* What a worker holds: every topic ever paused, paused or not, and the
 * rate its last resume gave. */
#define SQL_PAUSE_LIST \
	"SELECT topic, paused, rate, COALESCE(resumed_at, 0) FROM topic_pause"

/* Pausing and resuming a topic (manager/topics.c). A pause keeps the
 * first pause time of a topic paused twice. */
#define SQL_PAUSE_COUNT_OTHERS \
	"SELECT COUNT(*) FROM topic_pause WHERE paused = 1 AND topic <> ?"
#define SQL_PAUSE_SET                                                     \
	"INSERT INTO topic_pause (topic, paused, paused_at, updated_at) " \
	"VALUES (?, 1, ?, ?) ON DUPLICATE KEY UPDATE "                    \
	"paused_at = IF(paused = 1, paused_at, VALUES(paused_at)), "      \
	"paused = 1, resumed_at = NULL, policy = NULL, rate = 0, "        \
	"drain_until = 0, backlog = 0, updated_at = VALUES(updated_at)"
#define SQL_PAUSE_PAUSED                                  \
	"SELECT topic FROM topic_pause WHERE paused = 1 " \
	"ORDER BY topic"
#define SQL_PAUSE_GET_LOCK \
	"SELECT paused, paused_at FROM topic_pause WHERE topic = ? FOR UPDATE"
#define SQL_PAUSE_GET \
	"SELECT paused, paused_at FROM topic_pause WHERE topic = ?"
#define SQL_PAUSE_BACKLOG                                          \
	"SELECT COUNT(*) FROM tasks WHERE topic = ? AND status = " \
	"'scheduled' AND due_at <= ?"
/* The fire_all series of a topic that fell due while it was paused (topic,
 * now): each publishes every occurrence it missed, the drain paces them,
 * the backlog counts them. Columns as enum sql_cron_col. */
#define SQL_PAUSE_CATCH_UP                                                 \
	"SELECT cron, timezone, due_at, end_at, max_occurrences, "         \
	"occurrences FROM tasks WHERE topic = ? AND status = 'scheduled' " \
	"AND due_at <= ? AND cron IS NOT NULL AND misfire = 'fire_all'"
/* (resumed_at, policy, rate, drain_until, backlog, updated_at, topic) */
#define SQL_PAUSE_RESUME                                                  \
	"UPDATE topic_pause SET paused = 0, resumed_at = ?, policy = ?, " \
	"rate = ?, drain_until = ?, backlog = ?, updated_at = ? WHERE "   \
	"topic = ? AND paused = 1"
/* Resume with skip: one keyset page of the topic's one-shot tasks that
 * fell due while it was paused (topic, cutoff, after_due, after_due,
 * after_id); recurring tasks fire, their misfire policy decides. */
#define SQL_PAUSE_SKIP_PAGE                                                   \
	"SELECT id, slot, due_at, attempt, epoch FROM tasks WHERE topic = ? " \
	"AND status = 'scheduled' AND due_at <= ? AND cron IS NULL AND "      \
	"(due_at > ? OR (due_at = ? AND id > ?)) ORDER BY due_at, id LIMIT "  \
	"500"
/* (now, id, due_at as the page read it): a task rescheduled since (PATCH,
 * a bulk job) is not expired. */
#define SQL_PAUSE_SKIP_TASK                                    \
	"UPDATE tasks SET status = 'expired', updated_at = ? " \
	"WHERE id = ? AND status = 'scheduled' AND due_at = ?"
/* The tasks SCRIPT_SKIP took out of Redis that the DB did not expire,
 * still scheduled: indexed again (SQL_TASK_COLS_INDEX, then slot). */
#define SQL_PAUSE_SKIP_KEPT                                               \
	"SELECT " SQL_TASK_COLS_INDEX ", slot FROM tasks WHERE status = " \
	"'scheduled' AND id IN "
/* GET /v1/topics: the topics with scheduled tasks (a loose scan of
 * by_topic), each one's counts (a range of it), the pause rows, and the
 * tasks delivered since a time (by_status_updated: a task's last change
 * is at or after its delivery). */
#define SQL_TOPICS_SCHEDULED                                               \
	"SELECT topic, MIN(due_at) FROM tasks WHERE status = 'scheduled' " \
	"GROUP BY topic ORDER BY topic LIMIT 1000"
#define SQL_TOPICS_COUNTS                                                  \
	"SELECT COUNT(*), COALESCE(SUM(due_at <= ?), 0) FROM tasks WHERE " \
	"topic = ? AND status = 'scheduled'"
#define SQL_TOPICS_PAUSE_ROWS                                                \
	"SELECT topic, paused, paused_at, resumed_at, policy, rate, "        \
	"drain_until, backlog FROM topic_pause ORDER BY paused DESC, topic " \
	"LIMIT 1000"
#define SQL_TOPICS_FIRED                                                    \
	"SELECT topic, COUNT(*) FROM tasks WHERE status = 'delivered' AND " \
	"updated_at >= ? AND delivered_at >= ? GROUP BY topic"

/* Paused topics (topic_pause, worker/pause.c). DB mode leaves a paused
 * topic's tasks scheduled (a plain read of topic_pause: the locking read
 * of the outer SELECT does not lock the subquery's rows); the sweeper also
 * leaves a rate-limited drain's backlog alone while it runs (param: now),
 * as the drain moves it out of Redis's held sets at its own pace. */
#define SQL_NOT_PAUSED \
	"AND topic NOT IN (SELECT topic FROM topic_pause WHERE paused = 1) "
#define SQL_NOT_HELD_SWEEP                                              \
	"AND topic NOT IN (SELECT topic FROM topic_pause WHERE paused " \
	"= 1 OR drain_until > ?)"

/* Scheduled tasks of a slot overdue by a few seconds: normally none
 * (they fired, or are in flight in Redis); any other was never indexed
 * (an index write lost with a Redis connection, a manager that died
 * between its commit and its index write) and is swept into the index. */
#define SQL_TASK_OVERDUE                                              \
	"SELECT " SQL_TASK_COLS_INDEX " FROM tasks WHERE slot = ? "   \
	"AND status = 'scheduled' AND due_at < ? " SQL_NOT_HELD_SWEEP \
	" ORDER BY due_at LIMIT 1000"

/* The time pointer only moves forward. */
#define SQL_SLOT_POINTER                                                \
	"INSERT INTO slot_state (slot, loaded_until, updated_at) "      \
	"VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE "                     \
	"loaded_until = GREATEST(loaded_until, VALUES(loaded_until)), " \
	"updated_at = VALUES(updated_at)"

/* One keyset page of a slot's scheduled tasks due before a time, for
 * index rebuilds: (slot, before, after_due, after_due, after_id, limit). */
#define SQL_TASK_SCHEDULED_PAGE                                              \
	"SELECT " SQL_TASK_COLS_INDEX " "                                    \
	"FROM tasks WHERE slot = ? AND status = 'scheduled' AND due_at < ? " \
	"AND (due_at > ? OR (due_at = ? AND id > ?)) "                       \
	"ORDER BY due_at, id LIMIT ?"

/* DB mode (Redis unavailable). The claim runs in one transaction: the
 * fence row is locked and checked, due tasks are taken with SKIP LOCKED
 * (so nothing waits on a row someone else holds) and moved to firing. */
#define SQL_SLOT_EPOCH_LOCK \
	"SELECT epoch FROM slot_state WHERE slot = ? FOR UPDATE"
#define SQL_TASK_DUE_LOCK                                                   \
	"SELECT " SQL_TASK_COLS_INDEX " "                                   \
	"FROM tasks WHERE slot = ? AND status = 'scheduled' AND due_at <= " \
	"? " SQL_NOT_PAUSED "ORDER BY due_at LIMIT ? FOR UPDATE SKIP LOCKED"
#define SQL_TASK_MARK_FIRING                                                  \
	"UPDATE tasks SET status = 'firing', owner = ?, epoch = ?, "          \
	"attempt = attempt + 1, lease_until = ?, fired_at = ?, updated_at = " \
	"? "                                                                  \
	"WHERE id = ? AND status = 'scheduled'"

/* Tasks left firing by a publisher that died (DB mode). */
#define SQL_TASK_FIRING_EXPIRED                                      \
	"SELECT id FROM tasks WHERE slot = ? AND status = 'firing' " \
	"AND lease_until < ? LIMIT 1000"
#define SQL_TASK_REQUEUE                                                \
	"UPDATE tasks SET status = 'scheduled', owner = NULL, "         \
	"lease_until = NULL, updated_at = ? WHERE id = ? AND status = " \
	"'firing' "                                                     \
	"AND lease_until < ?"
#define SQL_TASK_PAYLOAD                  \
	"SELECT " SQL_TASK_COLS_INDEX " " \
	"FROM tasks WHERE id = ? AND status = 'scheduled'"

/* Restore with expired=true: expired tasks of a slot (or one task) are
 * scheduled again with their ttl cleared; the log rows first, params
 * (at, slot) or (at, id). */
#define SQL_TASK_LOG_REVIVE                                                 \
	"INSERT INTO task_log (task_id, from_status, to_status, actor, "    \
	"epoch, "                                                           \
	"attempt, at, note) SELECT id, 'expired', 'scheduled', 'manager', " \
	"epoch, attempt, ?, 'restore' FROM tasks WHERE slot = ? "           \
	"AND status = 'expired'"
#define SQL_TASK_REVIVE                                                      \
	"UPDATE tasks SET status = 'scheduled', ttl_ms = 0, updated_at = ? " \
	"WHERE slot = ? AND status = 'expired'"
#define SQL_TASK_LOG_REVIVE_ONE                                             \
	"INSERT INTO task_log (task_id, from_status, to_status, actor, "    \
	"epoch, "                                                           \
	"attempt, at, note) SELECT id, 'expired', 'scheduled', 'manager', " \
	"epoch, attempt, ?, 'restore' FROM tasks WHERE id = ? "             \
	"AND status = 'expired'"
#define SQL_TASK_REVIVE_ONE                                                  \
	"UPDATE tasks SET status = 'scheduled', ttl_ms = 0, updated_at = ? " \
	"WHERE id = ? AND status = 'expired'"

/* Cancel and reschedule: conditional on `scheduled`, a log row each. */
#define SQL_TASK_CANCEL                                          \
	"UPDATE tasks SET status = 'cancelled', updated_at = ? " \
	"WHERE id = ? AND status = 'scheduled'"
#define SQL_TASK_RESCHEDULE                            \
	"UPDATE tasks SET due_at = ?, updated_at = ? " \
	"WHERE id = ? AND status = 'scheduled'"
#define SQL_TASK_STATUS "SELECT status, due_at FROM tasks WHERE id = ?"

/*
 * Recurring tasks. An occurrence is recorded and the next one scheduled
 * in one statement, in the transaction of the delivered updates, and only
 * if the row still waits for exactly that occurrence (due_at): a
 * duplicate publish of an occurrence already recorded changes nothing.
 */
#define SQL_TASK_CRON_LOCK                                            \
	"SELECT cron, timezone, due_at, end_at, max_occurrences, "    \
	"occurrences, "                                               \
	"status FROM tasks WHERE id = ? AND status IN ('scheduled', " \
	"'firing') "                                                  \
	"FOR UPDATE"
enum sql_cron_col {
	SQL_CC_CRON,
	SQL_CC_TIMEZONE,
	SQL_CC_DUE_AT,
	SQL_CC_END_AT,
	SQL_CC_MAX_OCCURRENCES,
	SQL_CC_OCCURRENCES,
	SQL_CC_STATUS
};
/* (status, due_at, published 0/1, attempt, epoch, fired_at, delivered_at,
 *  now, id, occurrence) */
#define SQL_TASK_CRON_NEXT                                                \
	"UPDATE tasks SET status = ?, due_at = ?, "                       \
	"occurrences = occurrences + ?, attempt = ?, epoch = ?, owner = " \
	"NULL, "                                                          \
	"lease_until = NULL, fired_at = COALESCE(?, fired_at), "          \
	"delivered_at = COALESCE(?, delivered_at), updated_at = ? "       \
	"WHERE id = ? AND status IN ('scheduled', 'firing') AND due_at = ?"
/* PATCH of a recurring task's expression: (cron, timezone, due_at, now,
 * id). */
#define SQL_TASK_RESCHEDULE_CRON                                               \
	"UPDATE tasks SET cron = ?, timezone = ?, due_at = ?, updated_at = ? " \
	"WHERE id = ? AND status = 'scheduled' AND cron IS NOT NULL"

/* Listing, newest due last, keyset-paged on (due_at, id). The variants
 * differ only in which filters they carry; values are always bound. */
#define SQL_TASK_LIST_COLS                                                   \
	"SELECT id, topic, status, due_at, attempt, created_at, updated_at " \
	"FROM tasks WHERE (due_at > ? OR (due_at = ? AND id > ?)) "          \
	"AND due_at >= ? AND due_at < ? "
#define SQL_TASK_LIST_ORDER " ORDER BY due_at, id LIMIT ?"

/* A cluster secret: made once by whoever comes first (random bytes), the
 * same for everyone after. */
#define SQL_SECRET_CREATE                                               \
	"INSERT IGNORE INTO cluster_secret (name, secret, created_at) " \
	"VALUES (?, ?, ?)"
#define SQL_SECRET_GET "SELECT secret FROM cluster_secret WHERE name = ?"

/*
 * Retention (manager/prune.c). A task that reached delivered, cancelled
 * or expired never leaves it but through a restore of an expired one;
 * updated_at is its last change (the final transition, or a callback
 * outcome after it). Every statement names the index built for it.
 */
#define SQL_PRUNE_STATE_INIT \
	"INSERT IGNORE INTO prune_state (name) VALUES ('pruner')"
/* A new holder of the ZooKeeper lock raises the fence (holder, now). */
#define SQL_PRUNE_FENCE_RAISE                                    \
	"UPDATE prune_state SET epoch = epoch + 1, holder = ?, " \
	"updated_at = ? WHERE name = 'pruner'"
/* Every prune transaction starts with it: the row lock serialises them,
 * the epoch tells a deposed holder to stop. */
#define SQL_PRUNE_FENCE \
	"SELECT epoch FROM prune_state WHERE name = 'pruner' FOR UPDATE"
#define SQL_PRUNE_STATE_GET                                              \
	"SELECT epoch, holder, pass, started_at, finished_at, cutoff, "  \
	"log_cutoff, eligible, deleted_delivered, deleted_cancelled, "   \
	"deleted_expired, deleted_logs, archived, chunks, resumed, "     \
	"requested_at, archive_offsets, last_pass, log_seq, updated_at " \
	"FROM prune_state WHERE name = 'pruner'"
enum sql_prune_col {
	SQL_PS_EPOCH,
	SQL_PS_HOLDER,
	SQL_PS_PASS,
	SQL_PS_STARTED_AT,
	SQL_PS_FINISHED_AT,
	SQL_PS_CUTOFF,
	SQL_PS_LOG_CUTOFF,
	SQL_PS_ELIGIBLE,
	SQL_PS_DELETED_DELIVERED,
	SQL_PS_DELETED_CANCELLED,
	SQL_PS_DELETED_EXPIRED,
	SQL_PS_DELETED_LOGS,
	SQL_PS_ARCHIVED,
	SQL_PS_CHUNKS,
	SQL_PS_RESUMED,
	SQL_PS_REQUESTED_AT,
	SQL_PS_ARCHIVE_OFFSETS,
	SQL_PS_LAST_PASS,
	SQL_PS_LOG_SEQ,
	SQL_PS_UPDATED_AT
};
/* (started_at, cutoff, log_cutoff, eligible, now) */
#define SQL_PRUNE_PASS_NEW                                                    \
	"UPDATE prune_state SET pass = pass + 1, started_at = ?, "            \
	"finished_at = NULL, cutoff = ?, log_cutoff = ?, eligible = ?, "      \
	"deleted_delivered = 0, deleted_cancelled = 0, deleted_expired = 0, " \
	"deleted_logs = 0, archived = 0, chunks = 0, resumed = 0, "           \
	"updated_at = ? WHERE name = 'pruner'"
#define SQL_PRUNE_PASS_RESUME                                           \
	"UPDATE prune_state SET resumed = resumed + 1, updated_at = ? " \
	"WHERE name = 'pruner'"
/* (delivered, cancelled, expired, logs, archived, offsets or NULL, log
 * cursor, now) */
#define SQL_PRUNE_PROGRESS                                                   \
	"UPDATE prune_state SET deleted_delivered = deleted_delivered + ?, " \
	"deleted_cancelled = deleted_cancelled + ?, "                        \
	"deleted_expired = deleted_expired + ?, "                            \
	"deleted_logs = deleted_logs + ?, archived = archived + ?, "         \
	"chunks = chunks + 1, "                                              \
	"archive_offsets = COALESCE(?, archive_offsets), "                   \
	"log_seq = GREATEST(log_seq, ?), updated_at = ? "                    \
	"WHERE name = 'pruner'"
/* (finished_at, last_pass JSON, now) */
#define SQL_PRUNE_PASS_END                                        \
	"UPDATE prune_state SET finished_at = ?, last_pass = ?, " \
	"updated_at = ? WHERE name = 'pruner'"
#define SQL_PRUNE_REQUEST                                          \
	"UPDATE prune_state SET requested_at = ?, updated_at = ? " \
	"WHERE name = 'pruner'"
#define SQL_PRUNE_OFFSETS                                             \
	"UPDATE prune_state SET archive_offsets = ?, updated_at = ? " \
	"WHERE name = 'pruner'"
/* The next candidates of a status, oldest first, keyset-paged on
 * (updated_at, id): (status, cutoff, after, after, after_id, limit). */
#define SQL_PRUNE_CANDIDATES                                                \
	"SELECT id, updated_at FROM tasks FORCE INDEX (by_status_updated) " \
	"WHERE status = ? AND updated_at < ? AND (updated_at > ? OR "       \
	"(updated_at = ? AND id > ?)) ORDER BY updated_at, id LIMIT ?"
/* Index-only counts and ages: (status, from, to). */
#define SQL_PRUNE_COUNT                                                 \
	"SELECT COUNT(*), MIN(updated_at) FROM tasks FORCE INDEX "      \
	"(by_status_updated) WHERE status = ? AND updated_at >= ? AND " \
	"updated_at < ?"
/* Kept although old enough: a callback still retrying (status, cutoff). */
#define SQL_PRUNE_HELD                                                      \
	"SELECT COUNT(*) FROM tasks FORCE INDEX (by_status_updated) WHERE " \
	"status = ? AND updated_at < ? AND callback_status = 'retrying'"
/* The oldest finished task a pass could delete (status): one a retrying
 * callback keeps is not the pruner's backlog. In index order, it stops at
 * the first row that is not retrying. */
#define SQL_PRUNE_OLDEST                                                \
	"SELECT updated_at FROM tasks FORCE INDEX (by_status_updated) " \
	"WHERE status = ? AND callback_status <> 'retrying' ORDER BY "  \
	"updated_at LIMIT 1"
/* The lock of a chunk re-checks what made its rows candidates; rows
 * someone else holds are left for the next pass. */
#define SQL_PRUNE_LOCK_IDS                                                 \
	"SELECT id FROM tasks FORCE INDEX (PRIMARY) WHERE status = ? AND " \
	"updated_at < ? AND callback_status <> 'retrying' AND id IN ("
#define SQL_PRUNE_LOCK_ROWS                                             \
	"SELECT " SQL_TASK_COLUMNS " FROM tasks FORCE INDEX (PRIMARY) " \
	"WHERE status = ? AND updated_at < ? AND callback_status <> "   \
	"'retrying' AND id IN ("
#define SQL_PRUNE_LOCK_SUFFIX ") ORDER BY id FOR UPDATE SKIP LOCKED"
/* What a pruner archived but did not delete (archive_recover). */
#define SQL_PRUNE_LOCK_ARCHIVED                                           \
	"SELECT id, status, updated_at FROM tasks FORCE INDEX (PRIMARY) " \
	"WHERE status IN ('delivered', 'cancelled', 'expired') AND id IN ("
#define SQL_PRUNE_LOG_ROWS                                                    \
	"SELECT task_id, from_status, to_status, actor, epoch, attempt, at, " \
	"note FROM task_log WHERE task_id IN ("
#define SQL_PRUNE_LOG_ROWS_SUFFIX ") ORDER BY task_id, seq"
#define SQL_PRUNE_DELETE_TASKS "DELETE FROM tasks WHERE id IN ("
#define SQL_PRUNE_DELETE_LOGS "DELETE FROM task_log WHERE task_id IN ("
/* task.log_retention: the log rows after a cursor, oldest first, and
 * whether their task is gone or a recurring series (a one-shot task keeps
 * its rows until it is pruned with them). A consistent read: no lock on
 * the tasks it looks at. (cursor, limit) */
#define SQL_PRUNE_LOG_HEAD                                                  \
	"SELECT l.seq, l.at, t.id IS NULL OR t.cron IS NOT NULL FROM "      \
	"task_log l LEFT JOIN tasks t ON t.id = l.task_id WHERE l.seq > ? " \
	"ORDER BY l.seq LIMIT ?"
#define SQL_PRUNE_LOG_DELETE "DELETE FROM task_log WHERE at < ? AND seq IN ("

#endif
