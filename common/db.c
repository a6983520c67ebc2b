#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <errmsg.h>
#include <event2/event.h>
#include <mysql.h>

#include "cfg.h"
#include "db.h"
#include "log.h"
#include "mailbox.h"
#include "secret.h"
#include "url.h"
#include "utf8.h"
#include "xmalloc.h"

#define DB_STMT_CACHE_MAX 32
#define DB_RECONNECT_INTERVAL_MS 1000
/* Jobs waiting this long without any of them finishing: the server hangs
 * (stopped, its disk stuck) although the connections are up. */
#define DB_STALL_MS 5000
#define DB_FAIL_LOG_MS 10000

struct db_stmt_entry {
	char *sql;
	MYSQL_STMT *stmt;
	struct db_stmt_entry *next;
};

struct db_dsn {
	char *host, *user, *password, *database;
	int port;
	struct cfg_db_tls tls;
	int idle_txn_s; /* idle_transaction_timeout; 0: the server's */
};

struct db_conn {
	MYSQL *my;
	int up;
	struct db_stmt_entry *stmts;
	size_t nstmts;
	char err[256];
	unsigned int errnum;
	const struct db_dsn *dsn;
	int64_t next_try_ms;
	size_t max_packet;	   /* the server's max_allowed_packet */
	unsigned long answers;	   /* statements the server answered */
	struct log_every fail_log; /* "database connect failed" */
};

/* Not a MySQL error number: the server offered no TLS. */
#define DB_ERR_NO_TLS 100001

/* What a server that does not say takes at least (MySQL 5.7's default). */
#define DB_MAX_PACKET_DEFAULT 4194304

struct db_pool {
	struct event_base *base;
	struct mailbox *done; /* finished jobs, to their done_cb */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct db_job *queue_head, *queue_tail;
	size_t queued;
	int stopping;
	int nthreads;
	pthread_t *threads;
	struct db_conn *conns;
	int connected; /* only approximately current; a gauge */
	char *name;
	/* Under mu: jobs in run(); when the server last answered one (a job
	 * done on a connection still up), or the pool went from idle to
	 * busy; when it last answered. */
	int running;
	int64_t progress_ms;
	int64_t answered_ms;
	struct event *stall_ev; /* logs a hung server from the loop */
	int64_t stalled_since_ms;
};

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
conn_seterr(struct db_conn *c, unsigned int num, const char *msg)
{
	c->errnum = num;
	/* Server messages quote data and names (a CHECK constraint, a
	 * trigger's SIGNAL text): cut at a character, they stay valid. */
	utf8_copy(c->err, sizeof(c->err), msg, strlen(msg));
}

static void
stmt_cache_clear(struct db_conn *c)
{
	struct db_stmt_entry *e, *n;

	for (e = c->stmts; e != NULL; e = n) {
		n = e->next;
		mysql_stmt_close(e->stmt);
		xfree(e->sql);
		xfree(e);
	}
	c->stmts = NULL;
	c->nstmts = 0;
}

static void
conn_drop(struct db_conn *c)
{
	stmt_cache_clear(c);
	if (c->my != NULL)
		mysql_close(c->my);
	c->my = NULL;
	c->up = 0;
}

static int
conn_is_lost(unsigned int e)
{
	return e == CR_SERVER_GONE_ERROR || e == CR_SERVER_LOST ||
	       e == CR_CONNECTION_ERROR || e == CR_CONN_HOST_ERROR ||
	       e == CR_SERVER_LOST_EXTENDED || e == 1927 /* killed */ ||
	       e == 1053 /* shutdown in progress */;
}

/* A statement larger than max_allowed_packet makes the server drop the
 * connection ("server has gone away"): callers size theirs by it. */
static void
conn_read_max_packet(struct db_conn *c)
{
	MYSQL_RES *res;
	MYSQL_ROW row;

	c->max_packet = DB_MAX_PACKET_DEFAULT;
	if (mysql_query(c->my, "SELECT @@max_allowed_packet") != 0 ||
	    (res = mysql_store_result(c->my)) == NULL)
		return;
	if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL &&
	    strtoull(row[0], NULL, 10) > 0)
		c->max_packet = (size_t)strtoull(row[0], NULL, 10);
	mysql_free_result(res);
}

/*
 * Connector/C verifies the chain when a CA is given and the host name
 * with MYSQL_OPT_SSL_VERIFY_SERVER_CERT; without either it encrypts but
 * believes any certificate. It falls back to plain text when the server
 * offers no TLS unless the name is verified: conn_connect checks.
 */
