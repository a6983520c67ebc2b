#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "task.h"
#include "tz.h"
#include "xmalloc.h"
#include "zk.h"

/*
 * Pausing and resuming topics (docs/architecture.md, "Pausing topics"):
 * POST /v1/topics/{topic}/pause, POST /v1/topics/{topic}/resume,
 * GET /v1/topics. The DB's topic_pause is the truth; after each commit the
 * paused topics are written to <root>/paused, which every worker watches.
 * Holding and releasing the tasks is the workers' (worker/pause.c), except
 * the expiry of a resume with skip, done here page by page while the topic
 * is still paused.
 */

#define PAUSE_MAX_TOPICS 1000 /* paused at once: the node stays small */
#define RESUME_RATE_MAX 1000000
#define GAUGE_INTERVAL_S 5
#define PAUSE_SETTLE_MS 2000

/* prophet_topic_paused's label sets (topic="..."), by index. */
static char gauge_sets[PAUSE_MAX_TOPICS][TASK_TOPIC_MAX + 16];
static const char *gauge_ptrs[PAUSE_MAX_TOPICS];

enum top_op {
	TOP_PAUSE,
	TOP_RESUME,
	TOP_SKIP_CHECK,
	TOP_SKIP_PAGE,
	TOP_SKIP_EXPIRE,
	TOP_LIST,
	TOP_GAUGE
};

struct top {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	enum top_op op;
	char topic[TASK_TOPIC_MAX + 1];
	int64_t now;
	int rate;
	int code; /* 0: done; else the error answer */
	char msg[256];
	int64_t paused_at;
	long long backlog;
	int64_t drain_until;
	struct db_rows paused; /* SQL_PAUSE_PAUSED after the commit */
	/* skip */
	int64_t cutoff;
	int64_t after_due;
	char after_id[TASK_ID_MAX + 1];
	struct db_rows page;
	char **removed; /* ids taken out of Redis, to expire */
	size_t nremoved;
	struct db_rows kept; /* removed but rescheduled meanwhile: re-index */
	long long expired;   /* by the last SCRIPT_SKIP page */
	int calls;	     /* Redis calls out */
	int redis_failed;
	long long skipped;
	json_t *out; /* TOP_LIST */
	char *node;  /* the node's data while the write is out */
};

static void top_submit(struct top *t, enum top_op op);
static struct top *top_new(struct manager *mg, struct evhttp_request *req);

static void
top_free(struct top *t)
{
	db_rows_free(&t->paused);
	db_rows_free(&t->page);
	db_rows_free(&t->kept);
	for (size_t i = 0; i < t->nremoved; i++)
		xfree(t->removed[i]);
	xfree(t->removed);
	json_decref(t->out);
	xfree(t->node);
	if (t->req != NULL)
		t->mg->inflight--;
	xfree(t);
}

static void
fail(struct top *t, int code, const char *msg)
{
	t->code = code;
	snprintf(t->msg, sizeof(t->msg), "%s", msg);
}

static int
read_paused(struct db_conn *c, struct top *t)
{
	db_rows_free(&t->paused);
	return db_query(c, SQL_PAUSE_PAUSED, NULL, &t->paused);
}

/* Pool threads. ----------------------------------------------------------- */

static int
run_pause(struct db_conn *c, struct top *t)
{
	struct db_params p;
	long long others = 0;
	struct db_rows r = {0};

	if (db_begin(c) < 0)
		return -1;
	db_params_init(&p, 3);
	db_params_str(&p, t->topic);
	if (db_query_int(c, SQL_PAUSE_COUNT_OTHERS, &p, 0, &others) < 0)
		goto fail;
	if (others >= PAUSE_MAX_TOPICS) {
		db_params_free(&p);
		db_rollback(c);
		fail(t, 409, "too many paused topics");
		return 0;
	}
	db_params_int(&p, t->now);
	db_params_int(&p, t->now);
	if (db_exec(c, SQL_PAUSE_SET, &p, NULL) < 0)
		goto fail;
	p.n = 0;
	db_params_str(&p, t->topic);
	if (db_query(c, SQL_PAUSE_GET, &p, &r) < 0)
		goto fail;
	t->paused_at = r.nrows ? db_rows_int(&r, 0, 1) : t->now;
	db_rows_free(&r);
	db_params_free(&p);
	if (db_commit(c) < 0)
		return -1;
	return read_paused(c, t);
fail:
	db_params_free(&p);
	db_rollback(c);
	return -1;
}

