#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "auth.h"
#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "num.h"
#include "redis.h"
#include "schema.h"
#include "slot.h"
#include "trace.h"
#include "tz.h"
#include "utf8.h"
#include "xmalloc.h"
#include "zk.h"

struct submit_ctx {
	struct ingest_req req;
	struct evhttp_request *http;
	struct manager *mg;
};

/* Room for submit_ok_text()'s answer. */
#define SUBMIT_OK_MAX (TASK_ID_MAX + 128)

/*
 * The answer to a submission accepted (201) or replayed (200), written
 * directly: {"id":...,"slot":...,"status":...,"due_at":...} and, with
 * code >= 0 (a batch's result), "code". What json_pack() and
 * json_dumps() made, in a fraction of their instructions (issue 23: the
 * answers were a third of a submission's). Ids hold only
 * [A-Za-z0-9._:-] (task_id_valid) and statuses are names: nothing to
 * escape. Returns the length; buf holds SUBMIT_OK_MAX bytes.
 */
static size_t
submit_ok_text(char *buf, const char *id, int slot, const char *status,
	       int64_t due_at, int code)
{
	char *p = buf;

	p = stpcpy(p, "{\"id\":\"");
	p = stpcpy(p, id);
	p = stpcpy(p, "\",\"slot\":");
	p += num_format_ll(p, slot);
	p = stpcpy(p, ",\"status\":\"");
	p = stpcpy(p, status);
	p = stpcpy(p, "\",\"due_at\":");
	p += num_format_ll(p, (long long)due_at);
	if (code >= 0) {
		p = stpcpy(p, ",\"code\":");
		p += num_format_ll(p, code);
	}
	*p++ = '}';
	*p = '\0';
	return (size_t)(p - buf);
}

/* The answer to one finished submission: its HTTP status and body; for
 * 201 and 200 the body is written to ok (SUBMIT_OK_MAX bytes, "code"
 * in it when with_code) and NULL returned, else it is an error object. */
static json_t *
submit_result(struct manager *mg, const struct ingest_req *r, int *code,
	      char *ok, size_t *oklen, int with_code)
{
	const struct task *t = &r->task;
	int slot = r->slot;
	struct task_error e;

	metric_observe(mg->m.submit_seconds,
		       (double)(clock_mono_us() - r->started_us) / 1e6);
	*code = r->result;
	switch (r->result) {
	case 201:
		metric_inc(mg->m.accepted);
		*oklen = submit_ok_text(ok, t->id, slot, "scheduled", t->due_at,
					with_code ? 201 : -1);
		return NULL;
	case 200:
		metric_inc(mg->m.replayed);
		*oklen = submit_ok_text(ok, t->id, slot,
					task_status_name(r->stored_status),
					r->stored_due_at, with_code ? 200 : -1);
		return NULL;
	case 409:
		metric_inc(mg->m.conflicts);
		task_error_set(&e, 409, "conflict", "id",
			       "task '%s' exists with different content",
			       t->id);
		return task_error_json(&e);
	case 400: return ingest_refused_json(mg, r, code);
	default:
		metric_inc(mg->m.unavailable);
		*code = 503;
		task_error_set(&e, 503, "unavailable", NULL,
			       "database unavailable, task not accepted: %s",
			       r->err);
		return task_error_json(&e);
	}
}

static void
submit_done_cb(struct ingest_req *r, void *arg)
{
	struct submit_ctx *ctx = arg;
	struct manager *mg = ctx->mg;
	char ok[SUBMIT_OK_MAX];
	size_t oklen = 0;
	json_t *out;
	int code;

	out = submit_result(mg, r, &code, ok, &oklen, 0);
	if (out != NULL) {
		http_reply_json(ctx->http, code, out);
	} else {
		struct evbuffer *b = evbuffer_new();

		evbuffer_add(b, ok, oklen);
		http_reply_json_buffer(ctx->http, code, b);
	}
	task_clear(&ctx->req.task);
	xfree(ctx);
	mg->inflight--;
}

static void
reply_task_error(struct manager *mg, struct evhttp_request *req,
		 const struct task_error *e)
{
	metric_inc(mg->m.rejected);
	http_reply_json(req, e->http, task_error_json(e));
}

static void
submit_checked_cb(const struct task_error *refused, void *arg)
{
	struct submit_ctx *ctx = arg;
	struct manager *mg = ctx->mg;

	if (refused == NULL) {
		ingest_submit(mg->ingest, &ctx->req);
		return;
	}
	metric_inc(mg->m.topic_unknown);
	reply_task_error(mg, ctx->http, refused);
	task_clear(&ctx->req.task);
	xfree(ctx);
	mg->inflight--;
}

/* Submits a validated task (ctx->req.task); the answer follows. */
static void
submit_task(struct manager *mg, struct evhttp_request *req,
	    struct submit_ctx *ctx)
{
	struct task_error terr;