static void
conn_tls_options(MYSQL *my, const struct cfg_db_tls *t)
{
	my_bool on = 1, verify = t->mode == CFG_TLS_VERIFY_IDENTITY;

	if (t->mode == CFG_TLS_DISABLED)
		return;
	mysql_options(my, MYSQL_OPT_SSL_ENFORCE, &on);
	mysql_options(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
	mysql_options(my, MARIADB_OPT_TLS_VERSION, "TLSv1.2,TLSv1.3");
	if (t->ca != NULL && t->mode != CFG_TLS_REQUIRED)
		mysql_options(my, MYSQL_OPT_SSL_CA, t->ca);
	if (t->cert != NULL) {
		mysql_options(my, MYSQL_OPT_SSL_CERT, t->cert);
		mysql_options(my, MYSQL_OPT_SSL_KEY, t->key);
	}
}

/*
 * A daemon stopped (SIGSTOP, a frozen VM, a long GC-like stall) between
 * two statements of a transaction keeps its row locks for as long as its
 * TCP connection lives: a new slot owner's fence (slot_state's row, which
 * every delivery record share-locks) would wait for it. MariaDB ends such
 * a connection after idle_transaction_timeout seconds, which rolls the
 * transaction back; the daemon, if it wakes, gets a lost connection and
 * retries (and is fenced). MySQL has no such variable: said once.
 */
static int
conn_idle_txn_timeout(struct db_conn *c, int secs)
{
	static atomic_int warned;
	char sql[96];

	if (secs <= 0)
		return 0;
	snprintf(sql, sizeof(sql), "SET SESSION idle_transaction_timeout = %d",
		 secs);
	if (mysql_query(c->my, sql) == 0)
		return 0;
	if (!atomic_exchange(&warned, 1))
		log_warn("database has no idle_transaction_timeout (MariaDB "
			 "10.3+): a stopped daemon's row locks stay until its "
			 "connection drops",
			 "error=\"%s\"", mysql_error(c->my));
	return -1;
}

static int
conn_connect(struct db_conn *c)
{
	const struct db_dsn *d = c->dsn;
	unsigned int timeout = 5, rw_timeout = 30;
	my_bool off = 0;

	conn_drop(c);
	c->my = mysql_init(NULL);
	mysql_options(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
	mysql_options(c->my, MYSQL_OPT_READ_TIMEOUT, &rw_timeout);
	mysql_options(c->my, MYSQL_OPT_WRITE_TIMEOUT, &rw_timeout);
	mysql_options(c->my, MYSQL_OPT_RECONNECT, &off);
	mysql_options(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
	conn_tls_options(c->my, &d->tls);
	if (mysql_real_connect(c->my, d->host, d->user, d->password,
			       d->database, (unsigned)d->port, NULL,
			       0) == NULL) {
		conn_seterr(c, mysql_errno(c->my), mysql_error(c->my));
		mysql_close(c->my);
		c->my = NULL;
		return -1;
	}
	if (d->tls.mode != CFG_TLS_DISABLED &&
	    mysql_get_ssl_cipher(c->my) == NULL) {
		conn_seterr(c, DB_ERR_NO_TLS,
			    "the server offers no TLS, and db.tls_mode asks "
			    "for it");
		mysql_close(c->my);
		c->my = NULL;
		return -1;
	}
	/* No gap locks: every transition is a conditional statement or an
	 * explicit row lock, and gap locks between concurrent multi-row
	 * inserts and batched updates only buy deadlocks. */
	/* Strict, whatever the server's default: a value that does not
	 * fit its column is an error, never silently cut (stored data that
	 * differs from what the client was told was accepted). */
	if (mysql_query(c->my, "SET SESSION TRANSACTION ISOLATION LEVEL "
			       "READ COMMITTED") != 0 ||
	    mysql_query(c->my, "SET SESSION sql_mode = CONCAT_WS(',', "
			       "NULLIF(@@SESSION.sql_mode, ''), "
			       "'STRICT_ALL_TABLES')") != 0) {
		conn_seterr(c, mysql_errno(c->my), mysql_error(c->my));
		mysql_close(c->my);
		c->my = NULL;
		return -1;
	}
	conn_idle_txn_timeout(c, d->idle_txn_s);
	conn_read_max_packet(c);
	c->up = 1;
	return 0;
}

struct db_dsn *
db_dsn_create(const struct cfg *cfg, char *err, size_t errlen)
{
	struct db_dsn *d = xcalloc(1, sizeof(*d));
	struct url u;

	if (url_parse(cfg_str(cfg, CFG_DB_URL), &u, err, errlen) < 0) {
		xfree(d);
		return NULL;
	}
	d->host = xstrdup(u.host);
	d->user = xstrdup(u.user ? u.user : "");
	d->database = xstrdup(u.path ? u.path : "");
	d->port = u.port ? u.port : 3306;
	d->idle_txn_s = (int)cfg_int(cfg, CFG_DB_IDLE_TRANSACTION_TIMEOUT_S);
	if (u.password != NULL)
		d->password = xstrdup(u.password);
	url_clear(&u);
	if ((d->password == NULL &&
	     (d->password = cfg_secret(cfg, CFG_DB_PASSWORD_FILE, err,
				       errlen)) == NULL &&
	     err[0] != '\0') ||
	    cfg_db_tls(cfg, &d->tls, err, errlen) < 0) {
		db_dsn_destroy(d);
		return NULL;
	}
	return d;
}

void
db_dsn_destroy(struct db_dsn *d)
{
	if (d == NULL)
		return;
	xfree(d->host);
	xfree(d->user);
	secret_free(d->password);
	xfree(d->database);
	cfg_db_tls_clear(&d->tls);
	xfree(d);
}

const char *
db_dsn_describe(const struct db_dsn *d, char *buf, size_t len)
{
	snprintf(buf, len, "url=mysql://%s@%s:%d/%s tls=%s", d->user, d->host,
		 d->port, d->database, cfg_tls_mode_name(d->tls.mode));
	return buf;
}

/* The server refused us: credentials, account, TLS. Retrying is futile. */
static int
error_is_refusal(unsigned int e)
{
	return e == 1044 /* ER_DBACCESS_DENIED_ERROR */ ||
	       e == 1045 /* ER_ACCESS_DENIED_ERROR */ ||
	       e == 1698 /* ER_ACCESS_DENIED_NO_PASSWORD_ERROR */ ||
	       e == 1130 /* ER_HOST_NOT_PRIVILEGED */ || e == 1820 ||
	       e == 1862 /* ER_MUST_CHANGE_PASSWORD* */ ||
	       e == 4151 /* ER_ACCOUNT_HAS_BEEN_LOCKED */ || e == 4036 ||
	       e == 3159 /* insecure transport prohibited */ ||
	       e == CR_SSL_CONNECTION_ERROR || e == DB_ERR_NO_TLS;
}

/* What to check after a refusal. */
static const char *
refusal_hint(const struct db_conn *c)
{
	if (c->errnum == CR_SSL_CONNECTION_ERROR || c->errnum == DB_ERR_NO_TLS)
		return "check db.tls_mode, db.tls_ca and the server's "
		       "certificate";
	if (c->errnum == 4036 || c->errnum == 3159)
		return "the server requires TLS: set db.tls_mode and db.tls_ca";
	/* an account created REQUIRE SSL is refused like a wrong password */
	if (c->dsn->tls.mode == CFG_TLS_DISABLED)
		return "check db.url's user and db.password_file, and whether "
		       "the server requires TLS (db.tls_mode, db.tls_ca)";
	return "check db.url's user and db.password_file";
}

struct db_conn *
db_conn_open(const struct db_dsn *dsn, int *refused, char *err, size_t errlen)
{
	struct db_conn *c = xcalloc(1, sizeof(*c));

	mysql_library_init(0, NULL, NULL);
	c->dsn = dsn;
	if (refused != NULL)
		*refused = 0;
	if (conn_connect(c) < 0) {
		if (error_is_refusal(c->errnum)) {
			snprintf(err, errlen,
				 "database refused the connection: %s (%s)",
				 c->err, refusal_hint(c));
			if (refused != NULL)
				*refused = 1;
		} else {
			snprintf(err, errlen, "%s", c->err);
		}
		conn_drop(c);
		xfree(c);
		return NULL;
	}
	return c;
}

static void
conn_fini(struct db_conn *c)
{
	conn_drop(c);
}

void
db_conn_close(struct db_conn *c)
{
	if (c == NULL)
		return;
	conn_fini(c);
	xfree(c);
}

const char *
db_conn_error(struct db_conn *c)
{
	return c->err;
}

unsigned int
db_conn_errno(struct db_conn *c)
{
	return c->errnum;
}

size_t
db_conn_max_packet(const struct db_conn *c)
{
	return c->max_packet > 0 ? c->max_packet : DB_MAX_PACKET_DEFAULT;
}

static int
conn_fail(struct db_conn *c, MYSQL_STMT *stmt)
{
	if (stmt != NULL)
		conn_seterr(c, mysql_stmt_errno(stmt), mysql_stmt_error(stmt));
	else
		conn_seterr(c, mysql_errno(c->my), mysql_error(c->my));
	if (conn_is_lost(c->errnum))
		conn_drop(c);
	return -1;
}

static MYSQL_STMT *
conn_stmt(struct db_conn *c, const char *sql)
{
	struct db_stmt_entry *e, **pp;
	MYSQL_STMT *stmt;

	if (!c->up) {
		conn_seterr(c, CR_SERVER_GONE_ERROR, "database unavailable");
		return NULL;
	}
	for (pp = &c->stmts; (e = *pp) != NULL; pp = &e->next) {
		if (!strcmp(e->sql, sql)) {
			/* Move to front: the cache evicts from the tail. */
			*pp = e->next;
			e->next = c->stmts;
			c->stmts = e;
			return e->stmt;
		}
	}
	stmt = mysql_stmt_init(c->my);
	if (stmt == NULL) {
		conn_fail(c, NULL);
		return NULL;
	}
	if (mysql_stmt_prepare(stmt, sql, strlen(sql)) != 0) {
		conn_fail(c, stmt);
		mysql_stmt_close(stmt);
		return NULL;
	}
	if (c->nstmts >= DB_STMT_CACHE_MAX) {
		for (pp = &c->stmts; (*pp)->next != NULL; pp = &(*pp)->next)
			;
		mysql_stmt_close((*pp)->stmt);
		xfree((*pp)->sql);
		xfree(*pp);
		*pp = NULL;
		c->nstmts--;
	}
	e = xcalloc(1, sizeof(*e));
	e->sql = xstrdup(sql);
	e->stmt = stmt;
	e->next = c->stmts;
	c->stmts = e;
	c->nstmts++;
	return stmt;
}

void
db_params_init(struct db_params *p, size_t cap)
{
	p->n = 0;
	p->cap = cap ? cap : 1;
	/* Not zeroed: params_next clears each bind as it is taken, and ints
	 * and lens are written before a bind points at them (a chunk of a
	 * delivery record or an INSERT binds thousands: zeroing them all was
	 * a tenth of a millisecond a chunk). */
	p->b = xmalloc(p->cap * sizeof(*p->b));
	p->ints = xmalloc(p->cap * sizeof(*p->ints));
	p->lens = xmalloc(p->cap * sizeof(*p->lens));
}

void
db_params_free(struct db_params *p)
{
	xfree(p->b);
	xfree(p->ints);
	xfree(p->lens);
	memset(p, 0, sizeof(*p));
}

static MYSQL_BIND *
params_next(struct db_params *p)
{
	MYSQL_BIND *b;

	if (p->n == p->cap) {
		size_t old = p->cap;

		p->cap *= 2;
		p->b = xrealloc(p->b, p->cap * sizeof(*p->b));
		p->ints = xrealloc(p->ints, p->cap * sizeof(*p->ints));
		p->lens = xrealloc(p->lens, p->cap * sizeof(*p->lens));
		/* The binds point into ints/lens: re-aim them after a move. */
		for (size_t i = 0; i < old; i++) {
			if (p->b[i].buffer_type == MYSQL_TYPE_LONGLONG)
				p->b[i].buffer = &p->ints[i];
			if (p->b[i].length != NULL)
				p->b[i].length = &p->lens[i];
		}
	}
	b = &p->b[p->n];
	memset(b, 0, sizeof(*b));
	return b;
}

void
db_params_int(struct db_params *p, long long v)
{
	MYSQL_BIND *b = params_next(p);

	p->ints[p->n] = v;
	b->buffer_type = MYSQL_TYPE_LONGLONG;
	b->buffer = &p->ints[p->n];
	p->n++;
}

void
db_params_uint(struct db_params *p, unsigned long long v)
{
	MYSQL_BIND *b = params_next(p);

	memcpy(&p->ints[p->n], &v, sizeof(v));
	b->buffer_type = MYSQL_TYPE_LONGLONG;
	b->buffer = &p->ints[p->n];
	b->is_unsigned = 1;
	p->n++;
}

void
db_params_blob(struct db_params *p, const void *data, size_t len)
{
	MYSQL_BIND *b = params_next(p);

	p->lens[p->n] = (unsigned long)len;
	b->buffer_type = MYSQL_TYPE_BLOB;
	b->buffer = (void *)data;
	b->buffer_length = (unsigned long)len;
	b->length = &p->lens[p->n];
	p->n++;
}

void
db_params_str(struct db_params *p, const char *s)
{
	if (s == NULL)
		db_params_null(p);
	else
		db_params_blob(p, s, strlen(s));
	if (s != NULL)
		p->b[p->n - 1].buffer_type = MYSQL_TYPE_STRING;
}

void
db_params_null(struct db_params *p)
{
	MYSQL_BIND *b = params_next(p);

	b->buffer_type = MYSQL_TYPE_NULL;
	p->n++;
}

static MYSQL_STMT *
stmt_run(struct db_conn *c, const char *sql, struct db_params *params)
{
	MYSQL_STMT *stmt = conn_stmt(c, sql);

	if (stmt == NULL)
		return NULL;
	if (mysql_stmt_param_count(stmt) != (params ? params->n : 0)) {
		conn_seterr(c, 0, "parameter count mismatch");
		return NULL;
	}
	if (params != NULL && params->n > 0 &&
	    mysql_stmt_bind_param(stmt, params->b) != 0) {
		conn_fail(c, stmt);
		return NULL;
	}
	if (mysql_stmt_execute(stmt) != 0) {
		conn_fail(c, stmt);
		return NULL;
	}
	c->answers++;
	return stmt;
}

int
db_exec(struct db_conn *c, const char *sql, struct db_params *params,
	unsigned long long *affected)
{
	MYSQL_STMT *stmt = stmt_run(c, sql, params);

	if (stmt == NULL)
		return -1;
	if (affected != NULL)
		*affected = (unsigned long long)mysql_stmt_affected_rows(stmt);
	return 0;
}

int
db_query(struct db_conn *c, const char *sql, struct db_params *params,
	 struct db_rows *rows)
{
	MYSQL_STMT *stmt = stmt_run(c, sql, params);
	MYSQL_RES *meta;
	MYSQL_BIND *rb = NULL;
	unsigned long *lens = NULL;
	my_bool *nulls = NULL, one = 1;
	size_t cap = 0;
	int r;

	memset(rows, 0, sizeof(*rows));
	if (stmt == NULL)
		return -1;
	meta = mysql_stmt_result_metadata(stmt);
	if (meta == NULL) {
		conn_seterr(c, 0, "statement returned no result set");
		return -1;
	}
	rows->ncols = mysql_num_fields(meta);
	mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &one);
	if (mysql_stmt_store_result(stmt) != 0) {
		mysql_free_result(meta);
		return conn_fail(c, stmt);
	}
	rb = xcalloc(rows->ncols, sizeof(*rb));
	lens = xcalloc(rows->ncols, sizeof(*lens));
	nulls = xcalloc(rows->ncols, sizeof(*nulls));
	for (size_t i = 0; i < rows->ncols; i++) {
		MYSQL_FIELD *f = mysql_fetch_field_direct(meta, (unsigned)i);
		unsigned long sz = f->max_length > 64 ? f->max_length : 64;

		rb[i].buffer_type = MYSQL_TYPE_STRING;
		rb[i].buffer = xmalloc(sz + 1);
		rb[i].buffer_length = sz + 1;
		rb[i].length = &lens[i];
		rb[i].is_null = &nulls[i];
	}
	mysql_free_result(meta);
	if (mysql_stmt_bind_result(stmt, rb) != 0) {
		r = conn_fail(c, stmt);
		goto out;
	}
	while ((r = mysql_stmt_fetch(stmt)) == 0 || r == MYSQL_DATA_TRUNCATED) {
		size_t base;

		if (r == MYSQL_DATA_TRUNCATED) {
			conn_seterr(c, 0, "result truncated");
			mysql_stmt_free_result(stmt);
			db_rows_free(rows);
			r = -1;
			goto out;
		}
		if (rows->nrows == cap) {
			cap = cap ? cap * 2 : 16;
			rows->cell = xrealloc(
				rows->cell, cap * rows->ncols * sizeof(char *));
			rows->len = xrealloc(rows->len,
					     cap * rows->ncols *
						     sizeof(unsigned long));
		}
		base = rows->nrows * rows->ncols;
		for (size_t i = 0; i < rows->ncols; i++) {
			if (nulls[i]) {
				rows->cell[base + i] = NULL;
				rows->len[base + i] = 0;
			} else {
				char *s = xmalloc(lens[i] + 1);

				memcpy(s, rb[i].buffer, lens[i]);
				s[lens[i]] = '\0';
				rows->cell[base + i] = s;
				rows->len[base + i] = lens[i];
			}
		}
		rows->nrows++;
	}
	if (r == 1) {
		r = conn_fail(c, stmt);
		mysql_stmt_free_result(stmt);
		db_rows_free(rows);
		goto out;
	}
	mysql_stmt_free_result(stmt);
	r = 0;
out:
	for (size_t i = 0; i < rows->ncols && rb != NULL; i++)
		xfree(rb[i].buffer);
	xfree(rb);
	xfree(lens);
	xfree(nulls);
	return r;
}

int
db_query_int(struct db_conn *c, const char *sql, struct db_params *params,
	     long long none, long long *n)
{
	struct db_rows rows;

	if (db_query(c, sql, params, &rows) < 0)
		return -1;
	*n = rows.nrows ? db_rows_int(&rows, 0, 0) : none;
	db_rows_free(&rows);
	return 0;
}

int
db_simple(struct db_conn *c, const char *sql)
{
	if (!c->up) {
		conn_seterr(c, CR_SERVER_GONE_ERROR, "database unavailable");
		return -1;
	}
	if (mysql_real_query(c->my, sql, strlen(sql)) != 0)
		return conn_fail(c, NULL);
	c->answers++;
	return 0;
}

int
db_idle_txn_timeout(struct db_conn *c, int secs)
{
	if (!c->up)
		return -1;
	if (secs < 0)
		secs = c->dsn->idle_txn_s;
	if (secs == 0)
		return mysql_query(c->my,
				   "SET SESSION idle_transaction_timeout "
				   "= DEFAULT") == 0
			       ? 0
			       : -1;
	return conn_idle_txn_timeout(c, secs);
}

int
db_begin(struct db_conn *c)
{
	return db_simple(c, "START TRANSACTION");
}

int
db_commit(struct db_conn *c)
{
	if (!c->up) {
		conn_seterr(c, CR_SERVER_GONE_ERROR, "database unavailable");
		return -1;
	}
	if (mysql_commit(c->my) != 0)
		return conn_fail(c, NULL);
	c->answers++;
	return 0;
}

int
db_rollback(struct db_conn *c)
{
	if (!c->up)
		return -1;
	if (mysql_rollback(c->my) != 0)
		return conn_fail(c, NULL);
	return 0;
}

int
db_exec_rows(struct db_conn *c, const char *prefix, const char *row,
	     size_t nrows, size_t ncols,
	     void (*bind_row)(struct db_params *p, size_t i, void *arg),
	     void *arg, unsigned long long *affected)
{
	return db_exec_rows_suffix(c, prefix, row, "", nrows, ncols, bind_row,
				   arg, affected);
}

/* A "PREFIX ITEM,...,ITEM SUFFIX" text for n items. */
static char *
list_sql(const char *prefix, const char *item, size_t n, const char *suffix)
{
	size_t pl = strlen(prefix), il = strlen(item), sl = strlen(suffix);
	char *sql = xmalloc(pl + (il + 1) * n + sl + 1), *q = sql;

	memcpy(q, prefix, pl);
	q += pl;
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			*q++ = ',';
		memcpy(q, item, il);
		q += il;
	}
	memcpy(q, suffix, sl);
	q[sl] = '\0';
	return sql;
}

int
db_run_list(struct db_conn *c, const struct db_list *l, size_t n,
	    unsigned long long *affected)
{
	size_t done = 0;
	struct db_params p;
	int rc = 0;

	db_params_init(&p, 16);
	for (size_t k = 0; k < l->nsizes && rc == 0; k++) {
		size_t m = l->sizes[k];
		char *sql;

		if (n - done < m)
			continue;
		sql = list_sql(l->prefix, l->item, m, l->suffix);
		while (n - done >= m) {
			p.n = 0;
			l->bind(&p, done, m, l->arg);
			if (l->rows_cb != NULL) {
				struct db_rows rows;

				rc = db_query(c, sql, &p, &rows);
				if (rc == 0)
					l->rows_cb(&rows, l->arg);
			} else {
				unsigned long long a = 0;

				rc = db_exec(c, sql, &p, &a);
				if (rc == 0 && affected != NULL)
					*affected += a;
			}
			if (rc < 0)
				break;
			done += m;
		}
		xfree(sql);
	}
	db_params_free(&p);
	return rc < 0 ? -1 : 0;
}

struct rows_bind {
	void (*bind_row)(struct db_params *p, size_t i, void *arg);
	void *arg;
};

static void
bind_rows(struct db_params *p, size_t from, size_t m, void *arg)
{
	struct rows_bind *rb = arg;

	for (size_t i = 0; i < m; i++)
		rb->bind_row(p, from + i, rb->arg);
}

int
db_exec_rows_suffix(struct db_conn *c, const char *prefix, const char *row,
		    const char *suffix, size_t nrows, size_t ncols,
		    void (*bind_row)(struct db_params *p, size_t i, void *arg),
		    void *arg, unsigned long long *affected)
{
	static const size_t chunks[] = {256, 64, 16, 4, 1};
	struct rows_bind rb = {bind_row, arg};
	struct db_list l = {
		.prefix = prefix,
		.item = row,
		.suffix = suffix,
		.sizes = chunks,
		.nsizes = sizeof(chunks) / sizeof(chunks[0]),
		.bind = bind_rows,
		.arg = &rb,
	};

	(void)ncols;
	return db_run_list(c, &l, nrows, affected);
}

static void
job_done_cb(void *item, void *arg)
{
	struct db_job *j = item;

	j->done_cb(j, j->status, j->err);
}

/* Each connection retries every second while the server is away: its
 * first failure is logged, then one line per DB_FAIL_LOG_MS. */
static void
conn_fail_log(const struct db_pool *p, struct db_conn *c)
{
	long skipped;

	if (log_every(&c->fail_log, mono_ms(), DB_FAIL_LOG_MS, &skipped))
		log_warn("database connect failed",
			 "pool=%s error=\"%s\" not_logged_since_last=%ld",
			 p->name, c->err, skipped);
}

static void *
pool_thread(void *arg)
{
	struct db_pool *p = ((void **)arg)[0];
	struct db_conn *c = ((void **)arg)[1];
	struct db_job *j;
	unsigned long answers;

	xfree(arg);
	mysql_thread_init();
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (p->queue_head == NULL && !p->stopping)
			pthread_cond_wait(&p->cond, &p->mu);
		j = p->queue_head;
		if (j == NULL) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		p->queue_head = j->next;
		if (p->queue_head == NULL)
			p->queue_tail = NULL;
		p->queued--;
		p->running++;
		pthread_mutex_unlock(&p->mu);

		if (!c->up && mono_ms() >= c->next_try_ms) {
			if (conn_connect(c) < 0) {
				c->next_try_ms =
					mono_ms() + DB_RECONNECT_INTERVAL_MS;
				conn_fail_log(p, c);
			} else {
				memset(&c->fail_log, 0, sizeof(c->fail_log));
				log_info("database connected", "pool=%s",
					 p->name);
				__atomic_add_fetch(&p->connected, 1,
						   __ATOMIC_RELAXED);
			}
		}
		answers = c->answers;
		j->err[0] = '\0';
		if (!c->up) {
			j->status = -1;
			/* The caller says "database unavailable" itself. */
			snprintf(j->err, sizeof(j->err), "%.200s", c->err);
		} else {
			j->status = j->run(c, j);
			if (j->status < 0)
				snprintf(j->err, sizeof(j->err), "%s", c->err);
			if (!c->up) {
				log_warn("database connection lost",
					 "pool=%s error=\"%s\"", p->name,
					 c->err);
				__atomic_sub_fetch(&p->connected, 1,
						   __ATOMIC_RELAXED);
				c->next_try_ms = 0;
			}
		}
		/* Only a statement the server answered is progress: not a
		 * connect that timed out, nor a job that had nothing to ask. */
		pthread_mutex_lock(&p->mu);
		p->running--;
		if (c->up && c->answers != answers)
			p->progress_ms = p->answered_ms = mono_ms();
		pthread_mutex_unlock(&p->mu);
		j->next = NULL;
		mailbox_post(p->done, j);
	}
	mysql_thread_end();
	return NULL;
}

