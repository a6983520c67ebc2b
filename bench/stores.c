/*
 * Redis and DB probes of the bench: memory of the Redis index, row counts,
 * the raw multi-row INSERT rate (db-raw) and namespace cleanup.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <mysql.h>
#include <zookeeper/zookeeper.h>

#include "bench.h"
#include "keys.h"
#include "slot.h"
#include "url.h"
#include "xmalloc.h"

/* -------------------------------------------------------------- redis --- */

static redisContext *
redis_open(const char *spec, char *err, size_t errlen)
{
	char host[256];
	int port = 6379, db = 0;
	const char *p = spec, *slash, *colon;
	struct timeval tv = {10, 0};
	redisContext *rc;
	redisReply *rep;

	if (!strncmp(p, "redis://", 8))
		p += 8;
	if (strchr(p, '@'))
		p = strrchr(p, '@') + 1;
	slash = strchr(p, '/');
	colon = strchr(p, ':');
	if (slash)
		db = atoi(slash + 1);
	if (colon && (!slash || colon < slash))
		port = atoi(colon + 1);
	else
		colon = slash ? slash : p + strlen(p);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - p), p);
	rc = redisConnectWithTimeout(host, port, tv);
	if (rc == NULL || rc->err) {
		snprintf(err, errlen, "connect %s:%d: %s", host, port,
			 rc ? rc->errstr : "out of memory");
		if (rc)
			redisFree(rc);
		return NULL;
	}
	redisSetTimeout(rc, tv);
	rep = redisCommand(rc, "SELECT %d", db);
	if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
		snprintf(err, errlen, "SELECT %d: %s", db,
			 rep ? rep->str : rc->errstr);
		if (rep)
			freeReplyObject(rep);
		redisFree(rc);
		return NULL;
	}
	freeReplyObject(rep);
	return rc;
}

static long long
redis_int(redisContext *rc, const char *fmt, const char *arg)
{
	redisReply *rep = redisCommand(rc, fmt, arg);
	long long v = -1;

	if (rep && rep->type == REDIS_REPLY_INTEGER)
		v = rep->integer;
	if (rep)
		freeReplyObject(rep);
	return v;
}

static int
ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

