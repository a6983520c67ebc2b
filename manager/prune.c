#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "cfg.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "kafka.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "schema.h"
#include "trace.h"
#include "utf8.h"
#include "xmalloc.h"
#include "zk.h"

/*
 * Retention (issue 19; docs/architecture.md, "Retention"). Finished tasks
 * (delivered, cancelled, expired: states a task never leaves but through
 * a restore of an expired one) whose last change is older than
 * task.retention are deleted with their state-log rows, oldest first, in
 * short transactions of task.prune_chunk rows with task.prune_pause_ms
 * between them; state-log rows older than task.log_retention go too,
 * whatever their task (a recurring series writes one per occurrence).
 *
 * One manager prunes: the one holding the ephemeral ZooKeeper node
 * <root>/pruner. Taking it, the manager raises an epoch in prune_state;
 * every prune transaction first locks that row and stops if the epoch is
 * no longer its own, so a holder that lost its session without noticing
 * (paused, partitioned) deletes nothing once the next one started. It
 * also stops starting transactions as soon as its session is not
 * connected. Deleting is safe whoever does it: a transaction locks its
 * rows (skipping any someone else holds) and re-checks that they are
 * still finished and old enough.
 *
 * With task.archive_topic, each chunk's final records are published in a
 * Kafka transaction before its rows are deleted, and the rows go only
 * once it committed; the DB transaction stores the archive's end offsets.
 * A pruner that died between the Kafka commit and the DB commit left
 * records of rows still there: the next holder (whose producer, with the
 * same transactional id, fences the dead one's) reads the topic from the
 * stored offsets to its end and deletes those rows without publishing
 * them again. So each pruned task is archived exactly once.
 *
 * Passes and their progress live in prune_state: a holder that finds a
 * pass unfinished resumes it (same cutoffs); GET /v1/admin/prune shows it
 * from any manager, POST asks the holder for a pass now (it polls the
 * row every second) or counts what a pass would delete (dry run).
 */

#define PRUNE_TICK_MS 1000
#define PRUNE_RETRY_MS 1000
#define KAFKA_TIMEOUT_MS 30000
/* Larger records would pass Kafka's default message.max.bytes (1 MB):
 * such a task is kept (and logged) rather than stall the pruner. */
#define ARCHIVE_MAX_BYTES 900000

static const char *const finals[] = {"delivered", "cancelled", "expired"};
#define NFINALS 3

enum phase { PH_TASKS_FIRST = 0, PH_LOGS = NFINALS, PH_END };

enum job_kind {
	J_ACQUIRE,
	J_BEGIN,
	J_CHUNK,
	J_LOGS,
	J_END,
	J_DRY,
	J_GET,
	J_REQUEST
};

/* What the pruner's DB thread keeps between its jobs (they run one at a
 * time, on the pool's one connection). */
struct prune_conn {
	struct kafka_txn *txn;
	int recover; /* read the archive back before the next chunk */
	int64_t *offsets;
	int noffsets;
};

struct pruner {
	struct manager *mg;
	struct db_pool *db; /* a connection of its own */
	int64_t retention_ms, log_retention_ms, interval_ms;
	int chunk, pause_ms;
	char *archive_topic; /* <prefix><task.archive_topic>, NULL: none */
	char txn_id[600];
	char id[200];
	char path[600];
	/* the ZooKeeper lock */
	int connected;
	int held;
	int acquiring;	    /* a create or a get is out */
	int waiting;	    /* a watch on the holder's node is armed */
	int64_t epoch;	    /* the fence raised by us; 0: not (yet) */
	int64_t zk_ok_mono; /* the lock node was last seen ours */
	int64_t session_ms;
	struct event *probe_ev;
	/* passes */
	int busy; /* a job is out */
	int stopping;
	struct event *tick_ev;
	struct event *step_ev;
	int in_pass;
	int phase;
	int64_t pass, cutoff, log_cutoff;
	int64_t after_at, log_seq;
	char after_id[TASK_ID_MAX + 1];
	int64_t pass_mono;
	int64_t next_pass_mono;
	int64_t requested_seen;
	int drop_txn; /* the next job destroys the producer */
	int64_t err_logged_mono;
	struct prune_conn *conn; /* the DB thread's; the loop never reads it */
};

struct prune_job {
	struct db_job job;
	struct pruner *p;
	enum job_kind kind;
	int64_t epoch;
	int drop_txn;
	/* J_BEGIN */
	int due;
	int64_t requested_seen;
	int action; /* 0 nothing, 1 new pass, 2 resumed */
	int64_t requested_at;
	/* J_BEGIN, J_CHUNK, J_LOGS */
	int64_t pass, cutoff, log_cutoff;
	int phase;
	int64_t after_at, log_seq;
	char after_id[TASK_ID_MAX + 1];
	int done;
	int fenced;
	long long deleted, logs, archived, kept;
	/* J_END */
	int64_t oldest_at;
	long long eligible;
	char why[256]; /* a failure that is not the DB's */
};

static struct pruner *the_pruner;

static void kick(struct pruner *p);
static void step(struct pruner *p);

static int64_t
db_int_or(const struct db_rows *r, size_t row, size_t col, int64_t dflt)
{
	return db_rows_get(r, row, col, NULL) ? db_rows_int(r, row, col) : dflt;
}

/* The state-log rows of ids, and the offsets, as JSON arrays ------------ */

static char *
offsets_text(const int64_t *o, int n)
{
	json_t *a = json_array();
	char *s;

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(o[i]));
	s = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	return s;
}

static int64_t *
offsets_parse(const char *s, int *n)
{
	json_t *a = s ? json_loads(s, 0, NULL) : NULL, *v;
	int64_t *o = NULL;
	size_t i;

	*n = 0;
	if (!json_is_array(a)) {
		json_decref(a);
		return NULL;
	}
	o = xcalloc(json_array_size(a) + 1, sizeof(*o));
	json_array_foreach (a, i, v)
		o[i] = json_is_integer(v) ? json_integer_value(v) : -1;
	*n = (int)json_array_size(a);
	json_decref(a);
	return o;
}

/* On the DB thread ---------------------------------------------------- */

/* *ok: our epoch is still the fence (the row stays locked until the
 * transaction ends). */
static int
fence_ok(struct db_conn *c, int64_t epoch, int *ok)
{
	struct db_rows rows;

	if (db_query(c, SQL_PRUNE_FENCE, NULL, &rows) < 0)
		return -1;
	*ok = rows.nrows == 1 && db_rows_int(&rows, 0, 0) == epoch;
	db_rows_free(&rows);
	return 0;
}

/* A transaction that starts with the fence: 1 ours, 0 fenced (rolled
 * back), -1 error. */
static int
begin_fenced(struct db_conn *c, struct prune_job *j)
{
	int ok;

	if (db_begin(c) < 0)
		return -1;
	if (fence_ok(c, j->epoch, &ok) < 0) {
		db_rollback(c);
		return -1;
	}
	if (!ok) {
		j->fenced = 1;
		db_rollback(c);
	}
	return ok;
}

/* Sub-lists of ids, so that the connection prepares few texts. */
static const size_t in_sizes[] = {256, 32, 4, 1};

/* What a statement binds before its IN list. */
struct lead {
	const char *str; /* NULL: none */
	int64_t num;
	int has_num;
};

struct in_arg {
	char *const *vals;
	const struct lead *lead;
	struct db_rows **rows;
	size_t *nrows;
};

static void
in_bind(struct db_params *p, size_t from, size_t m, void *arg)
{
	struct in_arg *a = arg;

	if (a->lead != NULL && a->lead->str != NULL)
		db_params_str(p, a->lead->str);
	if (a->lead != NULL && a->lead->has_num)
		db_params_int(p, a->lead->num);
	for (size_t i = 0; i < m; i++)
		db_params_str(p, a->vals[from + i]);
}

static void
in_rows(struct db_rows *r, void *arg)
{
	struct in_arg *a = arg;

	*a->rows = xrealloc(*a->rows, (*a->nrows + 1) * sizeof(**a->rows));
	(*a->rows)[(*a->nrows)++] = *r;
}