/* Locks the row; 1 if the topic is paused (t->paused_at), 0 after
 * answering 409. */
static int
check_paused(struct db_conn *c, struct top *t, const char *sql)
{
	struct db_params p;
	struct db_rows r = {0};
	int rc, paused;

	db_params_init(&p, 1);
	db_params_str(&p, t->topic);
	rc = db_query(c, sql, &p, &r);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	paused = r.nrows == 1 && db_rows_int(&r, 0, 0) == 1;
	if (paused)
		t->paused_at = db_rows_int(&r, 0, 1);
	else
		fail(t, 409, "topic is not paused");
	db_rows_free(&r);
	return paused;
}

/* Most occurrences the backlog counts through the cron expressions of the
 * topic's fire_all series (a bound on the resume's work). */
#define CATCH_UP_COUNT_MAX 1000000

/* The occurrences the topic's fire_all series missed after the one each
 * holds (that one is in SQL_PAUSE_BACKLOG's count), up to now. */
static int
catch_up_count(struct db_conn *c, struct top *t, long long *out)
{
	struct db_params p;
	struct db_rows rows;
	long long n = 0;
	char err[256];

	db_params_init(&p, 2);
	db_params_str(&p, t->topic);
	db_params_int(&p, t->now);
	if (db_query(c, SQL_PAUSE_CATCH_UP, &p, &rows) < 0) {
		db_params_free(&p);
		return -1;
	}
	db_params_free(&p);
	for (size_t i = 0; i < rows.nrows && n < CATCH_UP_COUNT_MAX; i++) {
		const char *zone = db_rows_get(&rows, i, SQL_CC_TIMEZONE, NULL);
		const struct tz *z =
			tz_get(zone ? zone : "UTC", err, sizeof(err));
		int64_t at = db_rows_int(&rows, i, SQL_CC_DUE_AT);
		int64_t max = db_rows_int(&rows, i, SQL_CC_MAX_OCCURRENCES);
		int64_t left =
			max > 0 ? max -
					  db_rows_int(&rows, i,
						      SQL_CC_OCCURRENCES) -
					  1
				: INT64_MAX;

		while (left-- > 0 && n < CATCH_UP_COUNT_MAX) {
			at = task_cron_next(
				db_rows_get(&rows, i, SQL_CC_CRON, NULL), z, at,
				db_rows_int(&rows, i, SQL_CC_END_AT), err,
				sizeof(err));
			if (at < 0 || at > t->now)
				break;
			n++;
		}
	}
	db_rows_free(&rows);
	*out = n;
	return 0;
}

static int
run_resume(struct db_conn *c, struct top *t, const char *policy)
{
	struct db_params p;
	long long more = 0;
	int rc;

	if (db_begin(c) < 0)
		return -1;
	if ((rc = check_paused(c, t, SQL_PAUSE_GET_LOCK)) <= 0) {
		db_rollback(c);
		return rc;
	}
	db_params_init(&p, 7);
	if (!strcmp(policy, "fire")) {
		db_params_str(&p, t->topic);
		db_params_int(&p, t->now);
		if (db_query_int(c, SQL_PAUSE_BACKLOG, &p, 0, &t->backlog) <
			    0 ||
		    catch_up_count(c, t, &more) < 0)
			goto fail;
		t->backlog += more;
		/* How long the drain takes at its rate, and a margin for
		 * the workers to see the resume. */
		t->drain_until =
			t->rate > 0
				? t->now + t->backlog * 1000 / t->rate + 5000
				: 0;
		p.n = 0;
	} else {
		t->backlog = t->skipped;
	}
	db_params_int(&p, t->now);
	db_params_str(&p, policy);
	db_params_int(&p, t->rate);
	db_params_int(&p, t->drain_until);
	db_params_int(&p, t->backlog);
	db_params_int(&p, t->now);
	db_params_str(&p, t->topic);
	if (db_exec(c, SQL_PAUSE_RESUME, &p, NULL) < 0)
		goto fail;
	db_params_free(&p);
	if (db_commit(c) < 0)
		return -1;
	return read_paused(c, t);
fail:
	db_params_free(&p);
	db_rollback(c);
	return -1;
}