	if (guard_submission(mg, &ctx->req.task, &terr) < 0) {
		task_clear(&ctx->req.task);
		xfree(ctx);
		reply_task_error(mg, req, &terr);
		return;
	}
	ctx->http = req;
	ctx->mg = mg;
	ctx->req.started_us = clock_mono_us();
	ctx->req.done_cb = submit_done_cb;
	ctx->req.arg = ctx;
	mg->inflight++;
	ktopics_check(mg, ctx->req.task.topic, submit_checked_cb, ctx);
}

/* Validates a task (taken over) and submits it; the answer follows. */
void
api_submit(struct manager *mg, struct evhttp_request *req, json_t *in)
{
	struct task_error terr;
	struct submit_ctx *ctx = xcalloc(1, sizeof(*ctx));

	if (task_from_json(in, &mg->limits, manager_due_now(mg), &ctx->req.task,
			   &terr) < 0) {
		json_decref(in);
		xfree(ctx);
		reply_task_error(mg, req, &terr);
		return;
	}
	json_decref(in);
	submit_task(mg, req, ctx);
}

/* Whether the daemon takes requests; a 503 answered if not. */
static int
api_open(struct manager *mg, struct evhttp_request *req)
{
	if (!mg->stopping)
		return 1;
	http_reply_error(req, 503, "unavailable", NULL,
			 "server is shutting down");
	return 0;
}

/* A request body as JSON, or a 400 already answered (NULL). */
static json_t *
body_json(struct manager *mg, struct evhttp_request *req, const char *body,
	  size_t len)
{
	struct task_error terr;
	json_error_t jerr;
	json_t *in;

	in = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
			&jerr);
	if (in == NULL) {
		task_error_set(&terr, 400, "invalid_json", NULL,
			       "malformed JSON at line %d column %d: %s",
			       jerr.line, jerr.column, jerr.text);
		reply_task_error(mg, req, &terr);
	}
	return in;
}

/* The request body as JSON, or a 400 or 503 already answered (NULL). */
json_t *
api_body_json(struct manager *mg, struct evhttp_request *req)
{
	json_t *in;
	size_t len;
	char *body;

	if (!api_open(mg, req))
		return NULL;
	body = http_body(req, &len);
	in = body_json(mg, req, body, len);
	xfree(body);
	return in;
}

/* The request body in place, in one piece (no copy: the hot path reads
 * it once). */
static const char *
body_text(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	const char *s;

	*len = evbuffer_get_length(in);
	s = *len > 0 ? (const char *)evbuffer_pullup(in, -1) : NULL;
	if (s == NULL)
		*len = 0;
	return s != NULL ? s : "";
}

/* Whether the request carries a W3C trace context header (the hot path
 * leaves those to trace_default and task_from_json). */
static int
has_trace_headers(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;

	/* One pass, names compared only when they start with a T. */
	TAILQ_FOREACH (kv, h, next)
		if ((kv->key[0] | 0x20) == 't' &&
		    (!strcasecmp(kv->key, TRACE_PARENT) ||
		     !strcasecmp(kv->key, TRACE_STATE)))
			return 1;
	return 0;
}

/* The request's W3C trace context headers, for submissions without their
 * own (proto/trace.h). */
void
api_request_trace(struct evhttp_request *req, json_t *task)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);

	trace_default(task, evhttp_find_header(h, TRACE_PARENT),
		      evhttp_find_header(h, TRACE_STATE));
}

/* POST /v1/tasks: a task in the common shape goes by the hot path
 * (task_from_text), any other through jansson and task_from_json. */
static void
post_task(struct manager *mg, struct evhttp_request *req)
{
	struct submit_ctx *ctx;
	const char *body;
	json_t *in;
	size_t len;

	if (!api_open(mg, req))
		return;
	body = body_text(req, &len);
	if (!has_trace_headers(req)) {
		ctx = xcalloc(1, sizeof(*ctx));
		if (task_from_text(body, len, &mg->limits, manager_due_now(mg),
				   NULL, &ctx->req.task)) {
			submit_task(mg, req, ctx);
			return;
		}
		xfree(ctx);
	}
	if ((in = body_json(mg, req, body, len)) == NULL)
		return;
	api_request_trace(req, in);
	api_submit(mg, req, in);
}

/* POST /v1/tasks/batch: every task validated on its own and submitted
 * through the same group commit; one result per task, in order, each with
 * the status a single submission would have had. */
struct batch_ctx {
	struct manager *mg;
	struct evhttp_request *http;
	size_t n;
	size_t checking; /* topic checks not answered yet */
	size_t pending;	 /* submissions not answered yet */
	struct batch_item *items;
};