/*
 * prefix + IN list + suffix over vals, in sub-lists of in_sizes. With
 * rows, each statement's result is appended to *rows; else the affected
 * rows are added to *affected.
 */
static int
in_run(struct db_conn *c, const char *prefix, const char *suffix,
       char *const *vals, size_t n, const struct lead *lead,
       struct db_rows **rows, size_t *nrows, unsigned long long *affected)
{
	struct in_arg a = {vals, lead, rows, nrows};
	struct db_list l = {
		.prefix = prefix,
		.item = "?",
		.suffix = suffix,
		.sizes = in_sizes,
		.nsizes = sizeof(in_sizes) / sizeof(in_sizes[0]),
		.bind = in_bind,
		.rows_cb = rows != NULL ? in_rows : NULL,
		.arg = &a,
	};

	return db_run_list(c, &l, n, affected);
}

static void
rows_free_all(struct db_rows *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		db_rows_free(&rows[i]);
	xfree(rows);
}

static void
strs_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		xfree(v[i]);
	xfree(v);
}

/* Deletes the tasks of ids and their log rows (the caller holds their
 * row locks). */
static int
delete_tasks(struct db_conn *c, char *const *ids, size_t n,
	     unsigned long long *tasks, unsigned long long *logs)
{
	if (in_run(c, SQL_PRUNE_DELETE_TASKS, ")", ids, n, NULL, NULL, NULL,
		   tasks) < 0)
		return -1;
	return in_run(c, SQL_PRUNE_DELETE_LOGS, ")", ids, n, NULL, NULL, NULL,
		      logs);
}

static int
progress(struct db_conn *c, const long long by[NFINALS], long long logs,
	 long long archived, const char *offsets, int64_t log_seq)
{
	struct db_params p;
	int rc;

	db_params_init(&p, 8);
	for (int i = 0; i < NFINALS; i++)
		db_params_int(&p, by[i]);
	db_params_int(&p, logs);
	db_params_int(&p, archived);
	db_params_str(&p, offsets);
	db_params_int(&p, log_seq);
	db_params_int(&p, clock_now_ms());
	rc = db_exec(c, SQL_PRUNE_PROGRESS, &p, NULL);
	db_params_free(&p);
	return rc;
}

static int
status_index(const char *s)
{
	for (int i = 0; i < NFINALS; i++)
		if (s != NULL && !strcmp(s, finals[i]))
			return i;
	return -1;
}

/* Archive ------------------------------------------------------------ */

/* The log rows of id among the statements' results (each sorted by
 * task_id, seq; a task's rows are all in one). */
static void
find_logs(const struct db_rows *logs, size_t nlogs, const char *id,
	  const struct db_rows **set, size_t *first, size_t *n)
{
	*set = NULL;
	*first = *n = 0;
	for (size_t s = 0; s < nlogs; s++) {
		for (size_t i = 0; i < logs[s].nrows; i++) {
			if (strcmp(db_rows_get(&logs[s], i, 0, NULL), id))
				continue;
			if (*n == 0) {
				*set = &logs[s];
				*first = i;
			}
			(*n)++;
		}
		if (*n > 0)
			return;
	}
}

/* The archive record of a task: what GET /v1/tasks/{id}?log=1 shows,
 * with when and by which pass it was archived. */
static char *
archive_value(const struct db_rows *task, size_t row,
	      const struct db_rows *logs, size_t nlogs, int64_t pass)
{
	const struct db_rows *set;
	size_t first, n;
	json_t *o;
	char *s;

	static const struct db_rows none;

	find_logs(logs, nlogs, db_rows_get(task, row, SQL_TC_ID, NULL), &set,
		  &first, &n);
	/* No stored rows: the log is what the task's columns say. */
	o = api_task_json(task, row, set ? set : &none, first, n, 1);
	json_object_set_new(o, "archived_at", json_integer(clock_now_ms()));
	json_object_set_new(o, "prune_pass", json_integer(pass));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

static int
txn_ready(struct pruner *p, char *err, size_t errlen)
{
	if (p->conn->txn != NULL)
		return 0;
	p->conn->txn = kafka_txn_create(p->mg->cfg, p->txn_id, KAFKA_TIMEOUT_MS,
					err, errlen);
	if (p->conn->txn == NULL)
		return -1;
	/* The producer it fenced may have committed records of rows it did
	 * not get to delete. */
	p->conn->recover = 1;
	return 0;
}

struct readback {
	char **ids;
	int64_t *versions;
	size_t n, cap;
};

static void
readback_cb(const rd_kafka_message_t *m, void *arg)
{
	struct readback *rb = arg;
	rd_kafka_headers_t *h = NULL;
	const void *v;
	size_t vlen;
	char buf[32] = "";

	if (m->key == NULL || m->key_len == 0 || m->key_len > TASK_ID_MAX)
		return;
	if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	    rd_kafka_header_get_last(h, "prophet-updated-at", &v, &vlen) ==
		    RD_KAFKA_RESP_ERR_NO_ERROR &&
	    vlen < sizeof(buf))
		memcpy(buf, v, vlen);
	if (rb->n == rb->cap) {
		rb->cap = rb->cap ? rb->cap * 2 : 64;
		rb->ids = xrealloc(rb->ids, rb->cap * sizeof(*rb->ids));
		rb->versions =
			xrealloc(rb->versions, rb->cap * sizeof(*rb->versions));
	}
	rb->ids[rb->n] = xmalloc(m->key_len + 1);
	memcpy(rb->ids[rb->n], m->key, m->key_len);
	rb->ids[rb->n][m->key_len] = '\0';
	rb->versions[rb->n] = buf[0] ? strtoll(buf, NULL, 10) : -1;
	rb->n++;
}

/* The version of id the read-back saw, or -1. */
static int64_t
readback_version(const struct readback *rb, const char *id)
{
	for (size_t i = 0; i < rb->n; i++)
		if (!strcmp(rb->ids[i], id))
			return rb->versions[i];
	return -1;
}

/*
 * Records committed to the archive after the offsets the DB holds are of
 * rows a pruner did not get to delete (it died, or its DB commit failed):
 * those rows are deleted now without a second record, if they are still
 * the version archived. Then the DB holds the archive's end.
 */
static int
archive_recover(struct db_conn *c, struct prune_job *j)
{
	struct pruner *p = j->p;
	struct readback rb = {0};
	struct db_rows st, *locked = NULL;
	size_t nlocked = 0, ndel = 0;
	int64_t *from, *ends = NULL;
	int nfrom, nends = 0, rc = -1, r;
	char err[512], *text = NULL, **del = NULL;
	long long by[NFINALS] = {0};
	unsigned long long at = 0, al = 0;

	if (db_query(c, SQL_PRUNE_STATE_GET, NULL, &st) < 0)
		return -1;
	from = offsets_parse(
		st.nrows ? db_rows_get(&st, 0, SQL_PS_ARCHIVE_OFFSETS, NULL)
			 : NULL,
		&nfrom);
	db_rows_free(&st);
	if (kafka_read_committed(p->mg->cfg, p->archive_topic, from, nfrom,
				 readback_cb, &rb, &ends, &nends,
				 KAFKA_TIMEOUT_MS, err, sizeof(err)) < 0) {
		snprintf(j->why, sizeof(j->why), "archive read back: %.200s",
			 err);
		log_warn("archive read back failed; pruning waits",
			 "topic=%s error=\"%s\"", p->archive_topic, err);
		goto out;
	}
	if ((r = begin_fenced(c, j)) <= 0) {
		rc = r;
		goto out;
	}
	if (rb.n > 0 &&
	    in_run(c, SQL_PRUNE_LOCK_ARCHIVED, SQL_PRUNE_LOCK_SUFFIX, rb.ids,
		   rb.n, NULL, &locked, &nlocked, NULL) < 0)
		goto fail;
	for (size_t s = 0; s < nlocked; s++)
		for (size_t i = 0; i < locked[s].nrows; i++) {
			const char *id = db_rows_get(&locked[s], i, 0, NULL);
			int k = status_index(
				db_rows_get(&locked[s], i, 1, NULL));

			if (k < 0 || readback_version(&rb, id) !=
					     db_rows_int(&locked[s], i, 2))
				continue;
			del = xrealloc(del, (ndel + 1) * sizeof(*del));
			del[ndel++] = xstrdup(id);
			by[k]++;
		}
	if (ndel > 0 && delete_tasks(c, del, ndel, &at, &al) < 0)
		goto fail;
	text = offsets_text(ends, nends);
	if (progress(c, by, (long long)al, (long long)ndel, text, 0) < 0 ||
	    db_commit(c) < 0)
		goto fail;
	xfree(p->conn->offsets);
	p->conn->offsets = ends;
	p->conn->noffsets = nends;
	ends = NULL;
	p->conn->recover = 0;
	j->deleted += (long long)at;
	j->logs += (long long)al;
	j->archived += (long long)ndel;
	log_info("archive read back", "topic=%s records=%zu deleted=%zu",
		 p->archive_topic, rb.n, ndel);
	rc = 0;
	goto out;
fail:
	db_rollback(c);
out:
	rows_free_all(locked, nlocked);
	strs_free(rb.ids, rb.n);
	strs_free(del, ndel);
	xfree(rb.versions);
	xfree(from);
	xfree(ends);
	free(text);
	return rc;
}