/* How long jobs have waited with none finishing; 0 when idle. */
static int64_t
pool_stalled_ms(struct db_pool *p)
{
	int64_t d = 0;

	pthread_mutex_lock(&p->mu);
	if (p->running > 0 || p->queued > 0)
		d = mono_ms() - p->progress_ms;
	pthread_mutex_unlock(&p->mu);
	return d > 0 ? d : 0;
}

/* Once a second on the loop: a hung server says nothing by itself (its
 * connections stay up, every call waits for the read timeout), so the
 * pool says it, once when it starts and once when it ends. */
static void
stall_cb(evutil_socket_t fd, short what, void *arg)
{
	struct db_pool *p = arg;
	int64_t d = pool_stalled_ms(p), answered;
	size_t queued;
	int running;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&p->mu);
	queued = p->queued;
	running = p->running;
	answered = p->answered_ms;
	pthread_mutex_unlock(&p->mu);
	if (p->stalled_since_ms == 0 && d >= DB_STALL_MS) {
		p->stalled_since_ms = mono_ms() - d;
		log_warn("database not answering",
			 "pool=%s waited_ms=%lld running=%d queued=%zu",
			 p->name, (long long)d, running, queued);
	} else if (p->stalled_since_ms != 0 && answered > p->stalled_since_ms) {
		log_info("database answering again", "pool=%s stalled_ms=%lld",
			 p->name, (long long)(answered - p->stalled_since_ms));
		p->stalled_since_ms = 0;
	}
}