struct batch_item {
	struct ingest_req req;
	struct batch_ctx *b;
	int valid; /* passed every check: to be submitted */
	/* its result, as JSON text: in ok (accepted, replayed) or err
	 * (json_dumps'), anslen bytes; none yet: anslen 0 */
	char ok[SUBMIT_OK_MAX];
	char *err;
	size_t anslen;
};

/* An item's result from an error object (taken over), with its code. */
static void
item_error(struct batch_item *it, json_t *e, int code)
{
	json_object_set_new(e, "code", json_integer(code));
	free(it->err);
	it->err = json_dumps(e, JSON_COMPACT);
	it->anslen = it->err != NULL ? strlen(it->err) : 0;
	json_decref(e);
}

/* {"results":[...]}, the items' texts in order. */
static void
batch_finish(struct batch_ctx *b)
{
	struct evbuffer *out = evbuffer_new();

	evbuffer_add(out, "{\"results\":[", 12);
	for (size_t i = 0; i < b->n; i++) {
		struct batch_item *it = &b->items[i];

		if (i > 0)
			evbuffer_add(out, ",", 1);
		if (it->anslen == 0)
			evbuffer_add(out, "null", 4);
		else
			evbuffer_add(out, it->err != NULL ? it->err : it->ok,
				     it->anslen);
		free(it->err);
	}
	evbuffer_add(out, "]}", 2);
	http_reply_json_buffer(b->http, 200, out);
	xfree(b->items);
	b->mg->inflight--;
	xfree(b);
}

static void
batch_item_done_cb(struct ingest_req *r, void *arg)
{
	struct batch_item *it = arg;
	struct batch_ctx *b = it->b;
	json_t *out;
	int code;

	out = submit_result(b->mg, r, &code, it->ok, &it->anslen, 1);
	if (out != NULL)
		item_error(it, out, code);
	task_clear(&r->task);
	if (--b->pending == 0)
		batch_finish(b);
}

/* Once every topic is checked: the valid tasks go to the group commit
 * together and in their order (of two with one id, the first wins). */
static void
batch_submit(struct batch_ctx *b)
{
	ingest_plug(b->mg->ingest);
	for (size_t i = 0; i < b->n; i++) {
		if (!b->items[i].valid)
			continue;
		b->pending++;
		ingest_submit(b->mg->ingest, &b->items[i].req);
	}
	ingest_unplug(b->mg->ingest);
	if (--b->pending == 0)
		batch_finish(b);
}

static void
batch_item_checked_cb(const struct task_error *refused, void *arg)
{
	struct batch_item *it = arg;
	struct batch_ctx *b = it->b;

	if (refused == NULL) {
		it->valid = 1;
	} else {
		metric_inc(b->mg->m.topic_unknown);
		metric_inc(b->mg->m.rejected);
		item_error(it, task_error_json(refused), refused->http);
		task_clear(&it->req.task);
	}
	if (--b->checking == 0)
		batch_submit(b);
}

/* A batch of n tasks answered item by item; the items' tasks are
 * filled by the caller. */
static struct batch_ctx *
batch_new(struct manager *mg, struct evhttp_request *req, size_t n)
{
	struct batch_ctx *b = xcalloc(1, sizeof(*b));

	b->mg = mg;
	b->http = req;
	b->items = xcalloc(n, sizeof(*b->items));
	b->n = n;
	b->checking = 1; /* the caller's, dropped by batch_go */
	b->pending = 1;	 /* batch_submit's */
	mg->inflight++;
	for (size_t i = 0; i < n; i++)
		b->items[i].b = b;
	return b;
}

/* An item whose task passed task_from_json (or the hot path): the
 * guards, then its topic's check. */
static void
batch_item_start(struct batch_item *it, int64_t started)
{
	struct batch_ctx *b = it->b;
	struct task_error terr;

	if (guard_submission(b->mg, &it->req.task, &terr) < 0) {
		task_clear(&it->req.task);
		metric_inc(b->mg->m.rejected);
		item_error(it, task_error_json(&terr), terr.http);
		return;
	}
	it->req.started_us = started;
	it->req.done_cb = batch_item_done_cb;
	it->req.arg = it;
	b->checking++;
	ktopics_check(b->mg, it->req.task.topic, batch_item_checked_cb, it);
}

static void
batch_go(struct batch_ctx *b)
{
	if (--b->checking == 0)
		batch_submit(b);
}

/* POST /v1/tasks/batch: a batch whose every task has the common shape
 * goes by the hot path (task_batch_from_text), any other through jansson
 * and task_from_json item by item. */
