#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "schema.h"

static const char *const v1_stmts[] = {
	"CREATE TABLE IF NOT EXISTS tasks ("
	" id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" slot SMALLINT UNSIGNED NOT NULL,"
	" topic VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" msg_key VARBINARY(1024) NULL,"
	" body MEDIUMBLOB NOT NULL,"
	" headers TEXT NULL,"
	" callback TEXT NULL,"
	" due_at BIGINT NOT NULL,"
	" ttl_ms BIGINT NOT NULL DEFAULT 0,"
	" max_attempts INT NOT NULL DEFAULT 0,"
	" priority INT NOT NULL DEFAULT 0,"
	" cron VARCHAR(128) NULL,"
	" timezone VARCHAR(64) NULL,"
	" status VARCHAR(10) CHARACTER SET ascii NOT NULL,"
	" attempt INT NOT NULL DEFAULT 0,"
	" epoch BIGINT NOT NULL DEFAULT 0,"
	" owner VARCHAR(128) NULL,"
	" lease_until BIGINT NULL,"
	" callback_status VARCHAR(10) CHARACTER SET ascii NOT NULL"
	"  DEFAULT 'none',"
	" content_hash BIGINT UNSIGNED NOT NULL,"
	" batch_id BIGINT UNSIGNED NOT NULL,"
	" created_at BIGINT NOT NULL,"
	" updated_at BIGINT NOT NULL,"
	" fired_at BIGINT NULL,"
	" delivered_at BIGINT NULL,"
	" PRIMARY KEY (id),"
	" KEY due_by_slot (slot, status, due_at),"
	" KEY by_topic (topic, status, due_at)"
	") ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS task_log ("
	" seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
	" task_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" from_status VARCHAR(10) CHARACTER SET ascii NOT NULL,"
	" to_status VARCHAR(10) CHARACTER SET ascii NOT NULL,"
	" actor VARCHAR(128) NOT NULL,"
	" epoch BIGINT NOT NULL DEFAULT 0,"
	" attempt INT NOT NULL DEFAULT 0,"
	" at BIGINT NOT NULL,"
	" note VARCHAR(255) NULL,"
	" PRIMARY KEY (seq),"
	" KEY by_task (task_id, seq)"
	") ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS slot_state ("
	" slot SMALLINT UNSIGNED NOT NULL,"
	" epoch BIGINT NOT NULL DEFAULT 0,"
	" loaded_until BIGINT NOT NULL DEFAULT 0,"
	" updated_at BIGINT NOT NULL DEFAULT 0,"
	" PRIMARY KEY (slot)"
	") ENGINE=InnoDB",
	NULL};

/* Recurring tasks (cron): the misfire policy, the window and the count of
 * published occurrences. cron and timezone are in v1. Self-contained, so
 * it can be renumbered when merged after other migrations. */
static const char *const v2_stmts[] = {
	"ALTER TABLE tasks"
	" ADD COLUMN IF NOT EXISTS misfire VARCHAR(10) CHARACTER SET ascii"
	"  NULL,"
	" ADD COLUMN IF NOT EXISTS start_at BIGINT NULL,"
	" ADD COLUMN IF NOT EXISTS end_at BIGINT NULL,"
	" ADD COLUMN IF NOT EXISTS max_occurrences BIGINT NULL,"
	" ADD COLUMN IF NOT EXISTS occurrences BIGINT NOT NULL DEFAULT 0",
	NULL};

/* Cluster secrets (the notifier's retry-signing key): created by the
 * manager at start with INSERT IGNORE, read by manager and notifier.
 * Self-contained, so it can be renumbered when merged after other
 * migrations. */
static const char *const v3_stmts[] = {
	"CREATE TABLE IF NOT EXISTS cluster_secret ("
	" name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" secret VARBINARY(64) NOT NULL,"
	" created_at BIGINT NOT NULL,"
	" PRIMARY KEY (name)"
	") ENGINE=InnoDB",
	NULL};

/* Retention (issue 19): the pruner finds finished tasks by status and
 * last change (updated_at: the final transition, or a callback outcome
 * after it), oldest first, in an index built for it; its progress and the
 * fence that keeps a deposed pruner out are one row of prune_state.
 * Online: the column set does not change, and the index is built
 * in place while submissions, claims and delivery records go on (LOCK=NONE
 * refuses to run otherwise). Self-contained, so it can be renumbered when
 * merged after other migrations. */
