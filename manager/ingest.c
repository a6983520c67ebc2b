#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>

#include "cfg.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "payload.h"
#include "redis.h"
#include "schema.h"
#include "slot.h"
#include "trace.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Group commit: submissions share transactions with multi-row INSERTs and
 * each is answered only after its COMMIT. A submission that finds no
 * commit running starts one at once (nothing to wait for). Otherwise it
 * waits for a running commit to end (all waiting ones then go together),
 * for db.group_commit_rows to be waiting (they start a commit of their own
 * on a free connection, so parsing requests and committing overlap), or
 * for db.group_commit_us, whichever comes first.
 */
struct ingest {
	struct manager *mg;
	struct ingest_req *head, *tail;
	size_t nwaiting;
	size_t inflight_batches;
	size_t inflight_reqs;
	size_t max_batches;
	size_t batch_max;
	struct event *timer;
	int timer_armed;
	int plugged; /* > 0: submissions only queue (ingest_plug) */
	struct log_every commit_log; /* "group commit failed" */
};

struct ingest_batch {
	struct db_job job;
	struct ingest *ing;
	struct ingest_req **reqs;
	size_t n;
	uint64_t batch_id;
	int isolated; /* a row's values failed the shared commit */
};

static void bind_task_row(struct db_params *p, size_t i, void *arg);