/* The records of the locked rows, published in one Kafka transaction.
 * del gets the ids to delete (an oversized record's task is kept). */
static int
archive_send(struct db_conn *c, struct prune_job *j, struct db_rows *locked,
	     size_t nlocked, char ***del, size_t *ndel, int64_t **newoff,
	     int *nnew, long long *sent)
{
	struct pruner *p = j->p;
	struct db_rows *logs = NULL;
	struct kafka_rec *recs;
	char **vals, **all = NULL, err[512];
	size_t nlogs = 0, nall = 0, nrecs = 0;
	int fatal = 0, rc = -1, np;

	for (size_t s = 0; s < nlocked; s++)
		for (size_t i = 0; i < locked[s].nrows; i++) {
			all = xrealloc(all, (nall + 1) * sizeof(*all));
			all[nall++] = xstrdup(
				db_rows_get(&locked[s], i, SQL_TC_ID, NULL));
		}
	recs = xcalloc(nall + 1, sizeof(*recs));
	vals = xcalloc(nall + 1, sizeof(*vals));
	if (in_run(c, SQL_PRUNE_LOG_ROWS, SQL_PRUNE_LOG_ROWS_SUFFIX, all, nall,
		   NULL, &logs, &nlogs, NULL) < 0)
		goto out;
	for (size_t s = 0; s < nlocked; s++)
		for (size_t i = 0; i < locked[s].nrows; i++) {
			const char *id =
				db_rows_get(&locked[s], i, SQL_TC_ID, NULL);
			char *v = archive_value(&locked[s], i, logs, nlogs,
						j->pass);
			size_t len = v ? strlen(v) : 0;
			struct kafka_rec *r = &recs[nrecs];

			if (v == NULL || len > ARCHIVE_MAX_BYTES) {
				const char *hs = db_rows_get(
					&locked[s], i, SQL_TC_HEADERS, NULL);
				json_t *hj = hs != NULL
						     ? json_loads(hs, 0, NULL)
						     : NULL;
				char tk[TRACE_KV_LEN];

				log_error("task too large for the archive "
					  "topic: kept",
					  "id=%s%s bytes=%zu", id,
					  trace_kv(tk, sizeof(tk), hj), len);
				json_decref(hj);
				free(v);
				j->kept++;
				continue;
			}
			vals[nrecs] = v;
			r->key = id;
			r->keylen = strlen(id);
			r->value = v;
			r->valuelen = len;
			r->hdrs = rd_kafka_headers_new(3);
			rd_kafka_header_add(r->hdrs, KHDR_ID, -1, id, -1);
			rd_kafka_header_add(
				r->hdrs, "prophet-status", -1,
				db_rows_get(&locked[s], i, SQL_TC_STATUS, NULL),
				-1);
			kafka_header_add_int(
				r->hdrs, "prophet-updated-at",
				db_rows_int(&locked[s], i, SQL_TC_UPDATED_AT));
			*del = xrealloc(*del, (*ndel + 1) * sizeof(**del));
			(*del)[(*ndel)++] = xstrdup(id);
			nrecs++;
		}
	if (nrecs > 0 &&
	    kafka_txn_send(p->conn->txn, p->archive_topic, recs, nrecs,
			   KAFKA_TIMEOUT_MS, &fatal, err, sizeof(err)) < 0) {
		snprintf(j->why, sizeof(j->why), "archive: %.200s", err);
		if (fatal) {
			kafka_txn_destroy(p->conn->txn);
			p->conn->txn = NULL;
		}
		goto out;
	}
	np = p->conn->noffsets;
	for (size_t i = 0; i < nrecs; i++)
		if (recs[i].partition >= np)
			np = recs[i].partition + 1;
	*newoff = xcalloc((size_t)np + 1, sizeof(**newoff));
	*nnew = np;
	for (int i = 0; i < np; i++)
		(*newoff)[i] = i < p->conn->noffsets ? p->conn->offsets[i] : -1;
	for (size_t i = 0; i < nrecs; i++)
		if (recs[i].offset + 1 > (*newoff)[recs[i].partition])
			(*newoff)[recs[i].partition] = recs[i].offset + 1;
	*sent = (long long)nrecs;
	rc = 0;
out:
	for (size_t i = 0; i < nrecs; i++)
		free(vals[i]);
	for (size_t i = 0; i < nall; i++)
		if (recs[i].hdrs != NULL)
			rd_kafka_headers_destroy(recs[i].hdrs);
	xfree(vals);
	xfree(recs);
	strs_free(all, nall);
	rows_free_all(logs, nlogs);
	return rc;
}

/* The jobs ------------------------------------------------------------ */

/* Takes the fence: a new epoch for this holder. */
static int
acquire_run(struct db_conn *c, struct prune_job *j)
{
	struct db_params p;
	long long epoch;
	int rc;

	if (db_simple(c, SQL_PRUNE_STATE_INIT) < 0 || db_begin(c) < 0)
		return -1;
	db_params_init(&p, 2);
	db_params_str(&p, j->p->id);
	db_params_int(&p, clock_now_ms());
	rc = db_exec(c, SQL_PRUNE_FENCE_RAISE, &p, NULL);
	db_params_free(&p);
	if (rc == 0)
		rc = db_query_int(c, SQL_PRUNE_FENCE, NULL, 0, &epoch);
	if (rc == 0) {
		j->epoch = epoch;
		rc = db_commit(c);
	}
	if (rc < 0)
		db_rollback(c);
	return rc;
}

/* Counts of a status last changed in [from, to) (index only); *min the
 * oldest change. */
static int
count_range(struct db_conn *c, const char *status, int64_t from, int64_t to,
	    long long *n, int64_t *min)
{
	struct db_params p;
	struct db_rows rows;
	int rc;

	db_params_init(&p, 3);
	db_params_str(&p, status);
	db_params_int(&p, from);
	db_params_int(&p, to);
	rc = db_query(c, SQL_PRUNE_COUNT, &p, &rows);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	*n = rows.nrows ? db_rows_int(&rows, 0, 0) : 0;
	if (min != NULL)
		*min = rows.nrows ? db_int_or(&rows, 0, 1, -1) : -1;
	db_rows_free(&rows);
	return 0;
}

/* Resumes an unfinished pass, starts one when due or asked for, or does
 * nothing; the caller's fence decides whether it may. */