static void
post_batch(struct manager *mg, struct evhttp_request *req)
{
	struct task_error terr;
	struct batch_ctx *b;
	struct task *parsed;
	json_t *in, *tasks, *t;
	size_t n, i, len, max = (size_t)cfg_int(mg->cfg, CFG_HTTP_MAX_BATCH);
	int64_t now = manager_due_now(mg), started = clock_mono_us();
	const char *body;

	if (!api_open(mg, req))
		return;
	body = body_text(req, &len);
	if (!has_trace_headers(req) &&
	    (n = task_batch_from_text(body, len, &mg->limits, now, max,
				      &parsed)) > 0) {
		b = batch_new(mg, req, n);
		for (i = 0; i < n; i++) {
			b->items[i].req.task = parsed[i];
			batch_item_start(&b->items[i], started);
		}
		xfree(parsed);
		batch_go(b);
		return;
	}
	if ((in = body_json(mg, req, body, len)) == NULL)
		return;
	tasks = json_object_get(in, "tasks");
	if (!json_is_object(in) || !json_is_array(tasks) ||
	    json_object_size(in) != 1) {
		json_decref(in);
		http_reply_error(req, 400, "invalid_type", "tasks",
				 "expected {\"tasks\":[...]}");
		return;
	}
	n = json_array_size(tasks);
	if (n == 0 || n > max) {
		json_decref(in);
		http_reply_error(req, n ? 413 : 400,
				 n ? "too_large" : "invalid_value", "tasks",
				 "a batch holds 1 to %zu tasks", max);
		return;
	}
	b = batch_new(mg, req, n);
	json_array_foreach (tasks, i, t) {
		struct batch_item *it = &b->items[i];

		api_request_trace(req, t);
		if (task_from_json(t, &mg->limits, now, &it->req.task, &terr) <
		    0) {
			metric_inc(mg->m.rejected);
			item_error(it, task_error_json(&terr), terr.http);
			continue;
		}
		batch_item_start(it, started);
	}
	json_decref(in);
	batch_go(b);
}

struct get_ctx {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *http;
	char id[TASK_ID_MAX + 1];
	int with_log;
	struct db_rows task;
	struct db_rows log;
	json_t *out; /* the answer, while Redis is asked */
};

/*
 * The log rows ?log=1 shows, the newest. A recurring task writes rows at
 * every occurrence: one firing every second for the 7 days of
 * task.log_retention has a million, which took the manager to 1.8 GB for
 * one request (and a read token can ask for it again and again).
 */
#define GET_LOG_MAX 1000

static int
get_run(struct db_conn *c, struct db_job *job)
{
	struct get_ctx *g = (struct get_ctx *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 2);
	db_params_str(&p, g->id);
	rc = db_query(c, SQL_TASK_GET, &p, &g->task);
	db_params_int(&p, GET_LOG_MAX + 1); /* one more: cut or not */
	if (rc == 0 && g->with_log && g->task.nrows == 1)
		rc = db_query(c, SQL_TASK_LOG_GET, &p, &g->log);
	db_params_free(&p);
	return rc;
}

static json_t *
json_or_null(const char *s)
{
	json_t *j;

	if (s == NULL)
		return NULL;
	j = json_loads(s, JSON_ALLOW_NUL, NULL);
	return j;
}

static json_t *
row_to_json(const struct db_rows *r, size_t row)
{
	struct task t;
	unsigned long blen;
	const char *s;
	json_t *out;

	memset(&t, 0, sizeof(t));
	snprintf(t.id, sizeof(t.id), "%s",
		 db_rows_get(r, row, SQL_TC_ID, NULL));
	t.topic = (char *)db_rows_get(r, row, SQL_TC_TOPIC, NULL);
	t.body = (char *)db_rows_get(r, row, SQL_TC_BODY, &blen);
	t.body_len = blen;
	t.key = (char *)db_rows_get(r, row, SQL_TC_KEY, NULL);
	t.headers = json_or_null(db_rows_get(r, row, SQL_TC_HEADERS, NULL));
	t.callback = json_or_null(db_rows_get(r, row, SQL_TC_CALLBACK, NULL));
	t.due_at = db_rows_int(r, row, SQL_TC_DUE_AT);
	t.ttl_ms = db_rows_int(r, row, SQL_TC_TTL_MS);
	t.max_attempts = (int)db_rows_int(r, row, SQL_TC_MAX_ATTEMPTS);
	task_status_parse(db_rows_get(r, row, SQL_TC_STATUS, NULL), &t.status);
	t.attempt = (int)db_rows_int(r, row, SQL_TC_ATTEMPT);
	t.created_at = db_rows_int(r, row, SQL_TC_CREATED_AT);
	t.updated_at = db_rows_int(r, row, SQL_TC_UPDATED_AT);
	t.fired_at = db_rows_int(r, row, SQL_TC_FIRED_AT);
	t.delivered_at = db_rows_int(r, row, SQL_TC_DELIVERED_AT);
	s = db_rows_get(r, row, SQL_TC_CALLBACK_STATUS, NULL);
	if (s != NULL)
		task_callback_status_parse(s, &t.callback_status);
	t.cron = (char *)db_rows_get(r, row, SQL_TC_CRON, NULL);
	t.timezone = (char *)db_rows_get(r, row, SQL_TC_TIMEZONE, NULL);
	s = db_rows_get(r, row, SQL_TC_MISFIRE, NULL);
	if (s != NULL)
		task_misfire_parse(s, &t.misfire);
	t.start_at = db_rows_int(r, row, SQL_TC_START_AT);
	t.end_at = db_rows_int(r, row, SQL_TC_END_AT);
	t.max_occurrences = db_rows_int(r, row, SQL_TC_MAX_OCCURRENCES);
	t.occurrences = db_rows_int(r, row, SQL_TC_OCCURRENCES);
	out = task_to_json(&t, tz_get);
	json_object_set_new(out, "slot",
			    json_integer(db_rows_int(r, row, SQL_TC_SLOT)));
	json_object_set_new(out, "epoch",
			    json_integer(db_rows_int(r, row, SQL_TC_EPOCH)));
	s = db_rows_get(r, row, SQL_TC_OWNER, NULL);
	json_object_set_new(out, "owner", s ? utf8_json_str(s) : json_null());
	json_decref(t.headers);
	json_decref(t.callback);
	return out;
}