static int
run_skip_page(struct db_conn *c, struct top *t)
{
	struct db_params p;
	int rc;

	db_rows_free(&t->page);
	db_params_init(&p, 5);
	db_params_str(&p, t->topic);
	db_params_int(&p, t->cutoff);
	db_params_int(&p, t->after_due);
	db_params_int(&p, t->after_due);
	db_params_str(&p, t->after_id);
	rc = db_query(c, SQL_PAUSE_SKIP_PAGE, &p, &t->page);
	db_params_free(&p);
	return rc;
}

struct skip_log {
	struct top *t;
	const char **ids;
	size_t n;
	char note[300];
};

static void
bind_skip_log(struct db_params *p, size_t i, void *arg)
{
	struct skip_log *l = arg;

	db_params_str(p, l->ids[i]);
	db_params_str(p, "scheduled");
	db_params_str(p, "expired");
	db_params_str(p, "manager");
	db_params_int(p, 0);
	db_params_int(p, 0);
	db_params_int(p, l->t->now);
	db_params_str(p, l->note);
}

/* The due time the page read for a task, or -1. */
static int64_t
page_due(const struct top *t, const char *id)
{
	for (size_t i = 0; i < t->page.nrows; i++)
		if (!strcmp(db_rows_get(&t->page, i, 0, NULL), id))
			return db_rows_int(&t->page, i, 2);
	return -1;
}

/* The rows of the removed tasks the DB did not expire that are still
 * scheduled (a PATCH or bulk job moved them after the page was read). */
static int
read_kept(struct db_conn *c, struct top *t, const char **ids, size_t n)
{
	struct db_params p;
	size_t len = strlen(SQL_PAUSE_SKIP_KEPT) + 3 * n + 8, at;
	char *sql = xmalloc(len);
	int rc;

	at = (size_t)snprintf(sql, len, "%s(", SQL_PAUSE_SKIP_KEPT);
	db_params_init(&p, n);
	for (size_t i = 0; i < n; i++) {
		at += (size_t)snprintf(sql + at, len - at, i ? ",?" : "?");
		db_params_str(&p, ids[i]);
	}
	snprintf(sql + at, len - at, ")");
	rc = db_query(c, sql, &p, &t->kept);
	db_params_free(&p);
	xfree(sql);
	return rc;
}

static int
run_skip_expire(struct db_conn *c, struct top *t)
{
	struct db_params p;
	struct skip_log l = {.t = t};
	const char **kept;
	size_t nkept = 0;
	unsigned long long n;

	l.ids = xcalloc(t->nremoved + 1, sizeof(*l.ids));
	kept = xcalloc(t->nremoved + 1, sizeof(*kept));
	snprintf(l.note, sizeof(l.note), "skipped: topic %s resumed with skip",
		 t->topic);
	db_rows_free(&t->kept);
	t->expired = 0;
	if (db_begin(c) < 0) {
		xfree(l.ids);
		xfree(kept);
		return -1;
	}
	db_params_init(&p, 3);
	for (size_t i = 0; i < t->nremoved; i++) {
		p.n = 0;
		db_params_int(&p, t->now);
		db_params_str(&p, t->removed[i]);
		db_params_int(&p, page_due(t, t->removed[i]));
		if (db_exec(c, SQL_PAUSE_SKIP_TASK, &p, &n) < 0)
			goto fail;
		if (n > 0)
			l.ids[l.n++] = t->removed[i];
		else
			kept[nkept++] = t->removed[i];
	}
	if (nkept > 0 && read_kept(c, t, kept, nkept) < 0)
		goto fail;
	if (l.n > 0 &&
	    db_exec_rows(c, SQL_TASK_LOG_INSERT_PREFIX, SQL_TASK_LOG_INSERT_ROW,
			 l.n, SQL_TASK_LOG_INSERT_NCOLS, bind_skip_log, &l,
			 NULL) < 0)
		goto fail;
	db_params_free(&p);
	if (db_commit(c) < 0) {
		xfree(l.ids);
		return -1;
	}
	t->skipped += (long long)l.n;
	t->expired = (long long)l.n;
	xfree(l.ids);
	xfree(kept);
	return 0;
fail:
	db_params_free(&p);
	db_rollback(c);
	db_rows_free(&t->kept);
	xfree(l.ids);
	xfree(kept);
	return -1;
}