static int
begin_run(struct db_conn *c, struct prune_job *j)
{
	struct pruner *p = j->p;
	struct db_rows st;
	struct db_params prm;
	int64_t now = clock_now_ms(), cutoff = 0, log_cutoff = 0, logret;
	long long eligible = 0;
	int r;

	logret =
		p->log_retention_ms > 0 ? p->log_retention_ms : p->retention_ms;
	if (p->retention_ms > 0)
		cutoff = now - p->retention_ms;
	if (logret > 0)
		log_cutoff = now - logret;
	/* Counted before the transaction: it may take a while, and the
	 * row lock is what every prune transaction waits for. */
	for (int i = 0; i < NFINALS && cutoff > 0; i++) {
		long long n;

		if (count_range(c, finals[i], INT64_MIN, cutoff, &n, NULL) < 0)
			return -1;
		eligible += n;
	}
	if ((r = begin_fenced(c, j)) <= 0)
		return r;
	if (db_query(c, SQL_PRUNE_STATE_GET, NULL, &st) < 0)
		goto fail;
	if (st.nrows == 0) {
		db_rows_free(&st);
		goto fail;
	}
	j->requested_at = db_rows_int(&st, 0, SQL_PS_REQUESTED_AT);
	j->log_seq = db_rows_int(&st, 0, SQL_PS_LOG_SEQ);
	db_params_init(&prm, 5);
	if (db_rows_get(&st, 0, SQL_PS_STARTED_AT, NULL) != NULL &&
	    db_rows_get(&st, 0, SQL_PS_FINISHED_AT, NULL) == NULL) {
		j->action = 2;
		j->pass = db_rows_int(&st, 0, SQL_PS_PASS);
		j->cutoff = db_rows_int(&st, 0, SQL_PS_CUTOFF);
		j->log_cutoff = db_rows_int(&st, 0, SQL_PS_LOG_CUTOFF);
		j->eligible = db_rows_int(&st, 0, SQL_PS_ELIGIBLE);
		db_params_int(&prm, now);
		r = db_exec(c, SQL_PRUNE_PASS_RESUME, &prm, NULL);
	} else if (j->due || j->requested_at > j->requested_seen) {
		j->action = 1;
		j->pass = db_rows_int(&st, 0, SQL_PS_PASS) + 1;
		j->cutoff = cutoff;
		j->log_cutoff = log_cutoff;
		j->eligible = eligible;
		db_params_int(&prm, now);
		db_params_int(&prm, cutoff);
		db_params_int(&prm, log_cutoff);
		db_params_int(&prm, eligible);
		db_params_int(&prm, now);
		r = db_exec(c, SQL_PRUNE_PASS_NEW, &prm, NULL);
	}
	db_params_free(&prm);
	db_rows_free(&st);
	if (r < 0)
		goto fail;
	return db_commit(c);
fail:
	db_rollback(c);
	return -1;
}

/* One chunk of the finished tasks of a status: candidates by the index,
 * then locked and re-checked, archived, deleted with their log rows. */
static int
chunk_run(struct db_conn *c, struct prune_job *j)
{
	struct pruner *p = j->p;
	struct lead lead = {finals[j->phase], j->cutoff, 1};
	struct db_rows cand, *locked = NULL;
	struct db_params prm;
	size_t nlocked = 0, nids = 0, ndel = 0;
	char **ids = NULL, **del = NULL, *text = NULL, err[512];
	int64_t *newoff = NULL;
	int nnew = 0, rc = -1, r;
	long long by[NFINALS] = {0}, sent = 0;
	unsigned long long at = 0, al = 0;

	if (p->archive_topic != NULL) {
		if (txn_ready(p, err, sizeof(err)) < 0) {
			snprintf(j->why, sizeof(j->why),
				 "archive producer: %.200s", err);
			return -1;
		}
		if (p->conn->recover && (archive_recover(c, j) < 0 ||
					 j->fenced || p->conn->recover))
			return j->fenced ? 0 : -1;
	}
	db_params_init(&prm, 6);
	db_params_str(&prm, finals[j->phase]);
	db_params_int(&prm, j->cutoff);
	db_params_int(&prm, j->after_at);
	db_params_int(&prm, j->after_at);
	db_params_str(&prm, j->after_id);
	db_params_int(&prm, p->chunk);
	r = db_query(c, SQL_PRUNE_CANDIDATES, &prm, &cand);
	db_params_free(&prm);
	if (r < 0)
		return -1;
	if (cand.nrows < (size_t)p->chunk)
		j->done = 1;
	if (cand.nrows == 0) {
		db_rows_free(&cand);
		return 0;
	}
	ids = xcalloc(cand.nrows, sizeof(*ids));
	for (size_t i = 0; i < cand.nrows; i++)
		ids[nids++] = xstrdup(db_rows_get(&cand, i, 0, NULL));
	j->after_at = db_rows_int(&cand, cand.nrows - 1, 1);
	snprintf(j->after_id, sizeof(j->after_id), "%s", ids[nids - 1]);
	db_rows_free(&cand);
	/* The archive's Kafka transaction runs inside the DB one: the
	 * connection may sit idle in it for as long as that send may take. */
	if (p->archive_topic != NULL)
		db_idle_txn_timeout(c, KAFKA_TIMEOUT_MS / 1000 + 10);
	if ((r = begin_fenced(c, j)) <= 0) {
		rc = r;
		goto out;
	}
	if (in_run(c,
		   p->archive_topic ? SQL_PRUNE_LOCK_ROWS : SQL_PRUNE_LOCK_IDS,
		   SQL_PRUNE_LOCK_SUFFIX, ids, nids, &lead, &locked, &nlocked,
		   NULL) < 0)
		goto fail;
	if (p->archive_topic != NULL) {
		if (archive_send(c, j, locked, nlocked, &del, &ndel, &newoff,
				 &nnew, &sent) < 0)
			goto fail;
		CRASHPOINT("prune_after_archive_before_delete");
	} else {
		for (size_t s = 0; s < nlocked; s++)
			for (size_t i = 0; i < locked[s].nrows; i++) {
				del = xrealloc(del, (ndel + 1) * sizeof(*del));
				del[ndel++] = xstrdup(
					db_rows_get(&locked[s], i, 0, NULL));
			}
	}
	if (ndel > 0 && delete_tasks(c, del, ndel, &at, &al) < 0)
		goto fail;
	by[j->phase] = (long long)at;
	if (newoff != NULL)
		text = offsets_text(newoff, nnew);
	if (progress(c, by, (long long)al, sent, text, 0) < 0 ||
	    db_commit(c) < 0)
		goto fail;
	if (newoff != NULL) {
		xfree(p->conn->offsets);
		p->conn->offsets = newoff;
		p->conn->noffsets = nnew;
		newoff = NULL;
	}
	j->deleted += (long long)at;
	j->logs += (long long)al;
	j->archived += sent;
	rc = 0;
	goto out;
fail:
	/* Archived, maybe not deleted: the archive is read back first. */
	if (sent > 0)
		p->conn->recover = 1;
	db_rollback(c);
out:
	if (p->archive_topic != NULL)
		db_idle_txn_timeout(c, -1);
	rows_free_all(locked, nlocked);
	strs_free(ids, nids);
	strs_free(del, ndel);
	xfree(newoff);
	free(text);
	return rc;
}

/* One chunk of task.log_retention: old rows of recurring series and of
 * tasks already gone, oldest first from the cursor; it stops at the
 * first young row (the present). */
static int
logs_run(struct db_conn *c, struct prune_job *j)
{
	struct pruner *p = j->p;
	struct lead lead = {NULL, j->log_cutoff, 1};
	struct db_params prm;
	struct db_rows rows;
	char **seqs = NULL;
	size_t nseqs = 0;
	long long by[NFINALS] = {0};
	unsigned long long al = 0;
	int64_t cursor = j->log_seq;
	int r, rc = -1;

	db_params_init(&prm, 2);
	db_params_int(&prm, j->log_seq);
	db_params_int(&prm, p->chunk);
	r = db_query(c, SQL_PRUNE_LOG_HEAD, &prm, &rows);
	db_params_free(&prm);
	if (r < 0)
		return -1;
	if (rows.nrows < (size_t)p->chunk)
		j->done = 1;
	for (size_t i = 0; i < rows.nrows; i++) {
		int64_t seq = db_rows_int(&rows, i, 0);

		if (db_rows_int(&rows, i, 1) >= j->log_cutoff) {
			j->done = 1;
			break;
		}
		cursor = seq;
		if (db_rows_int(&rows, i, 2) == 0)
			continue; /* a one-shot task's: pruned with it */
		seqs = xrealloc(seqs, (nseqs + 1) * sizeof(*seqs));
		seqs[nseqs++] = xasprintf("%lld", (long long)seq);
	}
	db_rows_free(&rows);
	j->log_seq = cursor;
	if ((r = begin_fenced(c, j)) <= 0) {
		rc = r;
		goto out;
	}
	if (nseqs > 0 && in_run(c, SQL_PRUNE_LOG_DELETE, ")", seqs, nseqs,
				&lead, NULL, NULL, &al) < 0)
		goto fail;
	if (progress(c, by, (long long)al, 0, NULL, cursor) < 0 ||
	    db_commit(c) < 0)
		goto fail;
	j->logs = (long long)al;
	rc = 0;
	goto out;
fail:
	db_rollback(c);
out:
	strs_free(seqs, nseqs);
	return rc;
}