static const char *const v4_stmts[] = {
	"ALTER TABLE tasks ADD INDEX IF NOT EXISTS by_status_updated"
	" (status, updated_at), ALGORITHM=INPLACE, LOCK=NONE",
	"CREATE TABLE IF NOT EXISTS prune_state ("
	" name VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" epoch BIGINT NOT NULL DEFAULT 0,"
	" holder VARCHAR(255) NULL,"
	" pass BIGINT NOT NULL DEFAULT 0,"
	" started_at BIGINT NULL,"
	" finished_at BIGINT NULL,"
	" cutoff BIGINT NOT NULL DEFAULT 0,"
	" log_cutoff BIGINT NOT NULL DEFAULT 0,"
	" eligible BIGINT NOT NULL DEFAULT 0,"
	" deleted_delivered BIGINT NOT NULL DEFAULT 0,"
	" deleted_cancelled BIGINT NOT NULL DEFAULT 0,"
	" deleted_expired BIGINT NOT NULL DEFAULT 0,"
	" deleted_logs BIGINT NOT NULL DEFAULT 0,"
	" archived BIGINT NOT NULL DEFAULT 0,"
	" chunks BIGINT NOT NULL DEFAULT 0,"
	" resumed INT NOT NULL DEFAULT 0,"
	" requested_at BIGINT NOT NULL DEFAULT 0,"
	" archive_offsets TEXT NULL,"
	" last_pass TEXT NULL,"
	" log_seq BIGINT NOT NULL DEFAULT 0,"
	" updated_at BIGINT NOT NULL DEFAULT 0,"
	" PRIMARY KEY (name)"
	") ENGINE=InnoDB",
	NULL};

/* Storage (issue 19): status and callback_status as 1-byte ENUMs instead
 * of VARCHAR(10), in the row and in the three secondary indexes that
 * start with or hold status (about 36 bytes a task of ~880). Values compare
 * and bind as the same strings; new values go at the end of a list
 * (an instant change). Changing a column's type copies the table. */
static const char *const v5_stmts[] = {
	"ALTER TABLE tasks"
	" MODIFY status ENUM('scheduled', 'firing', 'delivered', 'cancelled',"
	"  'expired') CHARACTER SET ascii NOT NULL,"
	" MODIFY callback_status ENUM('none', 'ok', 'retrying', 'failed')"
	"  CHARACTER SET ascii NOT NULL DEFAULT 'none',"
	" ALGORITHM=COPY",
	NULL};

#define V5_DONE                                                         \
	"SELECT COUNT(*) FROM information_schema.COLUMNS WHERE "        \
	"TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tasks' AND "       \
	"COLUMN_NAME IN ('status', 'callback_status') AND DATA_TYPE = " \
	"'enum' HAVING COUNT(*) = 2"

/* Paused topics (issue 22): one row per topic ever paused. paused=1 holds
 * its tasks; a resume keeps the row with its policy and, for a
 * rate-limited fire, drain_until (the end of the drain at that rate), so
 * that the sweeper leaves the backlog to the drain. Self-contained, so it
 * can be renumbered when merged after other migrations. */
static const char *const v6_stmts[] = {
	"CREATE TABLE IF NOT EXISTS topic_pause ("
	" topic VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
	" paused TINYINT NOT NULL DEFAULT 0,"
	" paused_at BIGINT NOT NULL DEFAULT 0,"
	" resumed_at BIGINT NULL,"
	" policy VARCHAR(8) CHARACTER SET ascii NULL,"
	" rate INT NOT NULL DEFAULT 0,"
	" drain_until BIGINT NOT NULL DEFAULT 0,"
	" backlog BIGINT NOT NULL DEFAULT 0,"
	" updated_at BIGINT NOT NULL DEFAULT 0,"
	" PRIMARY KEY (topic)"
	") ENGINE=InnoDB",
	NULL};

/* Bulk jobs (issue 22): a cancel or reschedule of every scheduled task a
 * filter matches, run in keyset chunks by one manager at a time. The row
 * is the job's audit record (who, filter, counts) and its resumable
 * state: the cursor (the last id done) moves in the transaction of the
 * chunk it ends, the epoch fences a manager that lost the job's lease.
 * Self-contained, so it can be renumbered when merged after other
 * migrations. */
static const char *const v7_stmts[] = {
	"CREATE TABLE IF NOT EXISTS bulk_jobs ("
	" id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
	" action VARCHAR(8) CHARACTER SET ascii NOT NULL,"
	" filter TEXT NOT NULL,"
	" by_ms BIGINT NULL,"
	" due_at BIGINT NULL,"
	" who VARCHAR(128) NOT NULL,"
	" state VARCHAR(10) CHARACTER SET ascii NOT NULL,"
	" total BIGINT NOT NULL DEFAULT 0,"
	" cursor_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin"
	"  NOT NULL DEFAULT '',"
	" scanned BIGINT NOT NULL DEFAULT 0,"
	" changed BIGINT NOT NULL DEFAULT 0,"
	" firing BIGINT NOT NULL DEFAULT 0,"
	" skipped BIGINT NOT NULL DEFAULT 0,"
	" firing_ids TEXT NULL,"
	" chunks BIGINT NOT NULL DEFAULT 0,"
	" resumed INT NOT NULL DEFAULT 0,"
	" epoch BIGINT NOT NULL DEFAULT 0,"
	" owner VARCHAR(255) NULL,"
	" lease_until BIGINT NOT NULL DEFAULT 0,"
	" created_at BIGINT NOT NULL,"
	" started_at BIGINT NULL,"
	" finished_at BIGINT NULL,"
	" updated_at BIGINT NOT NULL,"
	" PRIMARY KEY (id),"
	" KEY by_state (state, id)"
	") ENGINE=InnoDB",
	NULL};