/* One state-log row; its texts (actor, note) were written by workers and
 * notifiers, but are made valid UTF-8 all the same. The row's columns
 * start at col (SQL_TASK_LOG_GET's order). */
static json_t *
log_row_json(const struct db_rows *r, size_t i, size_t col)
{
	static const char *const text[] = {"from", "to", "actor"};
	static const char *const num[] = {"epoch", "attempt", "at"};
	const char *note = db_rows_get(r, i, col + 6, NULL);
	json_t *o = json_object();

	for (size_t k = 0; k < 3; k++)
		json_object_set_new(
			o, text[k],
			utf8_json_str(db_rows_get(r, i, col + k, NULL)));
	for (size_t k = 0; k < 3; k++)
		json_object_set_new(
			o, num[k],
			json_integer(db_rows_int(r, i, col + 3 + k)));
	json_object_set_new(o, "note",
			    note != NULL ? utf8_json_str(note) : json_null());
	return o;
}

/*
 * A one-shot task's delivery is not stored as a log row: everything that
 * row would hold is in the task's own columns (the publisher's id as
 * owner, its epoch and attempt, the publish time as fired_at). The log
 * shows it as the row it would have been, in time order; a task
 * delivered before this (or a recurring series, whose rows carry notes)
 * has its stored row.
 */
static void
log_add_delivered(json_t *task, json_t *log)
{
	const char *status = json_string_value(json_object_get(task, "status"));
	json_int_t at = json_integer_value(json_object_get(task, "fired_at"));
	const char *from = "scheduled";
	size_t i, pos;
	json_t *e;

	if (status == NULL || strcmp(status, "delivered") ||
	    json_object_get(task, "cron") != NULL ||
	    !json_is_string(json_object_get(task, "owner")))
		return;
	json_array_foreach (log, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "to")),
			    "delivered"))
			return;
	pos = json_array_size(log);
	json_array_foreach (log, i, e) {
		if (json_integer_value(json_object_get(e, "at")) > at) {
			pos = i;
			break;
		}
	}
	/* Claimed from the DB (its mode while Redis was away): firing. */
	if (pos > 0 && !strcmp(json_string_value(json_object_get(
				       json_array_get(log, pos - 1), "to")),
			       "firing"))
		from = "firing";
	e = json_pack("{s:s, s:s, s:O, s:O, s:O, s:I, s:n}", "from", from, "to",
		      "delivered", "actor", json_object_get(task, "owner"),
		      "epoch", json_object_get(task, "epoch"), "attempt",
		      json_object_get(task, "attempt"), "at", at, "note");
	json_array_insert_new(log, pos, e);
}

/*
 * A member given twice is refused whatever the flags: jansson would keep
 * the last one, and a proxy or a log reading the first would see another
 * call than the one served ({"dry_run":true,"dry_run":false} started a
 * bulk cancel of every scheduled task).
 */
int
api_body_object(struct evhttp_request *req, size_t flags, json_t **out)
{
	size_t len;
	char *body = http_body(req, &len);
	json_error_t jerr;

	*out = NULL;
	if (len > 0)
		*out = json_loadb(body, len, flags | JSON_REJECT_DUPLICATES,
				  &jerr);
	xfree(body);
	if (len > 0 && *out == NULL) {
		http_reply_error(req, 400, "invalid_json", NULL,
				 "malformed JSON at line %d column %d: %s",
				 jerr.line, jerr.column, jerr.text);
		return -1;
	}
	if (len > 0 && !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		http_reply_error(req, 400, "invalid_json", NULL,
				 "expected a JSON object");
		return -1;
	}
	return 0;
}