static json_t *
pass_json(const struct db_rows *st, int64_t finished)
{
	json_t *o = json_object(), *d = json_object();
	int64_t started = db_int_or(st, 0, SQL_PS_STARTED_AT, 0);
	long long total = 0;

	json_object_set_new(o, "pass",
			    json_integer(db_rows_int(st, 0, SQL_PS_PASS)));
	json_object_set_new(
		o, "holder",
		utf8_json_str(db_rows_get(st, 0, SQL_PS_HOLDER, NULL) ?: ""));
	json_object_set_new(o, "started_at", json_integer(started));
	json_object_set_new(o, "finished_at",
			    finished ? json_integer(finished) : json_null());
	json_object_set_new(
		o, "duration_ms",
		json_integer((finished ? finished : clock_now_ms()) - started));
	json_object_set_new(o, "cutoff",
			    json_integer(db_rows_int(st, 0, SQL_PS_CUTOFF)));
	json_object_set_new(
		o, "log_cutoff",
		json_integer(db_rows_int(st, 0, SQL_PS_LOG_CUTOFF)));
	json_object_set_new(o, "eligible",
			    json_integer(db_rows_int(st, 0, SQL_PS_ELIGIBLE)));
	for (int i = 0; i < NFINALS; i++) {
		long long n = db_rows_int(st, 0, SQL_PS_DELETED_DELIVERED + i);

		json_object_set_new(d, finals[i], json_integer(n));
		total += n;
	}
	json_object_set_new(o, "deleted", d);
	json_object_set_new(o, "tasks_deleted", json_integer(total));
	json_object_set_new(
		o, "log_rows_deleted",
		json_integer(db_rows_int(st, 0, SQL_PS_DELETED_LOGS)));
	json_object_set_new(o, "archived",
			    json_integer(db_rows_int(st, 0, SQL_PS_ARCHIVED)));
	json_object_set_new(o, "chunks",
			    json_integer(db_rows_int(st, 0, SQL_PS_CHUNKS)));
	json_object_set_new(o, "resumed",
			    json_integer(db_rows_int(st, 0, SQL_PS_RESUMED)));
	return o;
}

/* Ends the pass: its summary becomes the last pass; the oldest finished
 * task that is left is measured. */
static int
end_run(struct db_conn *c, struct prune_job *j)
{
	struct db_rows st, rows;
	struct db_params prm;
	int64_t now = clock_now_ms();
	json_t *o;
	char *text;
	int r;

	j->oldest_at = -1;
	for (int i = 0; i < NFINALS; i++) {
		db_params_init(&prm, 1);
		db_params_str(&prm, finals[i]);
		r = db_query(c, SQL_PRUNE_OLDEST, &prm, &rows);
		db_params_free(&prm);
		if (r < 0)
			return -1;
		if (rows.nrows && db_rows_get(&rows, 0, 0, NULL) != NULL &&
		    (j->oldest_at < 0 ||
		     db_rows_int(&rows, 0, 0) < j->oldest_at))
			j->oldest_at = db_rows_int(&rows, 0, 0);
		db_rows_free(&rows);
	}
	if ((r = begin_fenced(c, j)) <= 0)
		return r;
	if (db_query(c, SQL_PRUNE_STATE_GET, NULL, &st) < 0 || st.nrows == 0) {
		db_rollback(c);
		return -1;
	}
	o = pass_json(&st, now);
	json_object_set_new(o, "oldest_finished_at",
			    j->oldest_at >= 0 ? json_integer(j->oldest_at)
					      : json_null());
	j->deleted = json_integer_value(json_object_get(o, "tasks_deleted"));
	j->logs = json_integer_value(json_object_get(o, "log_rows_deleted"));
	j->archived = json_integer_value(json_object_get(o, "archived"));
	j->eligible = json_integer_value(json_object_get(o, "eligible"));
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	db_rows_free(&st);
	db_params_init(&prm, 3);
	db_params_int(&prm, now);
	db_params_str(&prm, text);
	db_params_int(&prm, now);
	r = db_exec(c, SQL_PRUNE_PASS_END, &prm, NULL);
	db_params_free(&prm);
	free(text);
	if (r < 0 || db_commit(c) < 0) {
		db_rollback(c);
		return -1;
	}
	return 0;
}

static int
job_run(struct db_conn *c, struct db_job *job)
{
	struct prune_job *j = (struct prune_job *)job;
	struct pruner *p = j->p;

	if (j->drop_txn && p->conn->txn != NULL) {
		kafka_txn_destroy(p->conn->txn);
		p->conn->txn = NULL;
	}
	switch (j->kind) {
	case J_ACQUIRE: return acquire_run(c, j);
	case J_BEGIN: return begin_run(c, j);
	case J_CHUNK: return chunk_run(c, j);
	case J_LOGS: return logs_run(c, j);
	case J_END: return end_run(c, j);
	default: return -1;
	}
}

/* On the loop --------------------------------------------------------- */

static void job_done_cb(struct db_job *job, int status, const char *err);

static struct prune_job *
job_new(struct pruner *p, enum job_kind kind)
{
	struct prune_job *j = xcalloc(1, sizeof(*j));

	j->p = p;
	j->kind = kind;
	j->epoch = p->epoch;
	j->drop_txn = p->drop_txn;
	p->drop_txn = 0;
	j->pass = p->pass;
	j->cutoff = p->cutoff;
	j->log_cutoff = p->log_cutoff;
	j->phase = p->phase;
	j->after_at = p->after_at;
	j->log_seq = p->log_seq;
	snprintf(j->after_id, sizeof(j->after_id), "%s", p->after_id);
	j->job.run = job_run;
	j->job.done_cb = job_done_cb;
	return j;
}

static void
submit(struct pruner *p, struct prune_job *j)
{
	p->busy = 1;
	db_pool_submit(p->db, &j->job);
}

/* As a worker fences itself: no transaction starts unless ZooKeeper
 * showed the node ours within 2/3 of the session timeout (a manager
 * waking from a pause learns of its expiry only after its timers ran). */
static int
fresh(const struct pruner *p)
{
	return clock_mono_ms() - p->zk_ok_mono < p->session_ms * 2 / 3;
}

static int
may_work(const struct pruner *p)
{
	return !p->stopping && p->held && p->connected && fresh(p);
}

/* The lock is gone (session expired, or another holder's epoch): stop;
 * the pass stays in the DB for whoever holds the lock next. */
static void
lost(struct pruner *p, const char *why)
{
	if (!p->held)
		return;
	log_warn("pruner lock lost: pruning stopped", "reason=\"%s\"", why);
	p->held = 0;
	p->epoch = 0;
	p->in_pass = 0;
	p->drop_txn = 1;
	metric_set(p->mg->m.pruner, 0);
}

static void
step_cb(evutil_socket_t fd, short what, void *arg)
{
	step(arg);
}

static void
step_later(struct pruner *p, int ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

	evtimer_add(p->step_ev, &tv);
}

static void
next_phase(struct pruner *p)
{
	p->phase++;
	p->after_at = INT64_MIN;
	p->after_id[0] = '\0';
}