/* priority (issue 22): accepted, stored and never used; the API refuses
 * it now. Dropping a column that is in no index is instant in MariaDB
 * 10.4+ (ALGORITHM=INSTANT fails rather than copy). Managers of the
 * version before still write the column: upgrade them together.
 * Self-contained, so it can be renumbered when merged after other
 * migrations. */
static const char *const v8_stmts[] = {
	"ALTER TABLE tasks DROP COLUMN IF EXISTS priority, ALGORITHM=INSTANT",
	NULL};

/* Exactly-once publishing (kafka.exactly_once): per slot, the offset of
 * the marker topic's partition below which every marker's task is
 * recorded in this database (a new owner reads the markers from there).
 * Self-contained, so it can be renumbered when merged after other
 * migrations. */
static const char *const v9_stmts[] = {
	"ALTER TABLE slot_state ADD COLUMN IF NOT EXISTS eos_offset BIGINT "
	"NULL",
	NULL};

/* Exactly-once publishing with one producer per worker: per slot, the
 * transactional id of the producer that last published for it (the next
 * owner fences it), and a change counter. */
static const char *const v10_stmts[] = {
	"ALTER TABLE slot_state ADD COLUMN IF NOT EXISTS eos_txid "
	"VARCHAR(512) NULL",
	"ALTER TABLE slot_state ADD COLUMN IF NOT EXISTS eos_gen BIGINT NOT "
	"NULL DEFAULT 0",
	NULL};

/* Exactly-once markers in the partition of the producer that wrote them
 * (one per worker) instead of the slot's: per slot, the partition its
 * checkpoint is an offset of (NULL: the slot's own partition, as the
 * markers of workers before this change were). */
static const char *const v11_stmts[] = {
	"ALTER TABLE slot_state ADD COLUMN IF NOT EXISTS eos_part INT NULL",
	NULL};

/* The occurrence a recurring task's callback_status is of (0: a one-shot
 * task's), so that a later occurrence's outcome replaces an earlier one's
 * final ok or failed. Adding a column is instant in MariaDB 10.3+.
 * Self-contained, so it can be renumbered when merged after other
 * migrations. */
static const char *const v12_stmts[] = {
	"ALTER TABLE tasks ADD COLUMN IF NOT EXISTS callback_occurrence "
	"BIGINT NOT NULL DEFAULT 0, ALGORITHM=INSTANT",
	NULL};

/* Who cancelled a bulk job (POST /v1/admin/jobs/{id}/cancel). Adding a
 * column is instant. Self-contained, so it can be renumbered when merged
 * after other migrations. */
static const char *const v13_stmts[] = {
	"ALTER TABLE bulk_jobs ADD COLUMN IF NOT EXISTS cancelled_by "
	"VARCHAR(128) NULL, ALGORITHM=INSTANT",
	NULL};

const struct schema_migration schema_migrations[] = {
	{1, "tasks, task_log, slot_state", v1_stmts, NULL, NULL},
	{2, "recurring tasks: misfire, start_at, end_at, occurrences", v2_stmts,
	 NULL, NULL},
	{3, "cluster_secret", v3_stmts, NULL, NULL},
	{4, "retention: index by status and last change, prune_state", v4_stmts,
	 NULL, NULL},
	{5, "status and callback_status as ENUM", v5_stmts, "tasks", V5_DONE},
	{6, "topic_pause", v6_stmts, NULL, NULL},
	{7, "bulk_jobs", v7_stmts, NULL, NULL},
	{8, "drop tasks.priority", v8_stmts, NULL, NULL},
	{9, "slot_state.eos_offset (exactly-once checkpoint)", v9_stmts, NULL,
	 NULL},
	{10, "slot_state.eos_txid, eos_gen (exactly-once producer)", v10_stmts,
	 NULL, NULL},
	{11, "slot_state.eos_part (exactly-once marker partition)", v11_stmts,
	 NULL, NULL},
	{12, "tasks.callback_occurrence (recurring callbacks)", v12_stmts, NULL,
	 NULL},
	{13, "bulk_jobs.cancelled_by", v13_stmts, NULL, NULL},
};

const size_t schema_migration_count =
	sizeof(schema_migrations) / sizeof(schema_migrations[0]);