int
api_fields_known(struct evhttp_request *req, json_t *in,
		 const char *const *names)
{
	const char *key;
	json_t *v;

	json_object_foreach (in, key, v) {
		size_t i;

		for (i = 0; names[i] != NULL; i++)
			if (!strcmp(key, names[i]))
				break;
		if (names[i] == NULL) {
			http_reply_unknown(req, "field", key, names);
			return 0;
		}
	}
	return 1;
}

json_t *
api_task_json(const struct db_rows *task, size_t row, const struct db_rows *log,
	      size_t first, size_t n, size_t col)
{
	json_t *out = row_to_json(task, row), *arr;

	if (log == NULL)
		return out;
	arr = json_array();
	for (size_t i = first; i < first + n; i++)
		json_array_append_new(arr, log_row_json(log, i, col));
	log_add_delivered(out, arr);
	json_object_set_new(out, "log", arr);
	return out;
}

static void
get_free(struct get_ctx *g)
{
	db_rows_free(&g->task);
	db_rows_free(&g->log);
	g->mg->inflight--;
	xfree(g);
}

/* A task the DB has as scheduled that a worker claimed in Redis is being
 * published (a cancel answers 409 "firing"): shown as firing. */
static void
get_inflight_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct get_ctx *g = arg;

	(void)r;
	if (reply != NULL && reply->type == REDIS_REPLY_STRING)
		json_object_set_new(g->out, "status", json_string("firing"));
	http_reply_json(g->http, 200, g->out);
	get_free(g);
}

static void
get_done_cb(struct db_job *job, int status, const char *err)
{
	struct get_ctx *g = (struct get_ctx *)job;
	const char *st;
	char key[RKEY_MAX];

	if (status < 0) {
		http_reply_error(g->http, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
	} else if (g->task.nrows == 0) {
		http_reply_error(g->http, 404, "not_found", "id",
				 "no task '%s'", g->id);
	} else {
		size_t cut = g->log.nrows > GET_LOG_MAX
				     ? g->log.nrows - GET_LOG_MAX
				     : 0;

		g->out =
			api_task_json(&g->task, 0, g->with_log ? &g->log : NULL,
				      cut, g->log.nrows - cut, 0);
		if (g->with_log)
			json_object_set_new(g->out, "log_truncated",
					    json_boolean(cut > 0));
		st = json_string_value(json_object_get(g->out, "status"));
		rkey_inflight(key, sizeof(key),
			      slot_of(g->id, strlen(g->id), g->mg->nslots));
		/* A series' occurrence in flight does not stop a cancel of
		 * the series: it stays scheduled. */
		if (st != NULL && !strcmp(st, "scheduled") &&
		    json_object_get(g->out, "cron") == NULL &&
		    redis_commandl(g->mg->redis, get_inflight_cb, g, "ZSCORE",
				   key, g->id, NULL) == 0)
			return;
		http_reply_json(g->http, 200, g->out);
	}
	get_free(g);
}

/* GET /v1/tasks/{id}'s query: log (the state log too). */
static const char *const get_params[] = {"log", NULL};
/* The calls that take no query parameter refuse any: a filter they do
 * not have (?state=running) must not be ignored. */
static const char *const no_params[] = {NULL};

static void
get_task(struct manager *mg, struct evhttp_request *req, const char *id,
	 size_t idlen)
{
	struct evkeyvalq q;
	const char *logp;
	struct get_ctx *g;

	/* idlen, not strlen: an encoded NUL must not cut the id short. */
	if (!api_check_id(req, id, idlen) ||
	    http_query_known(req, get_params) < 0)
		return;
	g = xcalloc(1, sizeof(*g));
	g->mg = mg;
	g->http = req;
	snprintf(g->id, sizeof(g->id), "%s", id);
	TAILQ_INIT(&q);
	if (evhttp_parse_query_str(
		    evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req))
			    ?: "",
		    &q) == 0) {
		logp = evhttp_find_header(&q, "log");
		g->with_log = logp != NULL && strcmp(logp, "0") &&
			      strcmp(logp, "false");
	}
	evhttp_clear_headers(&q);
	g->job.run = get_run;
	g->job.done_cb = get_done_cb;
	mg->inflight++;
	db_pool_submit(mg->db, &g->job);
}

static void
readyz(struct manager *mg, struct evhttp_request *req)
{
	int zk = zk_is_ready(mg->zk), redis = redis_up(mg->redis);
	int db = db_pool_ready(mg->db);
	json_t *out = json_pack("{s:b, s:b, s:b}", "zookeeper", zk, "redis",
				redis, "db", db);

	/* The API still accepts without Redis (the DB is the truth). */
	json_object_set_new(out, "ready", json_boolean(zk && db));
	http_reply_json(req, zk && db ? 200 : 503, out);
}