int
redis_mem_sample(const char *spec, struct redis_mem *m, int with_usage,
		 char *err, size_t errlen)
{
	redisContext *rc = redis_open(spec, err, errlen);
	redisReply *rep;
	char cursor[32] = "0";
	const char *p;

	memset(m, 0, sizeof(*m));
	if (rc == NULL)
		return -1;
	rep = redisCommand(rc, "INFO memory");
	if (rep && rep->type == REDIS_REPLY_STRING &&
	    (p = strstr(rep->str, "used_memory:")) != NULL)
		m->used_memory = strtoll(p + 12, NULL, 10);
	if (rep)
		freeReplyObject(rep);
	m->keys = redis_int(rc, "DBSIZE", NULL);
	do {
		rep = redisCommand(rc, "SCAN %s COUNT 1000", cursor);
		if (rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
		    rep->elements != 2) {
			snprintf(err, errlen, "SCAN: %s",
				 rep && rep->str ? rep->str : rc->errstr);
			if (rep)
				freeReplyObject(rep);
			redisFree(rc);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		for (size_t i = 0; i < rep->element[1]->elements; i++) {
			redisReply *k = rep->element[1]->element[i];
			redisReply *u = NULL;

			if (with_usage)
				u = redisCommand(rc,
						 "MEMORY USAGE %b SAMPLES 0",
						 k->str, k->len);
			if (u && u->type == REDIS_REPLY_INTEGER)
				m->keys_bytes += u->integer;
			if (u)
				freeReplyObject(u);
			if (!strncmp(k->str, "{prophet:", 9) &&
			    ends_with(k->str, k->len, "}:inflight")) {
				u = redisCommand(rc, "ZCARD %b", k->str,
						 k->len);
				if (u && u->type == REDIS_REPLY_INTEGER)
					m->inflight += u->integer;
				if (u)
					freeReplyObject(u);
			} else if (!strncmp(k->str, "{prophet:", 9) &&
				   ends_with(k->str, k->len, "}:due")) {
				u = redisCommand(rc, "ZCARD %b", k->str,
						 k->len);
				if (u && u->type == REDIS_REPLY_INTEGER)
					m->due_ids += u->integer;
				if (u)
					freeReplyObject(u);
			} else if (!strncmp(k->str, "{prophet:", 9) &&
				   memmem(k->str, k->len, "}:b:", 4) != NULL) {
				u = redisCommand(rc, "LLEN %b", k->str, k->len);
				if (u && u->type == REDIS_REPLY_INTEGER)
					m->bucketed += u->integer;
				if (u)
					freeReplyObject(u);
			} else if (!strncmp(k->str, "{prophet:", 9) &&
				   ends_with(k->str, k->len, "}:task")) {
				u = redisCommand(rc, "HLEN %b", k->str, k->len);
				if (u && u->type == REDIS_REPLY_INTEGER)
					m->payloads += u->integer;
				if (u)
					freeReplyObject(u);
			}
		}
		freeReplyObject(rep);
	} while (strcmp(cursor, "0"));
	redisFree(rc);
	return 0;
}

int
redis_flush(const char *spec, char *err, size_t errlen)
{
	redisContext *rc = redis_open(spec, err, errlen);
	redisReply *rep;
	int ok;

	if (rc == NULL)
		return -1;
	rep = redisCommand(rc, "FLUSHDB");
	ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
	if (!ok)
		snprintf(err, errlen, "FLUSHDB: %s",
			 rep && rep->str ? rep->str : rc->errstr);
	freeReplyObject(rep);
	redisFree(rc);
	return ok ? 0 : -1;
}

int
redis_ids_present(const char *spec, const char *prefix, long n, int nslots,
		  long *in_due, long *in_task, char *err, size_t errlen)
{
	redisContext *rc = redis_open(spec, err, errlen);
	const long window = 1000;
	char id[160], kd[64], kt[64];

	*in_due = *in_task = 0;
	if (rc == NULL)
		return -1;
	/* Pipelined, window ids at a time: ZSCORE due + HEXISTS task. */
	for (long first = 0; first < n; first += window) {
		long last = first + window < n ? first + window : n;

		for (long i = first; i < last; i++) {
			int len = snprintf(id, sizeof(id), "%s%ld", prefix, i);
			int slot = slot_of(id, (size_t)len, nslots);

			rkey_due(kd, sizeof(kd), slot);
			rkey_task(kt, sizeof(kt), slot);
			redisAppendCommand(rc, "ZSCORE %s %b", kd, id,
					   (size_t)len);
			redisAppendCommand(rc, "HEXISTS %s %b", kt, id,
					   (size_t)len);
		}
		for (long i = first; i < last; i++) {
			redisReply *a = NULL, *b = NULL;

			if (redisGetReply(rc, (void **)&a) != REDIS_OK ||
			    redisGetReply(rc, (void **)&b) != REDIS_OK) {
				snprintf(err, errlen, "redis: %s", rc->errstr);
				if (a)
					freeReplyObject(a);
				redisFree(rc);
				return -1;
			}
			if (a->type == REDIS_REPLY_STRING)
				(*in_due)++;
			if (b->type == REDIS_REPLY_INTEGER && b->integer == 1)
				(*in_task)++;
			freeReplyObject(a);
			freeReplyObject(b);
		}
	}
	redisFree(rc);
	return 0;
}

/* ----------------------------------------------------------------- db --- */

MYSQL *
bench_db_open(const char *url, char *err, size_t errlen)
{
	struct url u = {0};
	MYSQL *my;
	unsigned int timeout = 10;

	if (url_parse(url, &u, err, errlen) < 0)
		return NULL;
	my = mysql_init(NULL);
	mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
	if (mysql_real_connect(my, u.host, u.user, u.password,
			       u.path ? u.path : "", (unsigned)u.port, NULL,
			       0) == NULL) {
		snprintf(err, errlen, "connect: %s", mysql_error(my));
		mysql_close(my);
		url_clear(&u);
		return NULL;
	}
	url_clear(&u);
	return my;
}

long long
db_count_prefix(const char *db_url, const char *prefix, char *err,
		size_t errlen)
{
	MYSQL *my = bench_db_open(db_url, err, errlen);
	char q[512];
	MYSQL_RES *res;
	MYSQL_ROW row;
	long long n = -1;

	if (my == NULL)
		return -1;
	/* The prefix is ours ([A-Za-z0-9.-]), so it can be spliced. */
	snprintf(q, sizeof(q),
		 "SELECT COUNT(*) FROM tasks WHERE id LIKE '%s%%'", prefix);
	if (mysql_query(my, q) == 0 && (res = mysql_store_result(my))) {
		if ((row = mysql_fetch_row(res)) && row[0])
			n = strtoll(row[0], NULL, 10);
		mysql_free_result(res);
	} else {
		snprintf(err, errlen, "%s", mysql_error(my));
	}
	mysql_close(my);
	return n;
}

/* ------------------------------------------------------------- db-raw --- */

/* The tasks table of proto/schema.c, under another name. */
#define RAW_TABLE_DDL                                                         \
	"CREATE TABLE %s ("                                                   \
	" id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"    \
	" slot SMALLINT UNSIGNED NOT NULL,"                                   \
	" topic VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL," \
	" msg_key VARBINARY(1024) NULL, body MEDIUMBLOB NOT NULL,"            \
	" headers TEXT NULL, callback TEXT NULL, due_at BIGINT NOT NULL,"     \
	" ttl_ms BIGINT NOT NULL DEFAULT 0,"                                  \
	" max_attempts INT NOT NULL DEFAULT 0,"                               \
	" priority INT NOT NULL DEFAULT 0, cron VARCHAR(128) NULL,"           \
	" timezone VARCHAR(64) NULL,"                                         \
	" status ENUM('scheduled', 'firing', 'delivered', 'cancelled',"       \
	"  'expired') CHARACTER SET ascii NOT NULL,"                          \
	" attempt INT NOT NULL DEFAULT 0, epoch BIGINT NOT NULL DEFAULT 0,"   \
	" owner VARCHAR(128) NULL, lease_until BIGINT NULL,"                  \
	" callback_status ENUM('none', 'ok', 'retrying', 'failed')"           \
	"  CHARACTER SET ascii NOT NULL DEFAULT 'none',"                      \
	" content_hash BIGINT UNSIGNED NOT NULL,"                             \
	" batch_id BIGINT UNSIGNED NOT NULL, created_at BIGINT NOT NULL,"     \
	" updated_at BIGINT NOT NULL, fired_at BIGINT NULL,"                  \
	" delivered_at BIGINT NULL, PRIMARY KEY (id),"                        \
	" KEY due_by_slot (slot, status, due_at),"                            \
	" KEY by_topic (topic, status, due_at),"                              \
	" KEY by_status_updated (status, updated_at)) ENGINE=InnoDB"

#define RAW_INSERT_PREFIX                                                  \
	"INSERT IGNORE INTO %s (id, slot, topic, msg_key, body, headers, " \
	"callback, due_at, ttl_ms, max_attempts, priority, status, "       \
	"content_hash, batch_id, created_at, updated_at) VALUES "
#define RAW_INSERT_ROW "(?,?,?,?,?,?,?,?,?,?,?,'scheduled',?,?,?,?)"
#define RAW_NCOLS 15

struct raw_db {
	const struct bench_opts *o;
	char table[64];
	long rows_total;
	atomic_long next_stmt; /* statements handed out */
	atomic_long rows_done;
	long nstmts;
	int64_t deadline;
	pthread_mutex_t mu;
	double *lat_ms;
	size_t nlat;
	long errors;
	char last_error[256];
};

static void
bind_ll(MYSQL_BIND *b, long long *v)
{
	b->buffer_type = MYSQL_TYPE_LONGLONG;
	b->buffer = v;
}

static void *
raw_db_main(void *arg)
{
	struct raw_db *d = arg;
	const struct bench_opts *o = d->o;
	int rows = o->rows_per_stmt;
	size_t nb = (size_t)rows * RAW_NCOLS;
	MYSQL_BIND *b = xcalloc(nb, sizeof(*b));
	char(*ids)[64] = xcalloc((size_t)rows, sizeof(*ids));
	unsigned long *idlen = xcalloc((size_t)rows, sizeof(*idlen));
	long long *ints = xcalloc((size_t)rows * 8, sizeof(*ints));
	unsigned long topic_len, body_len = (unsigned long)o->body_size;
	char *body = xmalloc((size_t)o->body_size + 1), *sql, *p;
	const char *topic = "bench-raw";
	double *lat = NULL;
	size_t nlat = 0, latcap = 0;
	long errors = 0;
	char err[256] = "";
	MYSQL_STMT *st = NULL;
	MYSQL *my = bench_db_open(o->db, err, sizeof(err));

	for (int i = 0; i < o->body_size; i++)
		body[i] = (char)('a' + i % 26);
	topic_len = (unsigned long)strlen(topic);
	sql = xmalloc(strlen(RAW_INSERT_PREFIX) + 64 +
		      (size_t)rows * (strlen(RAW_INSERT_ROW) + 1));
	p = sql + sprintf(sql, RAW_INSERT_PREFIX, d->table);
	for (int r = 0; r < rows; r++)
		p += sprintf(p, "%s%s", r ? "," : "", RAW_INSERT_ROW);
	if (my != NULL) {
		st = mysql_stmt_init(my);
		if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql))) {
			snprintf(err, sizeof(err), "prepare: %s",
				 mysql_stmt_error(st));
			mysql_stmt_close(st);
			st = NULL;
		}
	}
	for (int r = 0; r < rows && st; r++) {
		MYSQL_BIND *rb = b + (size_t)r * RAW_NCOLS;
		long long *iv = ints + (size_t)r * 8;

		rb[0].buffer_type = MYSQL_TYPE_STRING;
		rb[0].buffer = ids[r];
		rb[0].length = &idlen[r];
		bind_ll(&rb[1], &iv[0]); /* slot */
		rb[2].buffer_type = MYSQL_TYPE_STRING;
		rb[2].buffer = (void *)topic;
		rb[2].length = &topic_len;
		rb[3].buffer_type = MYSQL_TYPE_NULL; /* msg_key */
		rb[4].buffer_type = MYSQL_TYPE_BLOB;
		rb[4].buffer = body;
		rb[4].length = &body_len;
		rb[5].buffer_type = MYSQL_TYPE_NULL; /* headers */
		rb[6].buffer_type = MYSQL_TYPE_NULL; /* callback */
		bind_ll(&rb[7], &iv[1]);	     /* due_at */
		bind_ll(&rb[8], &iv[2]);	     /* ttl_ms */
		bind_ll(&rb[9], &iv[2]);	     /* max_attempts */
		bind_ll(&rb[10], &iv[2]);	     /* priority */
		bind_ll(&rb[11], &iv[3]);	     /* content_hash */
		rb[11].is_unsigned = 1;
		bind_ll(&rb[12], &iv[4]); /* batch_id */
		rb[12].is_unsigned = 1;
		bind_ll(&rb[13], &iv[5]); /* created_at */
		bind_ll(&rb[14], &iv[5]); /* updated_at */
	}
	if (st && mysql_stmt_bind_param(st, b)) {
		snprintf(err, sizeof(err), "bind: %s", mysql_stmt_error(st));
		mysql_stmt_close(st);
		st = NULL;
	}
	if (st == NULL) {
		pthread_mutex_lock(&d->mu);
		d->errors++;
		snprintf(d->last_error, sizeof(d->last_error), "%s", err);
		pthread_mutex_unlock(&d->mu);
	}
	while (st && !bench_stop) {
		long s = atomic_fetch_add(&d->next_stmt, 1);
		int64_t t1, t2, now = now_us() / 1000;

		if (s >= d->nstmts ||
		    (d->deadline && clock_mono_us() > d->deadline))
			break;
		for (int r = 0; r < rows; r++) {
			long long *iv = ints + (size_t)r * 8;
			long long seq = (long long)s * rows + r;

			idlen[r] = (unsigned long)snprintf(
				ids[r], sizeof(ids[r]), "%s-dbraw-%lld", o->tag,
				seq);
			iv[0] = seq % 16;
			iv[1] = now + 600000 + seq % 1000;
			iv[2] = 0;
			iv[3] = seq * 2654435761LL;
			iv[4] = s;
			iv[5] = now;
		}
		t1 = clock_mono_us();
		/* Autocommit: one transaction (and one log flush) per
		 * statement, as a group commit of rows tasks. */
		if (mysql_stmt_execute(st)) {
			errors++;
			snprintf(err, sizeof(err), "execute: %s",
				 mysql_stmt_error(st));
			continue;
		}
		t2 = clock_mono_us();
		atomic_fetch_add(&d->rows_done, rows);
		if (nlat == latcap) {
			latcap = latcap ? 2 * latcap : 1024;
			lat = xrealloc(lat, latcap * sizeof(double));
		}
		lat[nlat++] = (double)(t2 - t1) / 1e3;
	}
	pthread_mutex_lock(&d->mu);
	d->errors += errors;
	if (errors)
		snprintf(d->last_error, sizeof(d->last_error), "%s", err);
	d->lat_ms = xrealloc(d->lat_ms, (d->nlat + nlat + 1) * sizeof(double));
	if (nlat)
		memcpy(d->lat_ms + d->nlat, lat, nlat * sizeof(double));
	d->nlat += nlat;
	pthread_mutex_unlock(&d->mu);
	if (st)
		mysql_stmt_close(st);
	if (my)
		mysql_close(my);
	mysql_thread_end();
	xfree(lat);
	xfree(sql);
	xfree(body);
	xfree(ints);
	xfree(idlen);
	xfree(ids);
	xfree(b);
	return NULL;
}