static char *
headers_text(const json_t *j)
{
	return j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

struct insert_ctx {
	struct ingest_batch *b;
	struct ingest_req **rows;
	char **headers;
	char **callbacks;
	size_t *bytes; /* row_bytes() of each row */
};

/* The room a statement leaves beside its rows (command, statement id,
 * flags, NULL bitmap): generous. */
#define PACKET_SLACK 4096
/* A DB outage fails every group commit (hundreds a second under load):
 * one line per this many ms, with the count of those not logged. */
#define COMMIT_WARN_MS 5000

/* What a row takes in a statement's packet, generously: its values and a
 * few bytes of framing (type, length) for each of its columns. */
static size_t
row_bytes(const struct task *t, const char *headers, const char *callback)
{
	return t->body_len + strlen(t->id) + strlen(t->topic) +
	       (t->key ? strlen(t->key) : 0) + (headers ? strlen(headers) : 0) +
	       (callback ? strlen(callback) : 0) +
	       (t->cron ? strlen(t->cron) : 0) +
	       (t->timezone ? strlen(t->timezone) : 0) +
	       16 * SQL_TASK_INSERT_NCOLS;
}

static void
bind_int_or_null(struct db_params *p, int64_t v)
{
	if (v > 0)
		db_params_int(p, v);
	else
		db_params_null(p);
}

/* cron, timezone, misfire, start_at, end_at, max_occurrences: NULL for a
 * one-shot task. */
static void
bind_recurring(struct db_params *p, const struct task *t)
{
	if (t->cron == NULL) {
		for (int i = 0; i < 6; i++)
			db_params_null(p);
		return;
	}
	db_params_str(p, t->cron);
	db_params_str(p, t->timezone);
	db_params_str(p, task_misfire_name(t->misfire));
	bind_int_or_null(p, t->start_at);
	bind_int_or_null(p, t->end_at);
	bind_int_or_null(p, t->max_occurrences);
}

static void
bind_task_row(struct db_params *p, size_t i, void *arg)
{
	struct insert_ctx *ctx = arg;
	struct task *t = &ctx->rows[i]->task;

	db_params_str(p, t->id);
	db_params_int(p, ctx->rows[i]->slot);
	db_params_str(p, t->topic);
	if (t->key != NULL)
		db_params_blob(p, t->key, strlen(t->key));
	else
		db_params_null(p);
	db_params_blob(p, t->body, t->body_len);
	db_params_str(p, ctx->headers[i]);
	db_params_str(p, ctx->callbacks[i]);
	db_params_int(p, t->due_at);
	db_params_int(p, t->ttl_ms);
	db_params_int(p, t->max_attempts);
	db_params_uint(p, t->content_hash);
	db_params_uint(p, ctx->b->batch_id);
	db_params_int(p, t->created_at);
	db_params_int(p, t->updated_at);
	bind_recurring(p, t);
}

/* After the INSERT left an existing id alone: ours (an earlier try of
 * this batch), an identical replay or a conflict. */
static int
resolve_one(struct db_conn *c, struct ingest_batch *b, struct ingest_req *r,
	    struct db_params *p)
{
	struct db_rows rows;

	p->n = 0;
	db_params_str(p, r->task.id);
	if (db_query(c,
		     "SELECT content_hash, batch_id, status, due_at "
		     "FROM tasks WHERE id = ?",
		     p, &rows) < 0)
		return -1;
	if (rows.nrows == 1) {
		uint64_t hash =
			strtoull(db_rows_get(&rows, 0, 0, NULL), NULL, 10);
		uint64_t bid =
			strtoull(db_rows_get(&rows, 0, 1, NULL), NULL, 10);

		if (bid == b->batch_id) {
			r->result = 201;
		} else {
			r->result = hash == r->task.content_hash ? 200 : 409;
			r->stored_hash = hash;
			task_status_parse(db_rows_get(&rows, 0, 2, NULL),
					  &r->stored_status);
			r->stored_due_at = db_rows_int(&rows, 0, 3);
		}
	}
	db_rows_free(&rows);
	return 0;
}

/* After the INSERT skipped rows: tell replays from conflicts. */
static int
resolve_existing(struct db_conn *c, struct ingest_batch *b,
		 struct ingest_req **reqs, size_t n)
{
	struct db_params p;
	int rc = 0;

	db_params_init(&p, 1);
	for (size_t i = 0; i < n && rc == 0; i++)
		if (reqs[i]->task.id_given && reqs[i]->result == 0)
			rc = resolve_one(c, b, reqs[i], &p);
	db_params_free(&p);
	return rc;
}

/*
 * Errors about the values of one row: too long, out of range, NULL, not
 * convertible, a CHECK constraint, a trigger's SIGNAL, a missing parent
 * row. The other rows of the statement are not at fault, unlike with a
 * deadlock, a lock wait or a lost connection.
 */
static int
row_specific(unsigned int e)
{
	switch (e) {
	case 1048: /* ER_BAD_NULL_ERROR */
	case 1264: /* ER_WARN_DATA_OUT_OF_RANGE */
	case 1265: /* WARN_DATA_TRUNCATED */
	case 1292: /* ER_TRUNCATED_WRONG_VALUE */
	case 1366: /* ER_TRUNCATED_WRONG_VALUE_FOR_FIELD */
	case 1406: /* ER_DATA_TOO_LONG */
	case 1452: /* ER_NO_REFERENCED_ROW_2 */
	case 1644: /* ER_SIGNAL_EXCEPTION */
	case 3819: /* ER_CHECK_CONSTRAINT_VIOLATED (MySQL) */
	case 4025: /* ER_CONSTRAINT_FAILED (MariaDB) */ return 1;
	default: return 0;
	}
}

/* The task field a column holds, for the refusal's "field". */
static const char *
column_field(const char *col, size_t n)
{
	static const char *const map[][2] = {
		{"msg_key", "key"},
		{"id", "id"},
		{"topic", "topic"},
		{"body", "body"},
		{"headers", "headers"},
		{"callback", "callback"},
		{"due_at", "due_at"},
		{"ttl_ms", "ttl_ms"},
		{"max_attempts", "max_attempts"},
		{"cron", "cron"},
		{"timezone", "timezone"},
		{"misfire", "misfire"},
		{"start_at", "start_at"},
		{"end_at", "end_at"},
		{"max_occurrences", "max_occurrences"},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strlen(map[i][0]) == n && !strncmp(col, map[i][0], n))
			return map[i][1];
	return NULL;
}

/* The column a MariaDB/MySQL message names ("... for column 'msg_key' at
 * row 1", "... for column `db`.`tasks`.`headers` at row 1", "Column
 * 'body' cannot be null"), as a task field, or NULL. */
static const char *
error_field(const char *msg)
{
	const char *p = strstr(msg, "column ");
	const char *q, *last = NULL;
	size_t n = 0;

	if (p == NULL && (p = strstr(msg, "Column ")) == NULL)
		return NULL;
	p += 7;
	while (*p == '\'' || *p == '`') {
		q = strchr(p + 1, *p);
		if (q == NULL)
			break;
		last = p + 1;
		n = (size_t)(q - last);
		p = q + 1;
		if (*p != '.')
			break;
		p++;
	}
	return last != NULL ? column_field(last, n) : NULL;
}

/* A row the database refused for its values: answered 400 with the
 * reason (the statement's row number dropped, it means nothing here). */
static void
refuse_row(struct ingest_req *r, struct db_conn *c)
{
	char msg[256];
	const char *at;

	utf8_copy(msg, sizeof(msg), db_conn_error(c), strlen(db_conn_error(c)));
	if ((at = strstr(msg, " at row ")) != NULL)
		msg[at - msg] = '\0';
	r->result = 400;
	task_error_set(&r->refused, 400, "invalid_value",
		       error_field(db_conn_error(c)),
		       "the database refused the task: %s", msg);
}

/* INSERTs rows [i, i + n) of ctx, in as many statements as it takes to
 * keep each within the server's max_allowed_packet (a larger one would
 * fail the whole commit: the server drops the connection). */
static int
insert_rows(struct db_conn *c, struct insert_ctx *ctx, size_t i, size_t n,
	    unsigned long long *affected)
{
	size_t budget = db_conn_max_packet(c) - PACKET_SLACK;

	for (size_t g = i, k; g < i + n; g = k) {
		struct insert_ctx part = *ctx;
		size_t acc = 0;

		for (k = g;
		     k < i + n && (k == g || acc + ctx->bytes[k] <= budget);
		     k++)
			acc += ctx->bytes[k];
		part.rows += g;
		part.headers += g;
		part.callbacks += g;
		if (db_exec_rows_suffix(c, SQL_TASK_INSERT_PREFIX,
					SQL_TASK_INSERT_ROW,
					SQL_TASK_INSERT_SUFFIX, k - g,
					SQL_TASK_INSERT_NCOLS, bind_task_row,
					&part, affected) < 0)
			return -1;
	}
	return 0;
}

/* Inserts rows [i, i + n) of ctx and commits, resolving skipped ids. */
static int
insert_commit(struct db_conn *c, struct insert_ctx *ctx, size_t i, size_t n)
{
	unsigned long long affected = 0;

	if (db_begin(c) < 0)
		return -1;
	if (insert_rows(c, ctx, i, n, &affected) < 0 ||
	    (affected < n &&
	     resolve_existing(c, ctx->b, ctx->rows + i, n) < 0)) {
		db_rollback(c);
		return -1;
	}
	return db_commit(c);
}

/*
 * A shared commit failed for one row's values: each row goes in a
 * transaction of its own, so that the offenders get their 400 and the
 * others commit. A row whose own transaction fails for another reason is
 * retried (deadlock, lock wait) or left unanswered (503), and so are the
 * ones after it; those already committed keep their answer.
 */
static void
isolate_rows(struct db_conn *c, struct insert_ctx *ctx, size_t nrows)
{
	size_t i = 0;

	ctx->b->isolated = 1;
	for (int attempt = 0; i < nrows;) {
		struct ingest_req *r = ctx->rows[i];

		if (insert_commit(c, ctx, i, 1) == 0) {
			if (r->result == 0)
				r->result = 201;
		} else if (row_specific(db_conn_errno(c))) {
			refuse_row(r, c);
		} else if ((db_conn_errno(c) == 1213 ||
			    db_conn_errno(c) == 1205) &&
			   ++attempt < 4) {
			continue;
		} else {
			for (; i < nrows; i++) {
				ctx->rows[i]->result = 503;
				snprintf(ctx->rows[i]->err,
					 sizeof(ctx->rows[i]->err), "%s",
					 db_conn_error(c));
			}
			break;
		}
		attempt = 0;
		i++;
	}
}

static int batch_try(struct db_conn *c, struct db_job *job);

/* A deadlock or lock wait timeout is transient: the whole transaction is
 * tried again (the batch id makes that safe: rows found with it are
 * ours). */
static int
batch_run(struct db_conn *c, struct db_job *job)
{
	int rc = -1;

	for (int attempt = 0; attempt < 4; attempt++) {
		rc = batch_try(c, job);
		if (rc == 0 ||
		    (db_conn_errno(c) != 1213 && db_conn_errno(c) != 1205))
			break;
		log_warn("group commit retried", "error=\"%s\"",
			 db_conn_error(c));
	}
	return rc;
}

static int
batch_try(struct db_conn *c, struct db_job *job)
{
	struct ingest_batch *b = (struct ingest_batch *)job;
	struct insert_ctx ctx = {b, NULL, NULL, NULL, NULL};
	size_t nrows = 0, max = db_conn_max_packet(c) - PACKET_SLACK;
	int rc = -1;

	ctx.rows = xcalloc(b->n, sizeof(*ctx.rows));
	ctx.headers = xcalloc(b->n, sizeof(char *));
	ctx.callbacks = xcalloc(b->n, sizeof(char *));
	ctx.bytes = xcalloc(b->n, sizeof(size_t));
	for (size_t i = 0; i < b->n; i++) {
		struct ingest_req *r = b->reqs[i];

		r->result = 0;
		/* The same id twice in one batch: the first one is inserted,
		 * the others are answered as replays or conflicts of it. */
		for (size_t j = 0; r->task.id_given && j < i; j++) {
			struct ingest_req *o = b->reqs[j];

			if (o->result == -1 || strcmp(o->task.id, r->task.id))
				continue;
			r->result = -1;
		}
		if (r->result == -1)
			continue;
		ctx.headers[nrows] = headers_text(r->task.headers);
		ctx.callbacks[nrows] = headers_text(r->task.callback);
		ctx.bytes[nrows] = row_bytes(&r->task, ctx.headers[nrows],
					     ctx.callbacks[nrows]);
		if (ctx.bytes[nrows] > max) {
			/* No statement could carry it (task.max_body_bytes is
			 * above what this server takes). */
			r->result = 400;
			task_error_set(&r->refused, 413, "too_large", "body",
				       "the task takes about %zu bytes, more "
				       "than the database's max_allowed_packet "
				       "(%zu) allows",
				       ctx.bytes[nrows], max + PACKET_SLACK);
			free(ctx.headers[nrows]);
			free(ctx.callbacks[nrows]);
			continue;
		}
		ctx.rows[nrows++] = r;
	}
	if (nrows == 0) {
		rc = 0;
	} else if (insert_commit(c, &ctx, 0, nrows) == 0) {
		for (size_t i = 0; i < nrows; i++)
			if (ctx.rows[i]->result == 0)
				ctx.rows[i]->result = 201;
		rc = 0;
	} else if (row_specific(db_conn_errno(c))) {
		if (nrows == 1)
			refuse_row(ctx.rows[0], c);
		else
			isolate_rows(c, &ctx, nrows);
		rc = 0;
	}
	for (size_t i = 0; i < nrows; i++) {
		free(ctx.headers[i]);
		free(ctx.callbacks[i]);
	}
	xfree(ctx.headers);
	xfree(ctx.callbacks);
	xfree(ctx.bytes);
	xfree(ctx.rows);
	return rc;
}

/* An index write of slot failed (or could not be sent): the slot's owner
 * must rebuild it from the DB once Redis answers again. */
static void
index_lost(struct manager *mg, int slot)
{
	metric_inc(mg->m.index_failures);
	mg->index_dirty[slot] = 1;
}

/*
 * Redis answering index writes with an error (a full Redis under
 * noeviction: OOM) is a state, logged when it begins and ends rather
 * than per write. When writes succeed again, the slots that lost some
 * are handed to their owners for a rebuild at once, as after a
 * reconnect; until then the committed tasks wait in the DB (the owners'
 * sweepers index them once overdue, if Redis takes the write).
 */
static void
index_writes_back(struct manager *mg)
{
	log_info("redis takes index writes again", "refused=%ld",
		 mg->index_refusals);
	mg->index_refused = 0;
	mg->index_refusals = 0;
	ingest_redis_up(mg);
}

static void
index_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct index_slot *is = arg;
	struct manager *mg = is->mg;

	if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
		if (!mg->index_refused)
			log_warn("redis refuses index writes: new tasks wait "
				 "in the DB",
				 "slot=%d error=\"%s\"", is->slot, reply->str);
		mg->index_refused = 1;
		mg->index_refusals++;
	} else if (reply != NULL && mg->index_refused) {
		index_writes_back(mg);
	}
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
		index_lost(mg, is->slot);
}