static json_t *
int_or_null(const struct db_rows *r, size_t row, size_t col)
{
	if (db_rows_get(r, row, col, NULL) == NULL)
		return json_null();
	return json_integer(db_rows_int(r, row, col));
}

static json_t *
topic_entry(json_t *by, const char *topic)
{
	json_t *e = json_object_get(by, topic);

	if (e != NULL)
		return e;
	e = json_pack("{s:s, s:I, s:I, s:n, s:b, s:n, s:I}", "topic", topic,
		      "pending", (json_int_t)0, "overdue", (json_int_t)0,
		      "next_due_at", "paused", 0, "paused_since",
		      "fired_last_minute", (json_int_t)0);
	json_object_set_new(by, topic, e);
	return e;
}

static int
run_list(struct db_conn *c, struct top *t)
{
	struct db_rows r = {0};
	struct db_params p;
	json_t *by = json_object(), *list;
	const char *k;
	json_t *v;

	if (db_query(c, SQL_TOPICS_SCHEDULED, NULL, &r) < 0)
		goto fail;
	db_params_init(&p, 2);
	for (size_t i = 0; i < r.nrows; i++) {
		const char *topic = db_rows_get(&r, i, 0, NULL);
		json_t *e = topic_entry(by, topic);
		struct db_rows n = {0};

		json_object_set_new(e, "next_due_at", int_or_null(&r, i, 1));
		p.n = 0;
		db_params_int(&p, t->now);
		db_params_str(&p, topic);
		if (db_query(c, SQL_TOPICS_COUNTS, &p, &n) < 0) {
			db_params_free(&p);
			goto fail;
		}
		if (n.nrows == 1) {
			json_object_set_new(
				e, "pending",
				json_integer(db_rows_int(&n, 0, 0)));
			json_object_set_new(
				e, "overdue",
				json_integer(db_rows_int(&n, 0, 1)));
		}
		db_rows_free(&n);
	}
	db_rows_free(&r);
	if (db_query(c, SQL_TOPICS_PAUSE_ROWS, NULL, &r) < 0) {
		db_params_free(&p);
		goto fail;
	}
	for (size_t i = 0; i < r.nrows; i++) {
		json_t *e = topic_entry(by, db_rows_get(&r, i, 0, NULL));
		int paused = db_rows_int(&r, i, 1) == 1;
		const char *policy = db_rows_get(&r, i, 4, NULL);

		json_object_set_new(e, "paused", json_boolean(paused));
		if (paused) {
			json_object_set_new(e, "paused_since",
					    int_or_null(&r, i, 2));
			continue;
		}
		json_object_set_new(
			e, "last_resume",
			json_pack("{s:o, s:s?, s:I, s:I, s:I}", "at",
				  int_or_null(&r, i, 3), "policy", policy,
				  "rate", (json_int_t)db_rows_int(&r, i, 5),
				  "drain_until",
				  (json_int_t)db_rows_int(&r, i, 6),
				  policy && !strcmp(policy, "skip") ? "skipped"
								    : "backlog",
				  (json_int_t)db_rows_int(&r, i, 7)));
	}
	db_rows_free(&r);
	p.n = 0;
	db_params_int(&p, t->now - 60000);
	db_params_int(&p, t->now - 60000);
	if (db_query(c, SQL_TOPICS_FIRED, &p, &r) < 0) {
		db_params_free(&p);
		goto fail;
	}
	db_params_free(&p);
	for (size_t i = 0; i < r.nrows; i++)
		json_object_set_new(
			topic_entry(by, db_rows_get(&r, i, 0, NULL)),
			"fired_last_minute",
			json_integer(db_rows_int(&r, i, 1)));
	db_rows_free(&r);
	list = json_array();
	json_object_foreach (by, k, v)
		json_array_append(list, v);
	json_decref(by);
	t->out = json_pack("{s:I, s:o}", "now", (json_int_t)t->now, "topics",
			   list);
	return 0;
fail:
	db_rows_free(&r);
	json_decref(by);
	return -1;
}