struct db_pool *
db_pool_create(struct event_base *base, const struct db_dsn *dsn, int nconns,
	       const char *name)
{
	struct db_pool *p = xcalloc(1, sizeof(*p));

	mysql_library_init(0, NULL, NULL);
	p->base = base;
	p->name = xstrdup(name);
	p->nthreads = nconns;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->done = mailbox_create(base, job_done_cb, NULL, p);
	p->conns = xcalloc((size_t)nconns, sizeof(*p->conns));
	p->threads = xcalloc((size_t)nconns, sizeof(*p->threads));
	for (int i = 0; i < nconns; i++) {
		void **arg = xcalloc(2, sizeof(void *));

		p->conns[i].dsn = dsn;
		if (conn_connect(&p->conns[i]) == 0) {
			p->connected++;
		} else if (i == 0 && error_is_refusal(p->conns[i].errnum)) {
			log_fatal("database refused the connection",
				  "pool=%s error=\"%s\" hint=\"%s\"", name,
				  p->conns[i].err, refusal_hint(&p->conns[i]));
		} else if (i == 0) {
			log_warn("database connect failed",
				 "pool=%s error=\"%s\"", name, p->conns[i].err);
		}
		arg[0] = p;
		arg[1] = &p->conns[i];
		if (pthread_create(&p->threads[i], NULL, pool_thread, arg) != 0)
			log_fatal("cannot start database thread", "pool=%s",
				  name);
	}
	return p;
}

