#ifndef PROPHET_DB_H
#define PROPHET_DB_H

#include <stddef.h>
#include <stdint.h>

#include <mysql.h>

#include "rows.h"

struct event_base;
struct cfg;

/*
 * MariaDB Connector/C calls block, so they run on a small pool of threads,
 * each with its own connection. The loop thread submits jobs; a job's run()
 * executes on a pool thread, then its done_cb() on the loop thread (the
 * pool hands finished jobs back through a mailbox.h mailbox).
 * Prepared statements only: every value is bound, never spliced into SQL.
 *
 * Between submit and done_cb the job belongs to the pool. run() reads and
 * writes only the job and what the job alone holds: it carries copies of
 * its inputs and room for its results, and done_cb applies the results to
 * the loop's objects. run() never writes an object the loop also reads.
 */
struct db_pool;
struct db_conn;

/*
 * Where and how to connect: db.url, its password or db.password_file's,
 * and TLS (db.tls_* or the URL's ssl-*), read once at start. With TLS the
 * session is refused unless it is encrypted (and, VERIFY_CA and
 * VERIFY_IDENTITY, the certificate checked).
 */
struct db_dsn;
struct db_dsn *db_dsn_create(const struct cfg *cfg, char *err, size_t errlen);
void db_dsn_destroy(struct db_dsn *d);
/* "url=mysql://user@host:port/db tls=VERIFY_IDENTITY": log fields. */
const char *db_dsn_describe(const struct db_dsn *d, char *buf, size_t len);

struct db_job {
	/* On a pool thread. Returns 0 or -1 (set db_conn_error() text). */
	int (*run)(struct db_conn *c, struct db_job *job);
	/* On the loop thread, after run(); status is run()'s result. */
	void (*done_cb)(struct db_job *job, int status, const char *err);
	/* private */
	struct db_job *next;
	int status;
	char err[256];
};

/* dsn is borrowed: it outlives the pool. Fatal at start if the server
 * refuses the credentials or the TLS handshake; a server that is down is
 * waited for (every job fails until it is back). */
struct db_pool *db_pool_create(struct event_base *base,
			       const struct db_dsn *dsn, int nconns,
			       const char *name);
void db_pool_destroy(struct db_pool *p);
void db_pool_submit(struct db_pool *p, struct db_job *job);
/* Connections currently up (a gauge for metrics). */
int db_pool_connected(const struct db_pool *p);
/* For /readyz: a connection is up and the server answers (jobs do not
 * wait for 5 s with none finishing, as they do on a hung server). */
int db_pool_ready(struct db_pool *p);
/* Logs "database not answering" when jobs wait that long, and "database
 * answering again" (for the pools whose jobs never wait on purpose). */
void db_pool_watch(struct db_pool *p);

/* A typed parameter list, built on the stack of run(). */
struct db_params {
	MYSQL_BIND *b;
	size_t n;
	size_t cap;
	long long *ints;
	unsigned long *lens;
};
void db_params_init(struct db_params *p, size_t cap);
void db_params_free(struct db_params *p);
void db_params_int(struct db_params *p, long long v);
void db_params_uint(struct db_params *p, unsigned long long v);
void db_params_str(struct db_params *p, const char *s); /* NULL -> NULL */
void db_params_blob(struct db_params *p, const void *data, size_t len);
void db_params_null(struct db_params *p);

/* Prepares (cached per connection by SQL text) and executes. */
int db_exec(struct db_conn *c, const char *sql, struct db_params *params,
	    unsigned long long *affected);
int db_query(struct db_conn *c, const char *sql, struct db_params *params,
	     struct db_rows *rows);
/* The first column of the first row as an integer in *n (none if there
 * is no row). */
int db_query_int(struct db_conn *c, const char *sql, struct db_params *params,
		 long long none, long long *n);
/* Plain statement without parameters (DDL, BEGIN, COMMIT). */
int db_simple(struct db_conn *c, const char *sql);
int db_begin(struct db_conn *c);
/* This connection's idle_transaction_timeout from now on: secs, or the
 * configured db.idle_transaction_timeout_s with -1 (for a transaction
 * that waits on something else on purpose, as the pruner's archive send
 * does). 0 or -1 on success. */
int db_idle_txn_timeout(struct db_conn *c, int secs);
int db_commit(struct db_conn *c);
int db_rollback(struct db_conn *c);
const char *db_conn_error(struct db_conn *c);
unsigned int db_conn_errno(struct db_conn *c);
/* MariaDB's error number for a statement cut by max_statement_time. */
#define DB_ER_STATEMENT_TIMEOUT 1969
/* The server's max_allowed_packet: no statement may be larger. */
size_t db_conn_max_packet(const struct db_conn *c);

/*
 * "PREFIX ROW,ROW,...": runs a multi-row statement in chunks of 256, 64,
 * 16, 4 and 1 rows so each connection prepares at most five texts. bind_row
 * appends one row's ncols parameters. Adds affected rows to *affected.
 */
int db_exec_rows(struct db_conn *c, const char *prefix, const char *row,
		 size_t nrows, size_t ncols,
		 void (*bind_row)(struct db_params *p, size_t i, void *arg),
		 void *arg, unsigned long long *affected);
/* The same with suffix after the rows ("PREFIX ROW,...,ROW SUFFIX"). */
int db_exec_rows_suffix(struct db_conn *c, const char *prefix, const char *row,
			const char *suffix, size_t nrows, size_t ncols,
			void (*bind_row)(struct db_params *p, size_t i,
					 void *arg),
			void *arg, unsigned long long *affected);

/*
 * "PREFIX ITEM,...,ITEM SUFFIX" over n items, in statements of sizes[]
 * items (largest first, the last 1), so a connection prepares one text
 * per size: a multi-row INSERT (ITEM "(?,?)") or an IN list (ITEM "?").
 * bind(p, from, m, arg) appends one statement's parameters: what comes
 * before the list, then items from..from+m-1. With rows_cb the statements
 * are queries and each result goes to rows_cb, which owns it (frees it
 * with db_rows_free); else affected rows are added to *affected (may be
 * NULL). Stops at the first failure.
 */
struct db_list {
	const char *prefix;
	const char *item;
	const char *suffix;
	const size_t *sizes;
	size_t nsizes;
	void (*bind)(struct db_params *p, size_t from, size_t m, void *arg);
	void (*rows_cb)(struct db_rows *r, void *arg);
	void *arg;
};
int db_run_list(struct db_conn *c, const struct db_list *l, size_t n,
		unsigned long long *affected);

/*
 * One blocking connection for startup work (migrations) and tools; dsn
 * is borrowed. *refused (may be NULL) is 1 when the server refused the
 * credentials or TLS failed: no retry will help.
 */
struct db_conn *db_conn_open(const struct db_dsn *dsn, int *refused, char *err,
			     size_t errlen);
void db_conn_close(struct db_conn *c);

#endif