static void
index_probe_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct manager *mg = arg;

	mg->index_probing = 0;
	if (reply != NULL && reply->type != REDIS_REPLY_ERROR &&
	    mg->index_refused)
		index_writes_back(mg);
}

/*
 * While Redis refuses index writes, a write of its own (SET, refused for
 * the same reasons: OOM, NOREPLICAS) tells when it takes them again;
 * otherwise the slots that lost some would wait for the next submission,
 * or for their owners' sweepers once their tasks are overdue.
 */
void
ingest_index_probe(struct manager *mg)
{
	char key[RKEY_MAX];

	if (!mg->index_refused || mg->index_probing)
		return;
	rkey_slot(key, sizeof(key), 0, "probe");
	if (redis_probe_write(mg->redis, key, index_probe_cb, mg) == 0)
		mg->index_probing = 1;
}

void
ingest_redis_up(struct manager *mg)
{
	char kmark[RKEY_MAX];
	int n = 0;

	for (int i = 0; i < mg->nslots; i++) {
		if (!mg->index_dirty[i])
			continue;
		rkey_marker(kmark, sizeof(kmark), i);
		if (redis_commandl(mg->redis, NULL, NULL, "DEL", kmark, NULL) ==
		    0) {
			mg->index_dirty[i] = 0;
			n++;
		}
	}
	if (n > 0)
		log_warn("index writes were lost: slots handed to their "
			 "owners for a rebuild",
			 "slots=%d", n);
}