/* The next job of the pass in hand. */
static void
step(struct pruner *p)
{
	if (p->busy || !p->in_pass || !may_work(p) ||
	    evtimer_pending(p->step_ev, NULL))
		return;
	while (p->phase < PH_LOGS && p->cutoff <= 0)
		next_phase(p);
	if (p->phase == PH_LOGS && p->log_cutoff <= 0)
		next_phase(p);
	if (p->phase < PH_LOGS)
		submit(p, job_new(p, J_CHUNK));
	else if (p->phase == PH_LOGS)
		submit(p, job_new(p, J_LOGS));
	else
		submit(p, job_new(p, J_END));
}

static void
pass_done(struct pruner *p, const struct prune_job *j)
{
	double secs = (double)(clock_mono_ms() - p->pass_mono) / 1000.0;

	p->in_pass = 0;
	p->next_pass_mono = clock_mono_ms() + p->interval_ms;
	metric_inc(p->mg->m.prune_passes);
	metric_set(p->mg->m.prune_pass_seconds, secs);
	metric_set(p->mg->m.prune_oldest,
		   j->oldest_at >= 0
			   ? (double)(clock_now_ms() - j->oldest_at) / 1000.0
			   : 0);
	/* Passes that find nothing are the rule on a quiet cluster. */
	log_write(j->deleted + j->logs > 0 ? PLOG_INFO : PLOG_DEBUG,
		  "prune pass done",
		  "pass=%lld tasks=%lld log_rows=%lld archived=%lld "
		  "eligible=%lld duration_ms=%.0f",
		  (long long)p->pass, j->deleted, j->logs, j->archived,
		  j->eligible, secs * 1000);
}

static void
job_done_cb(struct db_job *job, int status, const char *err)
{
	struct prune_job *j = (struct prune_job *)job;
	struct pruner *p = j->p;
	struct manager *mg = p->mg;

	p->busy = 0;
	if (j->deleted > 0)
		metric_add(mg->m.pruned_tasks, (double)j->deleted);
	if (j->logs > 0)
		metric_add(mg->m.pruned_logs, (double)j->logs);
	if (j->archived > 0)
		metric_add(mg->m.archived, (double)j->archived);
	if (status == 0)
		p->err_logged_mono = 0;
	if (status < 0) {
		metric_inc(mg->m.prune_errors);
		/* A dependency that stays down: a line a minute. */
		if (clock_mono_ms() - p->err_logged_mono >= 60000) {
			p->err_logged_mono = clock_mono_ms();
			log_warn("prune step failed; retrying",
				 "step=%d error=\"%s\"", j->kind,
				 j->why[0] ? j->why : err);
		}
		if (j->kind == J_ACQUIRE || j->kind == J_BEGIN)
			p->in_pass = 0;
		else
			step_later(p, PRUNE_RETRY_MS);
		xfree(j);
		return;
	}
	if (j->fenced) {
		/* Another manager raised the fence: it holds the lock, so
		 * ours is stale (an expiry we have not heard of yet). */
		lost(p, "fenced by a newer holder");
		xfree(j);
		return;
	}
	switch (j->kind) {
	case J_ACQUIRE:
		if (p->held) {
			p->epoch = j->epoch;
			log_info("pruner lock taken", "epoch=%lld id=%s",
				 (long long)p->epoch, p->id);
			metric_set(mg->m.pruner, 1);
		}
		break;
	case J_BEGIN:
		/* A request is answered by a new pass (a resumed one began
		 * before it). */
		if (j->action == 1 && j->requested_at > p->requested_seen)
			p->requested_seen = j->requested_at;
		if (j->action == 0 || !p->held)
			break;
		p->in_pass = 1;
		p->pass = j->pass;
		p->cutoff = j->cutoff;
		p->log_cutoff = j->log_cutoff;
		p->phase = PH_TASKS_FIRST;
		p->after_at = INT64_MIN;
		p->after_id[0] = '\0';
		p->log_seq = j->log_seq;
		p->pass_mono = clock_mono_ms();
		metric_set(mg->m.prune_eligible, (double)j->eligible);
		log_write(j->action == 2 || j->eligible > 0 ? PLOG_INFO
							    : PLOG_DEBUG,
			  j->action == 2 ? "prune pass resumed"
					 : "prune pass started",
			  "pass=%lld eligible=%lld cutoff=%lld log_cutoff=%lld",
			  (long long)j->pass, (long long)j->eligible,
			  (long long)j->cutoff, (long long)j->log_cutoff);
		break;
	case J_CHUNK:
	case J_LOGS:
		p->after_at = j->after_at;
		snprintf(p->after_id, sizeof(p->after_id), "%s", j->after_id);
		p->log_seq = j->log_seq;
		if (j->done)
			next_phase(p);
		if (j->deleted + j->logs > 0 && p->pause_ms > 0) {
			step_later(p, p->pause_ms);
			xfree(j);
			return;
		}
		break;
	case J_END: pass_done(p, j); break;
	default: break;
	}
	/* Nothing to do: the tick asks again in a second. */
	if (j->kind == J_BEGIN && j->action == 0) {
		xfree(j);
		return;
	}
	xfree(j);
	kick(p);
}

/* What comes next, whenever something changed. */
static void
kick(struct pruner *p)
{
	if (p->busy || !may_work(p))
		return;
	if (p->epoch == 0) {
		submit(p, job_new(p, J_ACQUIRE));
		return;
	}
	if (p->in_pass) {
		step(p);
		return;
	}
	{
		struct prune_job *j = job_new(p, J_BEGIN);

		j->due = clock_mono_ms() >= p->next_pass_mono;
		j->requested_seen = p->requested_seen;
		submit(p, j);
	}
}

/* The ZooKeeper lock --------------------------------------------------- */

static void acquire(struct pruner *p);

static void
got_lock(struct pruner *p)
{
	p->zk_ok_mono = clock_mono_ms();
	p->held = 1;
	p->waiting = 0;
	p->epoch = 0;
	p->in_pass = 0;
	kick(p);
}

/* The holder prunes with its own retention: a manager with others would
 * show dry runs and settings that no pass follows. */
static void
warn_other_retention(const struct pruner *p, const char *data, int len)
{
	json_t *j =
		data && len > 0 ? json_loadb(data, (size_t)len, 0, NULL) : NULL;
	const json_t *r = json_object_get(j, "retention_ms");
	const json_t *lr = json_object_get(j, "log_retention_ms");

	if (json_is_integer(r) && json_is_integer(lr) &&
	    (json_integer_value(r) != p->retention_ms ||
	     json_integer_value(lr) != p->log_retention_ms))
		log_warn(
			"pruner lock held by a manager with another "
			"task.retention or task.log_retention: the holder's "
			"are used; give every manager the same",
			"holder_retention_ms=%lld holder_log_retention_ms=%lld "
			"retention_ms=%lld log_retention_ms=%lld",
			(long long)json_integer_value(r),
			(long long)json_integer_value(lr),
			(long long)p->retention_ms,
			(long long)p->log_retention_ms);
	json_decref(j);
}

static void
get_cb(struct zk *z, int rc, const char *data, int len, const struct Stat *st,
       void *arg)
{
	struct pruner *p = arg;

	p->acquiring = 0;
	if (rc == ZOK && st != NULL && st->ephemeralOwner == zk_session_id(z)) {
		/* Our create went through; its answer was lost. */
		got_lock(p);
	} else if (rc == ZOK) {
		if (!p->waiting) {
			log_info("pruner lock held by another manager",
				 "holder=%.*s", len > 0 ? len : 0,
				 data ? data : "");
			warn_other_retention(p, data, len);
		}
		p->waiting = 1;
	} else if (rc == ZNONODE) {
		acquire(p);
	}
}

static void
create_cb(struct zk *z, int rc, const char *value, void *arg)
{
	struct pruner *p = arg;

	p->acquiring = 0;
	if (rc == ZOK) {
		got_lock(p);
	} else if (rc == ZNODEEXISTS || rc == ZCONNECTIONLOSS ||
		   rc == ZOPERATIONTIMEOUT) {
		/* Whose is it? (After a lost answer it may be ours.) The get
		 * arms a watch: its deletion wakes us. */
		p->acquiring = 1;
		if (zk_aget(p->mg->zk, p->path, 1, get_cb, p) < 0)
			p->acquiring = 0;
	}
}