int
api_check_id(struct evhttp_request *req, const char *id, size_t idlen)
{
	if (id != NULL && task_id_valid(id, idlen))
		return 1;
	http_reply_error(req, 400, "invalid_value", "id",
			 "id must be 1-%d characters of [A-Za-z0-9._:-]",
			 TASK_ID_MAX);
	return 0;
}

int
api_topic_allowed(const struct manager *mg, const char *topic)
{
	if (mg->topics_allowed == NULL)
		return 1;
	for (char **t = mg->topics_allowed; *t != NULL; t++)
		if (!strcmp(*t, topic))
			return 1;
	return 0;
}

/* The route table's handlers: the table's {} argument, decoded. */
static void
r_post_task(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	post_task(ctx, req);
}

static void
r_list(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	tasks_list(ctx, req);
}

static void
r_batch(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	post_batch(ctx, req);
}

static void
r_get(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	get_task(ctx, req, a, n);
}

static void
r_cancel(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	tasks_cancel(ctx, req, a, n);
}

static void
r_reschedule(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	tasks_reschedule(ctx, req, a, n);
}

static void
r_restore_one(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	restore_one(ctx, req, a, n);
}

static void
r_restore_start(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	restore_start(ctx, req);
}

static void
r_restore_status(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	if (http_query_known(req, no_params) < 0)
		return;
	/* Job ids are ours: printable, no NUL. */
	if (strlen(a) != n) {
		http_reply_error(req, 404, "not_found", "job", "no such job");
		return;
	}
	restore_status(ctx, req, a);
}

static void
r_prune_get(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	prune_get(ctx, req);
}

static void
r_prune_post(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	prune_post(ctx, req);
}

static void
r_bulk_post(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	bulk_post(ctx, req);
}

static void
r_jobs_list(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	bulk_jobs_list(ctx, req);
}

static void
r_job_get(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	if (http_query_known(req, no_params) < 0)
		return;
	bulk_job_get(ctx, req, a, n);
}

static void
r_job_cancel(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	if (http_query_known(req, no_params) < 0)
		return;
	bulk_job_cancel(ctx, req, a, n);
}

static void
r_pull_next(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	pull_next(ctx, req, a, n);
}

static void
r_pull_ack(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	pull_ack(ctx, req, a, n);
}

static void
r_topic_pause(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	topics_pause(ctx, req, a, n);
}

static void
r_topic_resume(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	topics_resume(ctx, req, a, n);
}

static void
r_topics(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	topics_list(ctx, req);
}

static void
r_cluster(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	cluster_get(ctx, req);
}

static void
r_lateness(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	lateness_get(ctx, req);
}

static void
r_schedule(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	schedule_get(ctx, req);
}

static void
r_readyz(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	readyz(ctx, req);
}

static void
r_console(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	const char *path =
		evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));

	(void)ctx;
	(void)a;
	(void)n;
	if (path == NULL || !console_path(path))
		http_reply_error(req, 404, "not_found", NULL,
				 "no such console file");
	else
		console_serve(req, path, evhttp_request_get_command(req));
}

static void
r_openapi(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	if (http_query_known(req, no_params) < 0)
		return;
	openapi_get(ctx, req);
}

#define GET EVHTTP_REQ_GET
#define POST EVHTTP_REQ_POST
#define NATIVE HTTP_SHAPE_NATIVE
#define MYKIT HTTP_SHAPE_MYKIT
#define STATE HTTP_ROUTE_STATE
#define JSON HTTP_ROUTE_JSON

/*
 * Every call the manager serves: one row per method and path, with the
 * role it needs (0: public), the shape of its answers and whether it
 * changes state (refused from another site's page) or takes JSON.
 */