void
db_pool_watch(struct db_pool *p)
{
	struct timeval sec = {1, 0};

	if (p->stall_ev != NULL)
		return;
	p->stall_ev = event_new(p->base, -1, EV_PERSIST, stall_cb, p);
	event_add(p->stall_ev, &sec);
}

void
db_pool_submit(struct db_pool *p, struct db_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&p->mu);
	if (p->queue_tail != NULL)
		p->queue_tail->next = job;
	else
		p->queue_head = job;
	p->queue_tail = job;
	if (p->queued == 0 && p->running == 0)
		p->progress_ms = mono_ms();
	p->queued++;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

int
db_pool_connected(const struct db_pool *p)
{
	return __atomic_load_n(&p->connected, __ATOMIC_RELAXED);
}

int
db_pool_ready(struct db_pool *p)
{
	return db_pool_connected(p) > 0 && pool_stalled_ms(p) < DB_STALL_MS;
}

/* Runs every queued job to completion (their done_cb included), then
 * stops the threads. */
void
db_pool_destroy(struct db_pool *p)
{
	if (p == NULL)
		return;
	if (p->stall_ev != NULL)
		event_free(p->stall_ev);
	pthread_mutex_lock(&p->mu);
	p->stopping = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	mailbox_drain(p->done);
	for (int i = 0; i < p->nthreads; i++)
		conn_fini(&p->conns[i]);
	mailbox_destroy(p->done);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cond);
	xfree(p->conns);
	xfree(p->threads);
	xfree(p->name);
	xfree(p);
}
