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

const struct schema_migration schema_migrations[] = {
	{1, "tasks, task_log, slot_state", v1_stmts},
	{2, "recurring tasks: misfire, start_at, end_at, occurrences",
	 v2_stmts},
	{3, "cluster_secret", v3_stmts},
};

const size_t schema_migration_count =
	sizeof(schema_migrations) / sizeof(schema_migrations[0]);