static void
raw_db_progress_cb(void *arg, char *buf, size_t len)
{
	struct raw_db *d = arg;

	snprintf(buf, len, "db-raw: %ld/%ld rows", atomic_load(&d->rows_done),
		 d->rows_total);
}

int
scen_db_raw(struct bench_opts *o)
{
	struct raw_db d = {0};
	struct progress *prog;
	struct report *r;
	pthread_t *th;
	char err[256], q[4096];
	MYSQL *my;
	int64_t t0, t1;
	double secs;
	long rows;

	if (o->db == NULL) {
		note("db-raw: --db URL is required");
		return -1;
	}
	if (o->conns == 0)
		o->conns = 4;
	d.o = o;
	d.rows_total = o->count ? o->count : 500000;
	d.nstmts = (d.rows_total + o->rows_per_stmt - 1) / o->rows_per_stmt;
	d.rows_total = d.nstmts * o->rows_per_stmt;
	snprintf(d.table, sizeof(d.table), "bench_raw_%s", o->tag);
	for (char *c = d.table; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
			*c = '_';
	pthread_mutex_init(&d.mu, NULL);
	mysql_library_init(0, NULL, NULL);
	my = bench_db_open(o->db, err, sizeof(err));
	if (my == NULL) {
		note("db: %s", err);
		return -1;
	}
	snprintf(q, sizeof(q), RAW_TABLE_DDL, d.table);
	if (mysql_query(my, q)) {
		note("db: create %s: %s", d.table, mysql_error(my));
		mysql_close(my);
		return -1;
	}
	note("db-raw: %ld rows, %d rows per INSERT, %d connection(s), table %s",
	     d.rows_total, o->rows_per_stmt, o->conns, d.table);
	prog = progress_start(o, raw_db_progress_cb, &d);
	t0 = clock_mono_us();
	d.deadline = o->duration > 0 ? t0 + (int64_t)(o->duration * 1e6) : 0;
	th = xcalloc((size_t)o->conns, sizeof(*th));
	for (int i = 0; i < o->conns; i++)
		pthread_create(&th[i], NULL, raw_db_main, &d);
	for (int i = 0; i < o->conns; i++)
		pthread_join(th[i], NULL);
	t1 = clock_mono_us();
	progress_stop(prog);
	snprintf(q, sizeof(q), "DROP TABLE IF EXISTS %s", d.table);
	if (mysql_query(my, q))
		note("db: drop %s: %s", d.table, mysql_error(my));
	mysql_close(my);

	rows = atomic_load(&d.rows_done);
	secs = (double)(t1 - t0) / 1e6;
	r = report_create(o->label);
	report_int(r, "conns", "connections", o->conns);
	report_int(r, "rows_per_stmt", "rows per INSERT (one commit each)",
		   o->rows_per_stmt);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	report_int(r, "rows", "rows inserted", rows);
	report_int(r, "errors", "failed statements", d.errors);
	if (d.last_error[0])
		report_str(r, "last_error", "last error", d.last_error);
	report_num(r, "seconds", "seconds", secs, "%.2f");
	report_num(r, "rate", "rows/s", secs > 0 ? (double)rows / secs : 0,
		   "%.0f");
	report_latency(r, "stmt", "statement+commit latency", d.lat_ms, d.nlat);
	report_print(r);
	report_destroy(r);
	xfree(d.lat_ms);
	xfree(th);
	pthread_mutex_destroy(&d.mu);
	return d.errors || rows == 0 ? -1 : 0;
}

/* ------------------------------------------------------------ cleanup --- */

static int
zk_delete_tree(zhandle_t *zh, const char *path)
{
	struct String_vector kids = {0};
	int rc = zoo_get_children(zh, path, 0, &kids);

	if (rc == ZNONODE)
		return 0;
	if (rc != ZOK)
		return rc;
	for (int i = 0; i < kids.count; i++) {
		char *child = xasprintf("%s/%s", path, kids.data[i]);

		zk_delete_tree(zh, child);
		xfree(child);
	}
	deallocate_String_vector(&kids);
	rc = zoo_delete(zh, path, -1);
	return rc == ZNONODE ? ZOK : rc;
}

int
scen_cleanup(struct bench_opts *o)
{
	int rc = 0;

	if (o->topic_prefix && o->topic_prefix[0]) {
		if (kafka_topics_delete_prefix(o->brokers, o->topic_prefix) < 0)
			rc = -1;
	}
	if (o->zk && o->zk_root) {
		zhandle_t *zh;
		int64_t deadline = clock_mono_us() + 15000000;
		int zrc;

		if (o->zk_root[0] != '/' || !strcmp(o->zk_root, "/") ||
		    !strcmp(o->zk_root, "/prophet") ||
		    !strcmp(o->zk_root, "/zookeeper")) {
			note("cleanup: refusing to delete ZooKeeper path '%s'",
			     o->zk_root);
			return -1;
		}
		zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
		zh = zookeeper_init(o->zk, NULL, 10000, NULL, NULL, 0);
		if (zh == NULL) {
			note("cleanup: zookeeper_init %s failed", o->zk);
			return -1;
		}
		while (zoo_state(zh) != ZOO_CONNECTED_STATE &&
		       clock_mono_us() < deadline)
			usleep(20000);
		zrc = zk_delete_tree(zh, o->zk_root);
		if (zrc != ZOK) {
			note("cleanup: delete %s: %s", o->zk_root, zerror(zrc));
			rc = -1;
		} else {
			note("cleanup: deleted ZooKeeper tree %s", o->zk_root);
		}
		zookeeper_close(zh);
	}
	return rc;
}
