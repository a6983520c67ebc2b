#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "db.h"
#include "log.h"
#include "manager.h"
#include "schema.h"

static int
current_version(struct db_conn *c, int *version)
{
	long long v;

	if (db_simple(c, "CREATE TABLE IF NOT EXISTS prophet_schema ("
			 " version INT NOT NULL PRIMARY KEY,"
			 " name VARCHAR(255) NOT NULL,"
			 " applied_at BIGINT NOT NULL) ENGINE=InnoDB") < 0)
		return -1;
	if (db_query_int(c,
			 "SELECT COALESCE(MAX(version), 0) FROM prophet_schema",
			 NULL, 0, &v) < 0)
		return -1;
	*version = (int)v;
	return 0;
}

static int
record(struct db_conn *c, const struct schema_migration *m)
{
	struct db_params p;
	int r;

	db_params_init(&p, 3);
	db_params_int(&p, m->version);
	db_params_str(&p, m->name);
	db_params_int(&p, clock_now_ms());
	r = db_exec(c,
		    "INSERT INTO prophet_schema (version, name, applied_at) "
		    "VALUES (?, ?, ?)",
		    &p, NULL);
	db_params_free(&p);
	return r;
}

/*
 * Runs one migration: 1 applied, 0 deferred (it copies a table larger
 * than copy_max rows: the manager runs on the schema it has and says what
 * to run in a maintenance window), -1 failed.
 */
static int
apply_one(struct db_conn *c, const struct schema_migration *m,
	  long long copy_max)
{
	struct db_params p;
	long long n = -1;

	if (m->done_sql != NULL) {
		if (db_query_int(c, m->done_sql, NULL, -1, &n) < 0)
			return -1;
		if (n > 0) {
			log_info("migration already in place, recorded",
				 "version=%d", m->version);
			return record(c, m) < 0 ? -1 : 1;
		}
	}
	if (m->copies != NULL) {
		db_params_init(&p, 1);
		db_params_str(&p, m->copies);
		if (db_query_int(
			    c,
			    "SELECT TABLE_ROWS FROM information_schema.TABLES "
			    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = "
			    "?",
			    &p, -1, &n) < 0) {
			db_params_free(&p);
			return -1;
		}
		db_params_free(&p);
		if (n > copy_max) {
			log_warn("migration deferred: it rebuilds a table by "
				 "copy, locking it; run the statements in a "
				 "maintenance window (or raise "
				 "db.migrate_copy_max_rows), then restart a "
				 "manager",
				 "version=%d name=\"%s\" table=%s rows=%lld "
				 "max_rows=%lld",
				 m->version, m->name, m->copies, n, copy_max);
			for (const char *const *s = m->stmts; *s != NULL; s++)
				log_warn("deferred migration statement",
					 "version=%d sql=\"%s\"", m->version,
					 *s);
			return 0;
		}
		log_info("migration copies a table",
			 "version=%d table=%s "
			 "rows=%lld",
			 m->version, m->copies, n);
	}
	for (const char *const *s = m->stmts; *s != NULL; s++)
		if (db_simple(c, *s) < 0)
			return -1;
	return record(c, m) < 0 ? -1 : 1;
}

/* Several managers may start at once: a named lock serialises them, and
 * each step is idempotent anyway. */
int
migrate_apply(const struct db_dsn *dsn, int wait_s, long long copy_max,
	      char *err, size_t errlen)
{
	struct db_conn *c = NULL;
	struct db_rows rows;
	int version, known, refused, r, rc = -1;

	for (int i = 0; i <= wait_s; i++) {
		c = db_conn_open(dsn, &refused, err, errlen);
		if (c != NULL || refused)
			break;
		if (i == 0 || i % 10 == 0)
			log_warn("waiting for the database", "error=\"%s\"",
				 err);
		sleep(1);
	}
	if (c == NULL)
		return -1;
	if (db_query(c, "SELECT GET_LOCK('prophet_migrate', 60)", NULL, &rows) <
	    0)
		goto out;
	db_rows_free(&rows);
	if (current_version(c, &version) < 0)
		goto out;
	for (size_t i = 0; i < schema_migration_count; i++) {
		const struct schema_migration *m = &schema_migrations[i];

		if (m->version <= version)
			continue;
		log_info("applying migration", "version=%d name=\"%s\"",
			 m->version, m->name);
		r = apply_one(c, m, copy_max);
		if (r < 0)
			goto out;
		if (r == 0)
			break; /* versions apply in order */
		version = m->version;
	}
	known = schema_migrations[schema_migration_count - 1].version;
	if (version > known)
		log_warn("database schema newer than this manager: a later "
			 "version migrated it (a downgrade, or a manager not "
			 "upgraded yet); upgrade this manager",
			 "version=%d known=%d", version, known);
	log_info("database schema ready", "version=%d", version);
	rc = 0;
out:
	if (rc < 0)
		snprintf(err, errlen, "migration: %s", db_conn_error(c));
	if (db_query(c, "SELECT RELEASE_LOCK('prophet_migrate')", NULL,
		     &rows) == 0)
		db_rows_free(&rows);
	db_conn_close(c);
	return rc;
}