static int
top_run(struct db_conn *c, struct db_job *job)
{
	struct top *t = (struct top *)job;

	switch (t->op) {
	case TOP_PAUSE: return run_pause(c, t);
	case TOP_RESUME: return run_resume(c, t, t->cutoff ? "skip" : "fire");
	case TOP_SKIP_CHECK:
		return check_paused(c, t, SQL_PAUSE_GET) < 0 ? -1 : 0;
	case TOP_SKIP_PAGE: return run_skip_page(c, t);
	case TOP_SKIP_EXPIRE: return run_skip_expire(c, t);
	case TOP_LIST: return run_list(c, t);
	case TOP_GAUGE:
		return db_query(c, SQL_TOPICS_PAUSE_ROWS, NULL, &t->paused);
	}
	return -1;
}

/* The loop. --------------------------------------------------------------- */

static json_t *
answer(struct top *t, int notified)
{
	if (t->op == TOP_PAUSE)
		return json_pack("{s:s, s:b, s:I, s:b}", "topic", t->topic,
				 "paused", 1, "paused_since",
				 (json_int_t)t->paused_at, "notified",
				 notified);
	if (t->cutoff)
		return json_pack("{s:s, s:b, s:s, s:I, s:b}", "topic", t->topic,
				 "paused", 0, "policy", "skip", "skipped",
				 (json_int_t)t->skipped, "notified", notified);
	return json_pack("{s:s, s:b, s:s, s:i, s:I, s:I, s:b}", "topic",
			 t->topic, "paused", 0, "policy", "fire", "rate",
			 t->rate, "backlog", (json_int_t)t->backlog,
			 "drain_until", (json_int_t)t->drain_until, "notified",
			 notified);
}

static void
notified_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct top *t = arg;

	if (rc != ZOK)
		log_warn("cannot write the paused topics to zookeeper: workers "
			 "read them from the database within a second",
			 "error=\"%s\"", zerror(rc));
	http_reply_json(t->req, 200, answer(t, rc == ZOK));
	top_free(t);
}

/* After a commit: the node tells the workers to look. */
static void
notify(struct top *t)
{
	json_t *doc = json_array(), *node;
	char path[512];

	for (size_t i = 0; i < t->paused.nrows; i++)
		json_array_append_new(
			doc, json_string(db_rows_get(&t->paused, i, 0, NULL)));
	node = json_pack("{s:o, s:I}", "paused", doc, "updated_at",
			 (json_int_t)t->now);
	t->node = json_dumps(node, JSON_COMPACT);
	json_decref(node);
	zpath(path, sizeof(path), cfg_str(t->mg->cfg, CFG_CLUSTER_ROOT),
	      ZPATH_PAUSED);
	log_info(t->op == TOP_PAUSE ? "topic paused" : "topic resumed",
		 "topic=%s paused_topics=%zu", t->topic, t->paused.nrows);
	if (zk_aset(t->mg->zk, path, t->node, -1, notified_cb, t) < 0)
		notified_cb(t->mg->zk, ZCONNECTIONLOSS, NULL, t);
}

static void skip_page_sent(struct top *t);