static const struct http_route routes[] = {
	{POST, "/v1/tasks", AUTH_SUBMIT, NATIVE, STATE | JSON, r_post_task},
	{GET, "/v1/tasks", AUTH_READ, NATIVE, 0, r_list},
	{POST, "/v1/tasks/batch", AUTH_SUBMIT, NATIVE, STATE | JSON, r_batch},
	{GET, "/v1/tasks/{}", AUTH_READ, NATIVE, 0, r_get},
	{EVHTTP_REQ_DELETE, "/v1/tasks/{}", AUTH_SUBMIT, NATIVE, STATE,
	 r_cancel},
	{EVHTTP_REQ_PATCH, "/v1/tasks/{}", AUTH_SUBMIT, NATIVE, STATE | JSON,
	 r_reschedule},
	{POST, "/v1/tasks/{}/restore", AUTH_ADMIN, NATIVE, STATE | JSON,
	 r_restore_one},
	{POST, "/v1/admin/restore", AUTH_ADMIN, NATIVE, STATE | JSON,
	 r_restore_start},
	{GET, "/v1/admin/restore/{}", AUTH_ADMIN, NATIVE, 0, r_restore_status},
	{POST, "/v1/tasks/bulk", AUTH_ADMIN, NATIVE, STATE | JSON, r_bulk_post},
	{GET, "/v1/admin/jobs", AUTH_ADMIN, NATIVE, 0, r_jobs_list},
	{GET, "/v1/admin/jobs/{}", AUTH_ADMIN, NATIVE, 0, r_job_get},
	{POST, "/v1/admin/jobs/{}/cancel", AUTH_ADMIN, NATIVE, STATE,
	 r_job_cancel},
	{GET, "/v1/admin/prune", AUTH_ADMIN, NATIVE, 0, r_prune_get},
	{POST, "/v1/admin/prune", AUTH_ADMIN, NATIVE, STATE | JSON,
	 r_prune_post},
	/* Pull consumption: taking leases tasks (state); role read takes,
	 * submit acknowledges. */
	{GET, "/v1/topics/{}/next", AUTH_READ, NATIVE, STATE, r_pull_next},
	{POST, "/v1/topics/{}/ack", AUTH_SUBMIT, NATIVE, STATE | JSON,
	 r_pull_ack},
	{GET, "/v1/topics", AUTH_READ, NATIVE, 0, r_topics},
	{POST, "/v1/topics/{}/pause", AUTH_ADMIN, NATIVE, STATE | JSON,
	 r_topic_pause},
	{POST, "/v1/topics/{}/resume", AUTH_ADMIN, NATIVE, STATE | JSON,
	 r_topic_resume},
	{GET, "/v1/cluster", AUTH_READ, NATIVE, 0, r_cluster},
	{GET, "/v1/cluster/lateness", AUTH_READ, NATIVE, 0, r_lateness},
	{GET, "/v1/schedule", AUTH_READ, NATIVE, 0, r_schedule},
	{GET, "/metrics", 0, NATIVE, 0, http_route_metrics},
	{GET, "/healthz", 0, NATIVE, 0, http_route_healthz},
	{GET, "/readyz", 0, NATIVE, 0, r_readyz},
	{GET, "/v1/openapi.json", 0, NATIVE, 0, r_openapi},
	{GET, "/", 0, NATIVE, 0, r_console},
	{GET, "/console/{}", 0, NATIVE, 0, r_console},
	{POST, "/push", AUTH_SUBMIT, MYKIT, STATE | JSON, mykit_push},
	{GET, "/delete", AUTH_SUBMIT, MYKIT, STATE, mykit_delete},
	{GET, "/reStore", AUTH_ADMIN, MYKIT, STATE, mykit_restore},
	{GET, "/reStoreJob", AUTH_ADMIN, MYKIT, STATE, mykit_restore_job},
	{GET, "/clearAll", AUTH_ADMIN, MYKIT, STATE, mykit_clear_all},
	{GET, "/get/{}", AUTH_READ, MYKIT, STATE, mykit_get},
};

#undef GET
#undef POST
#undef NATIVE
#undef MYKIT
#undef STATE
#undef JSON

static int
authorize(void *ctx, const char *authorization, int role)
{
	struct manager *mg = ctx;

	if (!auth_enabled(mg->auth))
		return 0;
	return auth_check(mg->auth, authorization, (enum auth_role)role);
}

void
api_register(struct manager *mg)
{
	http_server_set_routes(mg->http, routes,
			       sizeof(routes) / sizeof(routes[0]), authorize,
			       mg);
}

/* One line a route: method, path, role, shape, flags (tests compare the
 * table with docs/openapi.yaml). */
void
api_print_routes(FILE *out)
{
	static const struct {
		unsigned bit;
		const char *name;
	} ms[] = {{EVHTTP_REQ_GET, "GET"},	 {EVHTTP_REQ_POST, "POST"},
		  {EVHTTP_REQ_PUT, "PUT"},	 {EVHTTP_REQ_PATCH, "PATCH"},
		  {EVHTTP_REQ_DELETE, "DELETE"}, {0, NULL}};

	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const struct http_route *r = &routes[i];

		for (int k = 0; ms[k].name != NULL; k++) {
			if (!(r->methods & ms[k].bit))
				continue;
			fprintf(out, "%s %s %s %s%s%s\n", ms[k].name, r->path,
				r->role == AUTH_ADMIN	 ? "admin"
				: r->role == AUTH_SUBMIT ? "submit"
				: r->role == AUTH_READ	 ? "read"
							 : "public",
				r->shape == HTTP_SHAPE_MYKIT ? "mykit"
							     : "native",
				r->flags & HTTP_ROUTE_STATE ? " state" : "",
				r->flags & HTTP_ROUTE_JSON ? " json" : "");
		}
	}
}