struct index_entry {
	int slot;
	size_t i; /* in the batch */
};

static int
index_entry_cmp(const void *a, const void *b)
{
	const struct index_entry *x = a, *y = b;

	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* Sends one slot's HSET of payloads, then its ZADD of ids: on one
 * connection, in that order, so a due id always has its payload. */
static void
index_slot_send(struct manager *mg, int slot, const struct ingest_batch *b,
		const struct index_entry *e, size_t m, char **payload,
		const size_t *plen, char (*score)[24])
{
	char kdue[RKEY_MAX], ktask[RKEY_MAX];
	size_t argc = 2 + 2 * m;
	const char **argv = xmalloc(argc * sizeof(*argv));
	size_t *len = xmalloc(argc * sizeof(*len));
	struct index_slot *is = &mg->index_slots[slot];
	int rc;

	rkey_task(ktask, sizeof(ktask), slot);
	rkey_due(kdue, sizeof(kdue), slot);
	argv[0] = "HSET";
	len[0] = 4;
	argv[1] = ktask;
	len[1] = strlen(ktask);
	for (size_t j = 0; j < m; j++) {
		const char *id = b->reqs[e[j].i]->task.id;

		argv[2 + 2 * j] = id;
		len[2 + 2 * j] = strlen(id);
		argv[3 + 2 * j] = payload[j];
		len[3 + 2 * j] = plen[j];
	}
	rc = redis_command_argv(mg->redis, index_reply_cb, is, (int)argc, argv,
				len);
	argv[0] = "ZADD";
	argv[1] = kdue;
	len[1] = strlen(kdue);
	for (size_t j = 0; j < m; j++) {
		const char *id = b->reqs[e[j].i]->task.id;

		argv[2 + 2 * j] = score[j];
		len[2 + 2 * j] = strlen(score[j]);
		argv[3 + 2 * j] = id;
		len[3 + 2 * j] = strlen(id);
	}
	if (rc == 0)
		rc = redis_command_argv(mg->redis, index_reply_cb, is,
					(int)argc, argv, len);
	if (rc < 0)
		index_lost(mg, slot);
	else
		metric_add(mg->m.indexed, (double)m);
	xfree(argv);
	xfree(len);
}

struct far_entry {
	long long start; /* of its bucket, ms */
	char *el;	 /* "<due> <id> <payload>" */
	size_t len;
};

static int
far_entry_cmp(const void *a, const void *b)
{
	const struct far_entry *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Appends one slot's tasks whose bucket starts after the near window to
 * their buckets: one RPUSH per bucket, then one ZADD of the buckets to bk
 * (the owner's mover finds a bucket through bk; an element pushed before
 * its bucket is listed waits for the next move). */
static void
index_far_send(struct manager *mg, int slot, struct far_entry *f, size_t m)
{
	char kb[RKEY_MAX], kbk[RKEY_MAX];
	const char **argv = xmalloc((2 + 2 * m) * sizeof(*argv));
	size_t *len = xmalloc((2 + 2 * m) * sizeof(*len));
	char(*mins)[24] = xmalloc(m * sizeof(*mins));
	struct index_slot *is = &mg->index_slots[slot];
	size_t nmin = 0;
	int rc = 0;

	qsort(f, m, sizeof(*f), far_entry_cmp);
	for (size_t g = 0; g < m && rc == 0;) {
		size_t k = 0;

		rkey_bucket(kb, sizeof(kb), slot, f[g].start);
		argv[0] = "RPUSH";
		len[0] = 5;
		argv[1] = kb;
		len[1] = strlen(kb);
		while (g + k < m && f[g + k].start == f[g].start) {
			argv[2 + k] = f[g + k].el;
			len[2 + k] = f[g + k].len;
			k++;
		}
		rc = redis_command_argv(mg->redis, index_reply_cb, is,
					(int)(2 + k), argv, len);
		num_format_ll(mins[nmin], f[g].start);
		nmin++;
		g += k;
	}
	rkey_bk(kbk, sizeof(kbk), slot);
	argv[0] = "ZADD";
	len[0] = 4;
	argv[1] = kbk;
	len[1] = strlen(kbk);
	for (size_t j = 0; j < nmin; j++) {
		argv[2 + 2 * j] = mins[j];
		len[2 + 2 * j] = strlen(mins[j]);
		argv[3 + 2 * j] = mins[j];
		len[3 + 2 * j] = strlen(mins[j]);
	}
	if (rc == 0)
		rc = redis_command_argv(mg->redis, index_reply_cb, is,
					(int)(2 + 2 * nmin), argv, len);
	if (rc < 0)
		index_lost(mg, slot);
	else
		metric_add(mg->m.indexed, (double)m);
	xfree(mins);
	xfree(argv);
	xfree(len);
}

/*
 * Indexes the tasks a batch committed (201) that are due within the
 * horizon (plus a margin, so the loader and this path overlap, never
 * gap): a few commands per slot, not per task. Tasks whose minute starts
 * after the near window go to their minute's bucket, the others to
 * due/task. Marks in wake the slots that got a task due before their
 * owner's next look-ahead scan.
 */
static void
index_batch(struct manager *mg, const struct ingest_batch *b, int64_t now,
	    char *wake)
{
	int64_t lookahead = cfg_int(mg->cfg, CFG_WORKER_LOOKAHEAD_MS);
	struct index_entry *e = xmalloc(b->n * sizeof(*e));
	size_t k = 0;

	for (size_t i = 0; i < b->n; i++) {
		const struct task *t = &b->reqs[i]->task;
		int slot;

		if (b->reqs[i]->result != 201)
			continue;
		slot = b->reqs[i]->slot;
		if (t->due_at < now + lookahead)
			wake[slot] = 1;
		if (t->due_at >= now + mg->horizon_ms + mg->index_margin_ms)
			continue;
		e[k].slot = slot;
		e[k].i = i;
		k++;
	}
	qsort(e, k, sizeof(*e), index_entry_cmp);
	for (size_t g = 0; g < k;) {
		size_t m = 1, nn = 0, nf = 0;
		struct index_entry *near;
		struct far_entry *far;
		char **payload;
		size_t *plen;
		char(*score)[24];

		while (g + m < k && e[g + m].slot == e[g].slot)
			m++;
		near = xmalloc(m * sizeof(*near));
		far = xmalloc(m * sizeof(*far));
		payload = xmalloc(m * sizeof(*payload));
		plen = xmalloc(m * sizeof(*plen));
		score = xmalloc(m * sizeof(*score));
		for (size_t j = 0; j < m; j++) {
			const struct task *t = &b->reqs[e[g + j].i]->task;
			long long start =
				mg->bucket_ms > 0
					? (long long)(t->due_at -
						      t->due_at % mg->bucket_ms)
					: 0;
			size_t len;
			char *p = payload_encode(t, &len);

			if (mg->bucket_ms > 0 &&
			    start > now + mg->bucket_near_ms) {
				size_t idl = strlen(t->id);

				far[nf].start = start;
				far[nf].el = xmalloc(24 + idl + len + 2);
				/* "<due_at> <id> <payload>" */
				far[nf].len =
					num_format_ll(far[nf].el, t->due_at);
				far[nf].el[far[nf].len++] = ' ';
				memcpy(far[nf].el + far[nf].len, t->id, idl);
				far[nf].len += idl;
				far[nf].el[far[nf].len++] = ' ';
				memcpy(far[nf].el + far[nf].len, p, len);
				far[nf].len += len;
				free(p);
				nf++;
				continue;
			}
			near[nn] = e[g + j];
			payload[nn] = p;
			plen[nn] = len;
			num_format_ll(score[nn], t->due_at);
			nn++;
		}
		if (nn > 0)
			index_slot_send(mg, e[g].slot, b, near, nn, payload,
					plen, score);
		if (nf > 0)
			index_far_send(mg, e[g].slot, far, nf);
		for (size_t j = 0; j < nn; j++)
			free(payload[j]);
		for (size_t j = 0; j < nf; j++)
			xfree(far[j].el);
		xfree(near);
		xfree(far);
		xfree(payload);
		xfree(plen);
		xfree(score);
		g += m;
	}
	xfree(e);
}

static void ingest_flush(struct ingest *ing);
static void ingest_kick(struct ingest *ing);

void
ingest_wake(struct manager *mg, int slot)
{
	char chan[512], num[16];

	rchan_wake(chan, sizeof(chan), cfg_str(mg->cfg, CFG_CLUSTER_ROOT));
	snprintf(num, sizeof(num), "%d", slot);
	redis_commandl(mg->redis, NULL, NULL, "PUBLISH", chan, num, NULL);
}

/* Tasks due sooner than a worker's next scan would see them: tell the
 * slots' owners to look now. */
static void
wake_workers(struct manager *mg, const char *wake)
{
	for (int i = 0; i < mg->nslots; i++)
		if (wake[i])
			ingest_wake(mg, i);
}

/*
 * A duplicate id inside one batch: only its first occurrence o went to
 * the database. The same content shares o's outcome (a replay of what o
 * stored); other content conflicts with what o stored, or when o
 * conflicted, is compared with the stored task o met (a replay of it, or
 * another conflict); it is left unanswered (503, to be retried alone)
 * when o was refused and nothing tells what is stored.
 */
static void
dup_result(struct ingest_req *r, const struct ingest_req *o)
{
	int same = o->task.content_hash == r->task.content_hash;

	switch (o->result) {
	case 201:
	case 200:
		r->result = same ? 200 : 409;
		r->stored_status =
			o->result == 201 ? TASK_SCHEDULED : o->stored_status;
		r->stored_due_at =
			o->result == 201 ? o->task.due_at : o->stored_due_at;
		r->stored_hash = o->result == 201 ? o->task.content_hash
						  : o->stored_hash;
		break;
	case 409:
		r->result = r->task.content_hash == o->stored_hash ? 200 : 409;
		r->stored_status = o->stored_status;
		r->stored_due_at = o->stored_due_at;
		r->stored_hash = o->stored_hash;
		break;
	case 400:
		r->result = same ? o->result : 503;
		r->refused = o->refused;
		snprintf(r->err, sizeof(r->err), "%s",
			 "a submission of the same id in the same commit was "
			 "not stored; submit again");
		break;
	default:
		r->result = 503;
		snprintf(r->err, sizeof(r->err), "%s", o->err);
		break;
	}
}

static void
commit_failed_log(struct ingest *ing, const struct ingest_batch *b,
		  const char *err)
{
	long skipped;

	if (log_every(&ing->commit_log, clock_mono_ms(), COMMIT_WARN_MS,
		      &skipped))
		log_warn("group commit failed",
			 "rows=%zu error=\"%s\" not_logged_since_last=%ld",
			 b->n, err, skipped);
}

static void
batch_done_cb(struct db_job *job, int status, const char *err)
{
	struct ingest_batch *b = (struct ingest_batch *)job;
	struct ingest *ing = b->ing;
	struct manager *mg = ing->mg;
	int64_t now = clock_now_ms();
	char *wake = xcalloc((size_t)mg->nslots, 1);

	metric_inc(mg->m.db_batches);
	metric_observe(mg->m.db_batch_rows, (double)b->n);
	if (status >= 0)
		CRASHPOINT("ingest_after_commit_before_index");
	if (status < 0)
		commit_failed_log(ing, b, err);
	for (size_t i = 0; i < b->n; i++) {
		struct ingest_req *r = b->reqs[i];

		if (status < 0) {
			r->result = 503;
			snprintf(r->err, sizeof(r->err), "%s", err);
		} else if (r->result == -1) {
			for (size_t j = 0; j < i; j++) {
				struct ingest_req *o = b->reqs[j];

				if (o->result != -1 &&
				    !strcmp(o->task.id, r->task.id)) {
					dup_result(r, o);
					break;
				}
			}
		}
	}
	if (b->isolated)
		metric_inc(mg->m.db_isolated);
	for (size_t i = 0, n = 0; i < b->n; i++) {
		const struct ingest_req *r = b->reqs[i];

		if (r->result != 400)
			continue;
		metric_inc(mg->m.db_refused);
		/* Once per commit: what validation let through. */
		if (n++ == 0) {
			char tk[TRACE_KV_LEN];

			log_warn("database refused a submission",
				 "id=%s%s rows=%zu isolated=%d reason=\"%s\"",
				 r->task.id,
				 trace_kv(tk, sizeof(tk), r->task.headers),
				 b->n, b->isolated, r->refused.message);
		}
	}
	if (log_enabled(PLOG_DEBUG))
		for (size_t i = 0; i < b->n; i++) {
			const struct ingest_req *r = b->reqs[i];
			char tk[TRACE_KV_LEN];

			log_debug("task submitted",
				  "id=%s%s topic=%s due_at=%lld result=%d",
				  r->task.id,
				  trace_kv(tk, sizeof(tk), r->task.headers),
				  r->task.topic, (long long)r->task.due_at,
				  r->result);
		}
	index_batch(mg, b, now, wake);
	wake_workers(mg, wake);
	xfree(wake);
	ing->inflight_batches--;
	ing->inflight_reqs -= b->n;
	for (size_t i = 0; i < b->n; i++)
		b->reqs[i]->done_cb(b->reqs[i], b->reqs[i]->arg);
	xfree(b->reqs);
	xfree(b);
	/* What waited for this commit goes now. */
	if (ing->head != NULL)
		ingest_flush(ing);
}

static void
ingest_flush(struct ingest *ing)
{
	struct ingest_batch *b;
	size_t n;

	while (ing->head != NULL && ing->inflight_batches < ing->max_batches) {
		n = ing->nwaiting < ing->batch_max ? ing->nwaiting
						   : ing->batch_max;
		b = xcalloc(1, sizeof(*b));
		b->ing = ing;
		b->reqs = xcalloc(n, sizeof(*b->reqs));
		if (getrandom(&b->batch_id, sizeof(b->batch_id), 0) !=
		    sizeof(b->batch_id))
			abort();
		b->batch_id >>= 1; /* fits a signed BIGINT too */
		for (size_t i = 0; i < n; i++) {
			struct ingest_req *r = ing->head;

			ing->head = r->next;
			r->next = NULL;
			b->reqs[i] = r;
		}
		if (ing->head == NULL)
			ing->tail = NULL;
		b->n = n;
		ing->nwaiting -= n;
		ing->inflight_batches++;
		ing->inflight_reqs += n;
		b->job.run = batch_run;
		b->job.done_cb = batch_done_cb;
		db_pool_submit(ing->mg->db, &b->job);
	}
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ingest *ing = arg;

	ing->timer_armed = 0;
	ingest_flush(ing);
}

struct ingest *
ingest_create(struct manager *mg)
{
	struct ingest *ing = xcalloc(1, sizeof(*ing));

	mg->index_dirty = xcalloc((size_t)mg->nslots, 1);
	mg->index_slots = xcalloc((size_t)mg->nslots, sizeof(*mg->index_slots));
	for (int i = 0; i < mg->nslots; i++) {
		mg->index_slots[i].mg = mg;
		mg->index_slots[i].slot = i;
	}

	ing->mg = mg;
	ing->max_batches = (size_t)cfg_int(mg->cfg, CFG_DB_POOL_SIZE);
	ing->batch_max = (size_t)cfg_int(mg->cfg, CFG_DB_BATCH_MAX);
	ing->timer = evtimer_new(mg->base, timer_cb, ing);
	return ing;
}

void
ingest_destroy(struct ingest *ing)
{
	if (ing == NULL)
		return;
	xfree(ing->mg->index_dirty);
	xfree(ing->mg->index_slots);
	event_free(ing->timer);
	xfree(ing);
}

void
ingest_submit(struct ingest *ing, struct ingest_req *r)
{
	r->slot = slot_of(r->task.id, strlen(r->task.id), ing->mg->nslots);
	cover_check(ing->mg, &r->task);
	r->next = NULL;
	if (ing->tail != NULL)
		ing->tail->next = r;
	else
		ing->head = r;
	ing->tail = r;
	ing->nwaiting++;
	if (ing->plugged == 0)
		ingest_kick(ing);
}

void
ingest_plug(struct ingest *ing)
{
	ing->plugged++;
}

void
ingest_unplug(struct ingest *ing)
{
	if (--ing->plugged == 0 && ing->head != NULL)
		ingest_kick(ing);
}

/* Starts a commit now or arms the timer (see the comment at the top). */
static void
ingest_kick(struct ingest *ing)
{
	int64_t us = cfg_int(ing->mg->cfg, CFG_DB_GROUP_COMMIT_US);
	size_t rows = (size_t)cfg_int(ing->mg->cfg, CFG_DB_GROUP_COMMIT_ROWS);

	if (ing->nwaiting >= ing->batch_max || us == 0 ||
	    ing->inflight_batches == 0 || ing->nwaiting >= rows) {
		if (ing->timer_armed) {
			evtimer_del(ing->timer);
			ing->timer_armed = 0;
		}
		ingest_flush(ing);
	} else if (!ing->timer_armed) {
		struct timeval tv = {0, (suseconds_t)us};

		evtimer_add(ing->timer, &tv);
		ing->timer_armed = 1;
	}
}

size_t
ingest_pending(const struct ingest *ing)
{
	return ing->nwaiting + ing->inflight_reqs;
}

json_t *
ingest_refused_json(struct manager *mg, const struct ingest_req *r, int *code)
{
	metric_inc(mg->m.rejected);
	*code = r->refused.http;
	return task_error_json(&r->refused);
}