static void
skip_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct top *t = arg;

	t->calls--;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		t->redis_failed = 1;
	} else {
		for (size_t i = 0; i < reply->elements; i++) {
			if (reply->element[i]->type != REDIS_REPLY_STRING)
				continue;
			t->removed = xrealloc(t->removed,
					      (t->nremoved + 1) *
						      sizeof(*t->removed));
			t->removed[t->nremoved++] =
				xstrdup(reply->element[i]->str);
		}
	}
	if (t->calls == 0)
		skip_page_sent(t);
}

/* One SCRIPT_SKIP per slot of the page. */
static void
skip_page(struct top *t)
{
	struct manager *mg = t->mg;
	struct db_rows *pg = &t->page;
	int *sent = xcalloc((size_t)mg->nslots, sizeof(int));

	t->calls = 1; /* until every call is out */
	for (size_t i = 0; i < pg->nrows; i++) {
		int slot = (int)db_rows_int(pg, i, 1);
		struct slot_eval ev;

		if (slot < 0 || slot >= mg->nslots || sent[slot])
			continue;
		sent[slot] = 1;
		slot_eval_init(&ev, SCRIPT_SKIP, slot, "dicht");
		redis_args_addint(&ev.a, t->now);
		redis_args_addstr(&ev.a, t->topic);
		for (size_t j = i; j < pg->nrows; j++) {
			if (db_rows_int(pg, j, 1) != slot)
				continue;
			redis_args_addstr(&ev.a, db_rows_get(pg, j, 0, NULL));
			redis_args_addint(&ev.a, db_rows_int(pg, j, 2));
		}
		if (redis_eval_args(mg->redis, skip_reply_cb, t, &ev.a) < 0)
			t->redis_failed = 1;
		else
			t->calls++;
		slot_eval_free(&ev);
	}
	xfree(sent);
	t->calls--;
	if (t->calls == 0)
		skip_page_sent(t);
}

static void
skip_page_sent(struct top *t)
{
	if (t->redis_failed) {
		http_reply_error(t->req, 503, "unavailable", NULL,
				 "redis unavailable: %lld tasks skipped so "
				 "far; the topic stays paused, resume again",
				 t->skipped);
		top_free(t);
		return;
	}
	top_submit(t, TOP_SKIP_EXPIRE);
}

static void
settle_cb(evutil_socket_t fd, short what, void *arg)
{
	top_submit(arg, TOP_SKIP_PAGE);
}

/* A skip starts PAUSE_SETTLE_MS after the pause at the earliest: what a
 * worker claimed before the pause reached it is published by then, and
 * SCRIPT_SKIP may take whatever is still in flight. */
static void
skip_settled(struct top *t)
{
	int64_t wait = t->paused_at + PAUSE_SETTLE_MS - clock_now_ms();
	struct timeval tv;

	if (wait <= 0) {
		top_submit(t, TOP_SKIP_PAGE);
		return;
	}
	tv.tv_sec = (time_t)(wait / 1000);
	tv.tv_usec = (suseconds_t)(wait % 1000) * 1000;
	event_base_once(t->mg->base, -1, EV_TIMEOUT, settle_cb, t, &tv);
}

/* Tasks SCRIPT_SKIP took out of Redis (and tombstoned) that a PATCH or a
 * bulk job rescheduled after the page was read: the DB kept them
 * scheduled, so they go back in the index as the DB has them. */
static void
reindex_kept(struct top *t)
{
	struct manager *mg = t->mg;
	struct db_rows *k = &t->kept;

	if (k->nrows == 0)
		return;
	log_info("resume with skip: tasks rescheduled meanwhile are kept",
		 "topic=%s count=%zu", t->topic, k->nrows);
	for (size_t i = 0; i < k->nrows; i++)
		tasks_uncancel(mg, (int)db_rows_int(k, i, PC__COUNT),
			       db_rows_get(k, i, 0, NULL), 0);
	/* Beyond the horizon the loader indexes them in time, as a bulk job
	 * leaves them (and a cancel there writes no tombstone). */
	for (int slot = 0; slot < mg->nslots; slot++) {
		int64_t now = clock_now_ms();
		struct rindex ix;

		rindex_init(&ix, slot, mg->bucket_ms, now + mg->bucket_near_ms);
		for (size_t i = 0; i < k->nrows; i++)
			if (db_rows_int(k, i, PC__COUNT) == slot &&
			    db_rows_int(k, i, PC_DUE_AT) < now + mg->horizon_ms)
				rindex_add_row(&ix, k, i);
		if (rindex_count(&ix) > 0)
			redis_eval_args(mg->redis, NULL, NULL, &ix.ev.a);
		rindex_free(&ix);
	}
	db_rows_free(k);
}