static char *
holder_json(const struct pruner *p)
{
	json_t *j = json_object();
	char *s;

	json_object_set_new(j, "id", utf8_json_str(p->id));
	json_object_set_new(
		j, "listen",
		utf8_json_str(cfg_str(p->mg->cfg, CFG_HTTP_LISTEN)));
	json_object_set_new(j, "pid", json_integer(getpid()));
	json_object_set_new(j, "since", json_integer(clock_now_ms()));
	json_object_set_new(j, "retention_ms", json_integer(p->retention_ms));
	json_object_set_new(j, "log_retention_ms",
			    json_integer(p->log_retention_ms));
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (s == NULL)
		abort();
	return s;
}

static void
acquire(struct pruner *p)
{
	char *data;

	if (p->held || p->acquiring || !p->connected || p->stopping)
		return;
	data = holder_json(p);
	p->acquiring = 1;
	if (zk_acreate(p->mg->zk, p->path, data, ZOO_EPHEMERAL, create_cb, p) <
	    0)
		p->acquiring = 0;
	free(data);
}

/* The holder's probe (and the check after a reconnect): the node is
 * still there and ours. */
static void
verify_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct pruner *p = arg;

	if (!p->held)
		return;
	if (rc == ZOK && st != NULL && st->ephemeralOwner == zk_session_id(z)) {
		int was = fresh(p);

		p->zk_ok_mono = clock_mono_ms();
		if (!was)
			kick(p);
		return;
	}
	if (rc == ZOK || rc == ZNONODE) {
		lost(p, "the lock node is not ours");
		acquire(p);
	}
}

static void
probe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pruner *p = arg;

	if (p->held && p->connected && !p->stopping)
		zk_aexists(p->mg->zk, p->path, 0, verify_cb, p);
}

void
prune_zk_event(struct manager *mg, int type, int state, const char *path)
{
	struct pruner *p = the_pruner;

	if (p == NULL || mg->prune == NULL)
		return;
	if (type == ZOO_SESSION_EVENT) {
		if (state == ZOO_CONNECTED_STATE) {
			p->connected = 1;
			p->waiting = 0;
			if (p->held)
				zk_aexists(mg->zk, p->path, 0, verify_cb, p);
			else
				acquire(p);
			kick(p);
		} else if (state == ZOO_EXPIRED_SESSION_STATE ||
			   state == ZOO_AUTH_FAILED_STATE) {
			p->connected = 0;
			p->acquiring = 0;
			p->waiting = 0;
			lost(p, "zookeeper session expired");
		} else {
			/* Not connected: no transaction starts until the
			 * session is back (the one under way is fenced by the
			 * epoch anyway). */
			p->connected = 0;
		}
		return;
	}
	if (path != NULL && !strcmp(path, p->path) && !p->held) {
		p->waiting = 0;
		acquire(p);
	}
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pruner *p = arg;

	if (!p->held && !p->waiting && !p->acquiring)
		acquire(p);
	kick(p);
}

/* Create and destroy -------------------------------------------------- */

struct pruner *
prune_create(struct manager *mg)
{
	const struct cfg *cfg = mg->cfg;
	struct pruner *p;
	struct timeval tick, probe;
	char host[256];
	const char *topic = cfg_str(cfg, CFG_TASK_ARCHIVE_TOPIC);

	metric_set(mg->m.prune_retention,
		   (double)cfg_int(cfg, CFG_TASK_RETENTION) / 1000.0);
	if (cfg_int(cfg, CFG_TASK_RETENTION) == 0 &&
	    cfg_int(cfg, CFG_TASK_LOG_RETENTION) == 0) {
		log_info("retention off: nothing is pruned",
			 "task.retention=0 task.log_retention=0");
		return NULL;
	}
	p = xcalloc(1, sizeof(*p));
	p->conn = xcalloc(1, sizeof(*p->conn));
	p->mg = mg;
	p->retention_ms = cfg_int(cfg, CFG_TASK_RETENTION);
	p->log_retention_ms = cfg_int(cfg, CFG_TASK_LOG_RETENTION);
	p->interval_ms = cfg_int(cfg, CFG_TASK_PRUNE_INTERVAL);
	p->chunk = (int)cfg_int(cfg, CFG_TASK_PRUNE_CHUNK);
	p->pause_ms = (int)cfg_int(cfg, CFG_TASK_PRUNE_PAUSE_MS);
	if (topic[0] != '\0')
		p->archive_topic = xasprintf(
			"%s%s", cfg_str(cfg, CFG_KAFKA_TOPIC_PREFIX), topic);
	snprintf(p->txn_id, sizeof(p->txn_id), "prophet-pruner:%s",
		 cfg_str(cfg, CFG_CLUSTER_ROOT));
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	snprintf(p->id, sizeof(p->id), "%.150s-%d", host, (int)getpid());
	zpath(p->path, sizeof(p->path), cfg_str(cfg, CFG_CLUSTER_ROOT),
	      ZPATH_PRUNER);
	p->after_at = INT64_MIN;
	p->db = db_pool_create(mg->base, mg->dsn, 1, "prune");
	p->step_ev = evtimer_new(mg->base, step_cb, p);
	/* A pass starts at a tick: at most the interval apart. */
	tick.tv_sec = (p->interval_ms < PRUNE_TICK_MS ? p->interval_ms
						      : PRUNE_TICK_MS) /
		      1000;
	tick.tv_usec = (p->interval_ms < PRUNE_TICK_MS ? p->interval_ms
						       : PRUNE_TICK_MS) %
		       1000 * 1000;
	p->tick_ev = event_new(mg->base, -1, EV_PERSIST, tick_cb, p);
	event_add(p->tick_ev, &tick);
	p->session_ms = cfg_int(cfg, CFG_ZK_SESSION_TIMEOUT_MS);
	probe.tv_sec = p->session_ms / 6 / 1000;
	probe.tv_usec = p->session_ms / 6 % 1000 * 1000;
	p->probe_ev = event_new(mg->base, -1, EV_PERSIST, probe_cb, p);
	event_add(p->probe_ev, &probe);
	p->connected = zk_is_connected(mg->zk);
	the_pruner = p;
	log_info("pruner ready",
		 "retention_ms=%lld log_retention_ms=%lld interval_ms=%lld "
		 "chunk=%d pause_ms=%d archive_topic=%s lock=%s",
		 (long long)p->retention_ms, (long long)p->log_retention_ms,
		 (long long)p->interval_ms, p->chunk, p->pause_ms,
		 p->archive_topic ? p->archive_topic : "-", p->path);
	acquire(p);
	return p;
}

/* SIGTERM: no further transaction; the one under way completes in
 * prune_destroy. The lock goes with the session. */
void
prune_stop(struct pruner *p)
{
	if (p == NULL)
		return;
	p->stopping = 1;
	evtimer_del(p->step_ev);
}

void
prune_destroy(struct pruner *p)
{
	if (p == NULL)
		return;
	p->stopping = 1;
	db_pool_destroy(p->db);
	event_free(p->tick_ev);
	event_free(p->probe_ev);
	event_free(p->step_ev);
	kafka_txn_destroy(p->conn->txn);
	xfree(p->conn->offsets);
	xfree(p->conn);
	xfree(p->archive_topic);
	if (the_pruner == p)
		the_pruner = NULL;
	xfree(p);
}

/* The API: GET and POST /v1/admin/prune --------------------------------- */

static int64_t
effective_log_retention(const struct cfg *cfg)
{
	return cfg_int(cfg, CFG_TASK_LOG_RETENTION) > 0
		       ? cfg_int(cfg, CFG_TASK_LOG_RETENTION)
		       : cfg_int(cfg, CFG_TASK_RETENTION);
}

struct api_job {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	enum job_kind kind;
	int64_t now;
	struct db_rows st;
	json_t *out;
};

/* What a pass started now would delete, per status and age (index-only
 * counts), and what a retrying callback keeps. */