static void
top_done_cb(struct db_job *job, int status, const char *err)
{
	struct top *t = (struct top *)job;
	struct manager *mg = t->mg;

	if (t->op == TOP_GAUGE) {
		for (size_t i = 0; i < PAUSE_MAX_TOPICS; i++) {
			gauge_ptrs[i] = NULL;
			if (status == 0 && i < t->paused.nrows) {
				snprintf(gauge_sets[i], sizeof(gauge_sets[i]),
					 "topic=\"%s\"",
					 db_rows_get(&t->paused, i, 0, NULL));
				gauge_ptrs[i] = gauge_sets[i];
				metric_vec_set(
					mg->m_topic_paused, i,
					(double)db_rows_int(&t->paused, i, 1));
			}
		}
		if (status == 0)
			metric_set_label_sets(mg->m_topic_paused, gauge_ptrs);
		top_free(t);
		return;
	}
	if (status < 0) {
		http_reply_error(t->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
		top_free(t);
		return;
	}
	if (t->code != 0) {
		http_reply_error(t->req, t->code,
				 t->code == 409 ? "conflict" : "invalid_value",
				 "topic", "%s: %s", t->topic, t->msg);
		top_free(t);
		return;
	}
	switch (t->op) {
	case TOP_PAUSE:
	case TOP_RESUME:
		/* The gauge follows at once, not at its next read. */
		top_submit(top_new(mg, NULL), TOP_GAUGE);
		notify(t);
		return;
	case TOP_LIST:
		http_reply_json(t->req, 200, t->out);
		t->out = NULL;
		top_free(t);
		return;
	case TOP_SKIP_CHECK: skip_settled(t); return;
	case TOP_SKIP_PAGE:
		if (t->page.nrows == 0) {
			top_submit(t, TOP_RESUME);
			return;
		}
		t->after_due = db_rows_int(&t->page, t->page.nrows - 1, 2);
		snprintf(t->after_id, sizeof(t->after_id), "%s",
			 db_rows_get(&t->page, t->page.nrows - 1, 0, NULL));
		if (!redis_up(mg->redis)) {
			t->redis_failed = 1;
			skip_page_sent(t);
			return;
		}
		skip_page(t);
		return;
	case TOP_SKIP_EXPIRE:
		metric_add(mg->m.pause_skipped, (double)t->expired);
		reindex_kept(t);
		for (size_t i = 0; i < t->nremoved; i++)
			xfree(t->removed[i]);
		t->nremoved = 0;
		top_submit(t, TOP_SKIP_PAGE);
		return;
	case TOP_GAUGE: break;
	}
}

static void
top_submit(struct top *t, enum top_op op)
{
	t->op = op;
	t->job.run = top_run;
	t->job.done_cb = top_done_cb;
	db_pool_submit(t->mg->db, &t->job);
}

static struct top *
top_new(struct manager *mg, struct evhttp_request *req)
{
	struct top *t = xcalloc(1, sizeof(*t));

	t->mg = mg;
	t->req = req;
	t->now = clock_now_ms();
	if (req != NULL)
		mg->inflight++;
	return t;
}

static int
topic_ok(struct manager *mg, struct evhttp_request *req, const char *topic,
	 size_t n)
{
	if (topic == NULL || strlen(topic) != n ||
	    !task_topic_valid(topic, n)) {
		http_reply_error(req, 400, "invalid_value", "topic",
				 "topic must be 1-200 characters of "
				 "[A-Za-z0-9._-]");
		return 0;
	}
	return 1;
}

void
topics_pause(struct manager *mg, struct evhttp_request *req, const char *topic,
	     size_t n)
{
	static const char *const none[] = {NULL};
	json_t *in = NULL;
	struct top *t;

	if (!topic_ok(mg, req, topic, n) || api_body_object(req, 0, &in) < 0)
		return;
	if (in != NULL && !api_fields_known(req, in, none)) {
		json_decref(in);
		return;
	}
	json_decref(in);
	t = top_new(mg, req);
	snprintf(t->topic, sizeof(t->topic), "%s", topic);
	top_submit(t, TOP_PAUSE);
}

void
topics_resume(struct manager *mg, struct evhttp_request *req, const char *topic,
	      size_t n)
{
	static const char *const names[] = {"policy", "rate", NULL};
	json_t *in = NULL, *pol, *rate;
	struct top *t;
	int skip;
	json_int_t r = 0;

	if (!topic_ok(mg, req, topic, n) || api_body_object(req, 0, &in) < 0)
		return;
	if (in == NULL) {
		http_reply_error(req, 400, "missing_field", "policy",
				 "policy is required: \"fire\" or \"skip\"");
		return;
	}
	if (!api_fields_known(req, in, names))
		goto out;
	pol = json_object_get(in, "policy");
	rate = json_object_get(in, "rate");
	if (pol == NULL) {
		http_reply_error(req, 400, "missing_field", "policy",
				 "policy is required: \"fire\" or \"skip\"");
		goto out;
	}
	if (!json_is_string(pol) ||
	    (strcmp(json_string_value(pol), "fire") != 0 &&
	     strcmp(json_string_value(pol), "skip") != 0)) {
		http_reply_error(req, 400, "invalid_value", "policy",
				 "policy must be \"fire\" or \"skip\"");
		goto out;
	}
	skip = !strcmp(json_string_value(pol), "skip");
	if (rate != NULL && !json_is_null(rate)) {
		if (skip) {
			http_reply_error(req, 400, "invalid_value", "rate",
					 "rate applies to policy \"fire\" "
					 "only");
			goto out;
		}
		if (!json_is_integer(rate) || json_integer_value(rate) < 1 ||
		    json_integer_value(rate) > RESUME_RATE_MAX) {
			http_reply_error(req, 400, "invalid_value", "rate",
					 "rate must be an integer 1..%d "
					 "(tasks per second)",
					 RESUME_RATE_MAX);
			goto out;
		}
		r = json_integer_value(rate);
	}
	t = top_new(mg, req);
	snprintf(t->topic, sizeof(t->topic), "%s", topic);
	t->rate = (int)r;
	if (skip) {
		t->cutoff = t->now;
		t->after_due = -1;
		top_submit(t, TOP_SKIP_CHECK);
	} else {
		top_submit(t, TOP_RESUME);
	}
out:
	json_decref(in);
}

void
topics_list(struct manager *mg, struct evhttp_request *req)
{
	top_submit(top_new(mg, req), TOP_LIST);
}

static void
gauge_cb(evutil_socket_t fd, short what, void *arg)
{
	struct manager *mg = arg;

	if (mg->stopping)
		return;
	top_submit(top_new(mg, NULL), TOP_GAUGE);
}

void
topics_start(struct manager *mg)
{
	struct timeval tv = {GAUGE_INTERVAL_S, 0};

	mg->m_topic_paused = metrics_register(
		METRIC_GAUGE, "prophet_topic_paused",
		"1 while the topic is paused, 0 after its resume (topics ever "
		"paused, paused first, at most 1000)",
		"topic", PAUSE_MAX_TOPICS);
	metric_set_label_sets(mg->m_topic_paused, gauge_ptrs);
	mg->pause_ev = event_new(mg->base, -1, EV_PERSIST, gauge_cb, mg);
	event_add(mg->pause_ev, &tv);
}

void
topics_stop(struct manager *mg)
{
	if (mg->pause_ev != NULL)
		event_free(mg->pause_ev);
	mg->pause_ev = NULL;
}