static int
dry_run(struct db_conn *c, struct api_job *a)
{
	static const int64_t edges[] = {3600000LL, 86400000LL, 604800000LL,
					2592000000LL};
	int64_t ret = cfg_int(a->mg->cfg, CFG_TASK_RETENTION);
	int64_t cutoff = a->now - ret;
	json_t *statuses = json_array();
	long long total = 0;

	for (int i = 0; i < NFINALS; i++) {
		json_t *ages = json_array(), *o;
		long long n, held = 0, sum = 0;
		int64_t lo = ret, oldest = -1, min;
		struct db_params p;
		int rc;

		for (size_t k = 0; k <= sizeof(edges) / sizeof(edges[0]); k++) {
			int64_t hi = k < sizeof(edges) / sizeof(edges[0])
					     ? edges[k]
					     : INT64_MAX;

			if (hi <= lo)
				continue;
			/* Age in [lo, hi): last change in [now - hi,
			 * now - lo), as the pruner's cutoff counts. */
			if (count_range(c, finals[i],
					hi == INT64_MAX ? INT64_MIN
							: a->now - hi,
					a->now - lo, &n, &min) < 0) {
				json_decref(ages);
				json_decref(statuses);
				return -1;
			}
			if (min >= 0 && (oldest < 0 || min < oldest))
				oldest = min;
			json_array_append_new(
				ages,
				json_pack("{s:I, s:o, s:I}", "from_s",
					  (json_int_t)(lo / 1000), "to_s",
					  hi == INT64_MAX
						  ? json_null()
						  : json_integer(hi / 1000),
					  "count", (json_int_t)n));
			sum += n;
			lo = hi;
		}
		db_params_init(&p, 2);
		db_params_str(&p, finals[i]);
		db_params_int(&p, cutoff);
		rc = db_query_int(c, SQL_PRUNE_HELD, &p, 0, &held);
		db_params_free(&p);
		if (rc < 0) {
			json_decref(ages);
			json_decref(statuses);
			return -1;
		}
		o = json_pack("{s:s, s:I, s:I, s:o, s:o}", "status", finals[i],
			      "eligible", (json_int_t)(sum - held),
			      "kept_by_retrying_callback", (json_int_t)held,
			      "oldest_at",
			      oldest >= 0 ? json_integer(oldest) : json_null(),
			      "ages", ages);
		json_array_append_new(statuses, o);
		total += sum - held;
	}
	a->out = json_pack("{s:b, s:I, s:I, s:I, s:o}", "dry_run", 1,
			   "retention_ms", (json_int_t)ret, "cutoff",
			   (json_int_t)cutoff, "eligible", (json_int_t)total,
			   "statuses", statuses);
	return 0;
}

static int
api_run(struct db_conn *c, struct db_job *job)
{
	struct api_job *a = (struct api_job *)job;
	struct db_params p;
	int rc;

	if (a->kind == J_DRY)
		return dry_run(c, a);
	if (a->kind == J_REQUEST) {
		if (db_simple(c, SQL_PRUNE_STATE_INIT) < 0)
			return -1;
		db_params_init(&p, 2);
		db_params_int(&p, a->now);
		db_params_int(&p, a->now);
		rc = db_exec(c, SQL_PRUNE_REQUEST, &p, NULL);
		db_params_free(&p);
		if (rc < 0)
			return -1;
	}
	return db_query(c, SQL_PRUNE_STATE_GET, NULL, &a->st);
}

static json_t *
state_json(struct api_job *a)
{
	const struct cfg *cfg = a->mg->cfg;
	const struct db_rows *st = &a->st;
	struct pruner *p = the_pruner;
	int running = 0;
	json_t *o, *last = NULL;
	const char *topic = cfg_str(cfg, CFG_TASK_ARCHIVE_TOPIC);

	o = json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:o, s:b}", "retention_ms",
		(json_int_t)cfg_int(cfg, CFG_TASK_RETENTION),
		"log_retention_ms", (json_int_t)effective_log_retention(cfg),
		"interval_ms",
		(json_int_t)cfg_int(cfg, CFG_TASK_PRUNE_INTERVAL), "chunk",
		(json_int_t)cfg_int(cfg, CFG_TASK_PRUNE_CHUNK), "pause_ms",
		(json_int_t)cfg_int(cfg, CFG_TASK_PRUNE_PAUSE_MS),
		"archive_topic", topic[0] ? utf8_json_str(topic) : json_null(),
		"enabled", p != NULL);
	json_object_set_new(o, "this_manager",
			    json_pack("{s:o, s:b}", "id",
				      p ? utf8_json_str(p->id) : json_null(),
				      "holds_lock", p != NULL && may_work(p)));
	if (st->nrows == 0) {
		json_object_set_new(o, "holder", json_null());
		json_object_set_new(o, "requested_at", json_null());
		json_object_set_new(o, "running", json_false());
		json_object_set_new(o, "current", json_null());
		json_object_set_new(o, "last", json_null());
		return o;
	}
	running = db_rows_get(st, 0, SQL_PS_STARTED_AT, NULL) != NULL &&
		  db_rows_get(st, 0, SQL_PS_FINISHED_AT, NULL) == NULL;
	json_object_set_new(
		o, "holder",
		db_rows_get(st, 0, SQL_PS_HOLDER, NULL)
			? utf8_json_str(db_rows_get(st, 0, SQL_PS_HOLDER, NULL))
			: json_null());
	json_object_set_new(
		o, "requested_at",
		db_rows_int(st, 0, SQL_PS_REQUESTED_AT) > 0
			? json_integer(db_rows_int(st, 0, SQL_PS_REQUESTED_AT))
			: json_null());
	json_object_set_new(o, "running", json_boolean(running));
	json_object_set_new(o, "current",
			    running ? pass_json(st, 0) : json_null());
	if (db_rows_get(st, 0, SQL_PS_LAST_PASS, NULL) != NULL)
		last = json_loads(db_rows_get(st, 0, SQL_PS_LAST_PASS, NULL), 0,
				  NULL);
	json_object_set_new(o, "last", last ? last : json_null());
	return o;
}

static void
api_done_cb(struct db_job *job, int status, const char *err)
{
	struct api_job *a = (struct api_job *)job;

	if (status < 0) {
		http_reply_error(a->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
	} else if (a->kind == J_DRY) {
		http_reply_json(a->req, 200, a->out);
		a->out = NULL;
	} else if (a->kind == J_REQUEST) {
		json_t *o = state_json(a);

		json_object_set_new(o, "requested_at", json_integer(a->now));
		http_reply_json(a->req, 202, o);
	} else {
		http_reply_json(a->req, 200, state_json(a));
	}
	json_decref(a->out);
	db_rows_free(&a->st);
	a->mg->inflight--;
	xfree(a);
}

static void
api_submit_job(struct manager *mg, struct evhttp_request *req,
	       enum job_kind kind)
{
	struct api_job *a = xcalloc(1, sizeof(*a));

	a->mg = mg;
	a->req = req;
	a->kind = kind;
	a->now = clock_now_ms();
	a->job.run = api_run;
	a->job.done_cb = api_done_cb;
	mg->inflight++;
	db_pool_submit(mg->db, &a->job);
}

void
prune_get(struct manager *mg, struct evhttp_request *req)
{
	api_submit_job(mg, req, J_GET);
}

void
prune_post(struct manager *mg, struct evhttp_request *req)
{
	static const char *const names[] = {"dry_run", NULL};
	json_t *in, *v;
	int dry = 0;

	if (api_body_object(req, 0, &in) < 0)
		return;
	/* {"dryrun":true} would prune now. */
	if (!api_fields_known(req, in, names)) {
		json_decref(in);
		return;
	}
	v = json_object_get(in, "dry_run");
	if (v != NULL && !json_is_boolean(v)) {
		json_decref(in);
		http_reply_error(req, 400, "invalid_type", "dry_run",
				 "dry_run must be true or false");
		return;
	}
	dry = json_is_true(v);
	json_decref(in);
	if (dry && cfg_int(mg->cfg, CFG_TASK_RETENTION) == 0) {
		http_reply_error(req, 409, "conflict", "dry_run",
				 "task.retention is 0 on this manager: no task "
				 "would be pruned");
		return;
	}
	api_submit_job(mg, req, dry ? J_DRY : J_REQUEST);
}
