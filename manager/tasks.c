#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "callback.h"
#include "cfg.h"
#include "cron.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "slot.h"
#include "trace.h"
#include "tz.h"
#include "xmalloc.h"

/*
 * Cancel, reschedule and list.
 *
 * Cancel and reschedule must be race-free against a worker's claim, so the
 * decision is taken in Redis, atomically with the claim script's view: a
 * task still in the slot's due set can be changed (it cannot be claimed in
 * between), one in flight cannot. The DB update that follows is
 * conditional on `scheduled`, which also makes them race-free against DB
 * mode (its claims lock the row and require `scheduled`). A cancel leaves
 * a tombstone so that a loader that read the task before the cancel does
 * not index it again. Both need Redis: without it they answer 503 rather
 * than risk a task being published after a 200.
 */

enum op { OP_CANCEL, OP_RESCHEDULE };

struct change {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	enum op op;
	int phase; /* 0: read, 1: write */
	char id[TASK_ID_MAX + 1];
	char topic[TASK_TOPIC_MAX + 1]; /* its held set while paused */
	int retry_task; /* cancel: a notifier retry task (cbr:<id>:<n>) */
	int slot;
	int64_t new_due;
	int64_t old_due;       /* the DB's due time before the change */
	int64_t removed_score; /* cancel: score it had in Redis */
	int far;	       /* cancel: beyond every index (no Redis) */
	char *payload;	       /* reschedule: new payload, "" = unindex */
	char *new_cron;	       /* reschedule of a recurring task */
	char *new_tz;	       /* NULL: keep the stored zone */
	int recurring;	       /* the task has a cron expression */
	int occ_in_flight;     /* cancel: an occurrence is being published */
	struct db_rows rows;
	unsigned long long affected;
	int64_t now;
	char trace[TRACE_KV_LEN]; /* " trace=<id>" of its log lines, or "" */
};

static void
change_free(struct change *c)
{
	db_rows_free(&c->rows);
	xfree(c->payload);
	xfree(c->new_cron);
	xfree(c->new_tz);
	c->mg->inflight--;
	xfree(c);
}

static void
bind_log(struct db_params *p, const struct change *c, const char *to,
	 const char *note)
{
	db_params_str(p, c->id);
	db_params_str(p, "scheduled");
	db_params_str(p, to);
	db_params_str(p, "api");
	db_params_int(p, 0);
	db_params_int(p, 0);
	db_params_int(p, c->now);
	db_params_str(p, note);
}

/* The task and occurrence (0: none) a notifier retry task retries, from
 * its callback-of and callback-occurrence headers (signed, so they are
 * the notifier's); 0, or -1 on a DB error. origin is "" when the task is
 * not one. Its id cannot tell: an occurrence's is "cbr:<id>:<occ>:<n>",
 * a long id's "cbr:h<hash>:<n>". */
static int
retry_origin(struct db_conn *conn, const char *retry_id, char *origin,
	     size_t len, int64_t *occurrence)
{
	struct db_params p;
	struct db_rows rows = {0};
	const char *text;
	json_t *h, *v;
	int rc;

	origin[0] = '\0';
	*occurrence = 0;
	db_params_init(&p, 1);
	db_params_str(&p, retry_id);
	rc = db_query(conn, "SELECT headers FROM tasks WHERE id = ?", &p,
		      &rows);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	text = rows.nrows > 0 ? db_rows_get(&rows, 0, 0, NULL) : NULL;
	h = text != NULL ? json_loads(text, 0, NULL) : NULL;
	db_rows_free(&rows);
	if ((v = json_object_get(h, RHDR_OF)) != NULL && json_is_string(v) &&
	    json_string_length(v) < len)
		snprintf(origin, len, "%s", json_string_value(v));
	if ((v = json_object_get(h, RHDR_OCCURRENCE)) != NULL &&
	    json_is_string(v))
		*occurrence = strtoll(json_string_value(v), NULL, 10);
	json_decref(h);
	return 0;
}

int
tasks_retry_cancelled(struct db_conn *conn, const char *retry_id,
		      const char *actor, int64_t now)
{
	struct db_params p;
	unsigned long long n = 0;
	char origin[TASK_ID_MAX + 1], note[255];
	int64_t occ;
	int rc;

	if (retry_origin(conn, retry_id, origin, sizeof(origin), &occ) < 0)
		return -1;
	if (origin[0] == '\0')
		return 0;
	/* Only while the status is this occurrence's: a later occurrence's
	 * outcome has replaced it otherwise. */
	db_params_init(&p, 8);
	db_params_int(&p, now);
	db_params_str(&p, origin);
	db_params_int(&p, occ);
	rc = db_exec(conn,
		     "UPDATE tasks SET callback_status = 'failed', "
		     "updated_at = ? WHERE id = ? AND callback_status = "
		     "'retrying' AND callback_occurrence = ?",
		     &p, &n);
	if (rc == 0 && n > 0) {
		p.n = 0;
		snprintf(note, sizeof(note), "retries cancelled (%s)",
			 retry_id);
		db_params_str(&p, origin);
		db_params_str(&p, "callback");
		db_params_str(&p, "failed");
		db_params_str(&p, actor);
		db_params_int(&p, 0);
		db_params_int(&p, 0);
		db_params_int(&p, now);
		db_params_str(&p, note);
		rc = db_exec(conn,
			     SQL_TASK_LOG_INSERT_PREFIX SQL_TASK_LOG_INSERT_ROW,
			     &p, NULL);
	}
	db_params_free(&p);
	return rc;
}

static int
change_run(struct db_conn *conn, struct db_job *job)
{
	struct change *c = (struct change *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 8);
	if (c->phase == 0) {
		db_rows_free(&c->rows);
		db_params_str(&p, c->id);
		rc = db_query(conn,
			      "SELECT " SQL_TASK_COLS_INDEX
			      ", status, cron, timezone, start_at, end_at "
			      "FROM tasks WHERE id = ?",
			      &p, &c->rows);
		db_params_free(&p);
		return rc;
	}
	if (db_begin(conn) < 0)
		goto fail;
	if (c->op == OP_CANCEL) {
		db_params_int(&p, c->now);
		db_params_str(&p, c->id);
		if (db_exec(conn, SQL_TASK_CANCEL, &p, &c->affected) < 0)
			goto fail;
	} else if (c->new_cron != NULL) {
		db_params_str(&p, c->new_cron);
		db_params_str(&p, c->new_tz);
		db_params_int(&p, c->new_due);
		db_params_int(&p, c->now);
		db_params_str(&p, c->id);
		if (db_exec(conn, SQL_TASK_RESCHEDULE_CRON, &p, &c->affected) <
		    0)
			goto fail;
	} else {
		db_params_int(&p, c->new_due);
		db_params_int(&p, c->now);
		db_params_str(&p, c->id);
		if (db_exec(conn, SQL_TASK_RESCHEDULE, &p, &c->affected) < 0)
			goto fail;
	}
	if (c->affected > 0) {
		char note[255];

		p.n = 0;
		if (c->new_cron != NULL)
			snprintf(note, sizeof(note),
				 "cron '%s' %s, due_at %lld", c->new_cron,
				 c->new_tz, (long long)c->new_due);
		else
			snprintf(note, sizeof(note), "due_at %lld",
				 (long long)c->new_due);
		bind_log(&p, c, c->op == OP_CANCEL ? "cancelled" : "scheduled",
			 c->op == OP_CANCEL ? "cancel" : note);
		if (db_exec(conn,
			    SQL_TASK_LOG_INSERT_PREFIX SQL_TASK_LOG_INSERT_ROW,
			    &p, NULL) < 0)
			goto fail;
		if (c->op == OP_CANCEL && c->retry_task &&
		    tasks_retry_cancelled(conn, c->id, "api", c->now) < 0)
			goto fail;
	}
	db_params_free(&p);
	if (db_commit(conn) < 0)
		return -1;
	/* Why not, if nothing changed: the status now. */
	if (c->affected == 0) {
		db_params_init(&p, 1);
		db_params_str(&p, c->id);
		db_rows_free(&c->rows);
		rc = db_query(conn, SQL_TASK_STATUS, &p, &c->rows);
		db_params_free(&p);
		return rc;
	}
	return 0;
fail:
	db_params_free(&p);
	db_rollback(conn);
	return -1;
}

static void change_done_cb(struct db_job *job, int status, const char *err);
static int reschedule_in_redis(struct change *c, redis_reply_fn cb);

static void
reply_state(struct change *c, const char *status, int64_t due)
{
	http_reply_json(c->req, 200,
			json_pack("{s:s, s:s, s:I}", "id", c->id, "status",
				  status, "due_at", (json_int_t)due));
}

static void
reply_not_changeable(struct change *c, const char *status)
{
	if (c->op == OP_CANCEL && !strcmp(status, "cancelled"))
		reply_state(c, "cancelled", 0);
	else
		http_reply_error(c->req, 409, "conflict", "status",
				 "task '%s' is %s: it can no longer be %s",
				 c->id, status,
				 c->op == OP_CANCEL ? "cancelled"
						    : "rescheduled");
}

/*
 * Beyond the horizon plus the manager's index margin no indexer writes a
 * task (the manager's own window, the workers' loader and rebuilds, a
 * restore: each reads at most a horizon ahead of its clock), and a minute
 * more covers the clocks of the hosts and a read under way. A tombstone
 * there would only take Redis memory until an hour after the due time
 * (a month ahead: a month), and a cancel would wait for Redis for
 * nothing.
 */
int64_t
tasks_out_of_reach(const struct manager *mg, int64_t now)
{
	return now + mg->horizon_ms + mg->index_margin_ms + 60000;
}

void
tasks_uncancel(struct manager *mg, int slot, const char *id, int64_t score)
{
	struct slot_eval ev;

	slot_eval_init(&ev, SCRIPT_UNCANCEL, slot, "dc");
	redis_args_addstr(&ev.a, id);
	redis_args_addint(&ev.a, score);
	redis_eval_args(mg->redis, NULL, NULL, &ev.a);
	slot_eval_free(&ev);
}

static void
uncancel(struct change *c)
{
	if (c->far)
		return;
	tasks_uncancel(c->mg, c->slot, c->id, c->removed_score);
	ingest_wake(c->mg, c->slot);
}

/* After the DB write. */
static void
written(struct change *c, int status, const char *err)
{
	char ktask[RKEY_MAX], katt[RKEY_MAX];

	if (status < 0) {
		if (c->op == OP_CANCEL)
			uncancel(c);
		http_reply_error(c->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
		return;
	}
	if (c->affected == 0) {
		const char *st = c->rows.nrows
					 ? db_rows_get(&c->rows, 0, 0, NULL)
					 : "deleted";

		if (c->op == OP_CANCEL && strcmp(st, "cancelled") != 0)
			uncancel(c);
		reply_not_changeable(c, st);
		return;
	}
	if (c->op == OP_CANCEL && !c->far) {
		rkey_task(ktask, sizeof(ktask), c->slot);
		rkey_attempt(katt, sizeof(katt), c->slot);
		redis_commandl(c->mg->redis, NULL, NULL, "HDEL", ktask, c->id,
			       NULL);
		redis_commandl(c->mg->redis, NULL, NULL, "HDEL", katt, c->id,
			       NULL);
	}
	if (c->op == OP_CANCEL) {
		log_info("task cancelled", "id=%s%s recurring=%d", c->id,
			 c->trace, c->recurring);
		if (c->recurring)
			http_reply_json(c->req, 200,
					json_pack("{s:s, s:s, s:b}", "id",
						  c->id, "status", "cancelled",
						  "occurrence_in_flight",
						  c->occ_in_flight));
		else
			reply_state(c, "cancelled", 0);
	} else {
		/* Again, now that the DB holds the new time: a slot rebuild
		 * that ran in between read the old one and may have dropped
		 * our first write. In flight or cancelled by now: no-op. */
		reschedule_in_redis(c, NULL);
		log_info("task rescheduled", "id=%s%s due_at=%lld", c->id,
			 c->trace, (long long)c->new_due);
		if (c->new_due <
		    c->now + cfg_int(c->mg->cfg, CFG_WORKER_LOOKAHEAD_MS))
			ingest_wake(c->mg, c->slot);
		reply_state(c, "scheduled", c->new_due);
	}
}

static int
reschedule_in_redis(struct change *c, redis_reply_fn cb)
{
	struct slot_eval ev;
	int rc;

	slot_eval_init(&ev, SCRIPT_RESCHEDULE, c->slot, "dtickbvh");
	redis_args_addstr(&ev.a, c->id);
	redis_args_addint(&ev.a, c->new_due);
	redis_args_addstr(&ev.a, c->payload);
	redis_args_addint(&ev.a, clock_now_ms() + c->mg->bucket_near_ms);
	redis_args_addint(&ev.a, c->mg->bucket_ms);
	redis_args_addint(&ev.a, c->old_due);
	redis_args_addstr(&ev.a, c->topic);
	rc = redis_eval_args(c->mg->redis, cb, cb ? c : NULL, &ev.a);
	slot_eval_free(&ev);
	return rc;
}

static void
redis_decided_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct change *c = arg;

	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
		http_reply_error(c->req, 503, "unavailable", NULL,
				 "redis unavailable: cannot decide against "
				 "a concurrent claim; retry");
		change_free(c);
		return;
	}
	/* A recurring task is cancelled even while an occurrence is being
	 * published: that one completes, no further one is scheduled. */
	if (reply->integer == -1 && c->op == OP_CANCEL && c->recurring) {
		c->occ_in_flight = 1;
		c->phase = 1;
		db_pool_submit(c->mg->db, &c->job);
		return;
	}
	if (reply->integer == -1) {
		reply_not_changeable(c, "firing");
		change_free(c);
		return;
	}
	if (reply->integer == -2) {
		reply_not_changeable(c, "cancelled");
		change_free(c);
		return;
	}
	if (c->op == OP_CANCEL)
		c->removed_score = reply->integer;
	c->phase = 1;
	db_pool_submit(c->mg->db, &c->job);
}

/*
 * PATCH with cron goes to recurring tasks only, due_at/delay_ms to one-shot
 * ones. A new expression takes effect from now (or start_at): new_due is
 * its first occurrence. Replies and returns -1 when refused.
 */
static int
recurring_due(struct change *c)
{
	const char *zone = db_rows_get(&c->rows, 0, PC__COUNT + 2, NULL);
	int64_t start = db_rows_int(&c->rows, 0, PC__COUNT + 3);
	int64_t end = db_rows_int(&c->rows, 0, PC__COUNT + 4);
	char err[256];

	if (c->new_cron == NULL && c->recurring) {
		http_reply_error(c->req, 400, "invalid_value", "cron",
				 "task '%s' is recurring: PATCH its cron "
				 "(and timezone), not due_at/delay_ms",
				 c->id);
		return -1;
	}
	if (c->new_cron == NULL)
		return 0;
	if (!c->recurring) {
		http_reply_error(c->req, 400, "invalid_value", "cron",
				 "task '%s' is not recurring", c->id);
		return -1;
	}
	if (c->new_tz == NULL)
		c->new_tz = xstrdup(zone ? zone : "UTC");
	c->new_due = task_cron_next(
		c->new_cron, tz_get(c->new_tz, err, sizeof(err)),
		(start > c->now ? start : c->now) - 1, end, err, sizeof(err));
	if (c->new_due < 0) {
		http_reply_error(c->req, 400, "invalid_value", "cron", "%s",
				 c->new_due == -1 ? "the expression has no "
						    "occurrence before end_at"
						  : err);
		return -1;
	}
	return 0;
}

static void
change_done_cb(struct db_job *job, int status, const char *err)
{
	struct change *c = (struct change *)job;
	struct manager *mg = c->mg;
	const char *st;
	int rc;

	if (c->phase == 1) {
		written(c, status, err);
		change_free(c);
		return;
	}
	if (status < 0) {
		http_reply_error(c->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
		change_free(c);
		return;
	}
	if (c->rows.nrows == 0) {
		http_reply_error(c->req, 404, "not_found", "id", "no task '%s'",
				 c->id);
		change_free(c);
		return;
	}
	st = db_rows_get(&c->rows, 0, PC__COUNT, NULL);
	if (strcmp(st, "scheduled") != 0) {
		reply_not_changeable(c, st);
		change_free(c);
		return;
	}
	c->recurring = db_rows_get(&c->rows, 0, PC__COUNT + 1, NULL) != NULL;
	{
		const char *hs = db_rows_get(&c->rows, 0, PC_HEADERS, NULL);
		json_t *hj = hs != NULL ? json_loads(hs, 0, NULL) : NULL;

		trace_kv(c->trace, sizeof(c->trace), hj);
		json_decref(hj);
	}
	if (c->op == OP_RESCHEDULE && recurring_due(c) < 0) {
		change_free(c);
		return;
	}
	c->slot = slot_of(c->id, strlen(c->id), mg->nslots);
	c->old_due = db_rows_int(&c->rows, 0, PC_DUE_AT);
	snprintf(c->topic, sizeof(c->topic), "%s",
		 db_rows_get(&c->rows, 0, PC_TOPIC, NULL));
	c->retry_task =
		!strcmp(c->topic, cfg_str(mg->cfg, CFG_NOTIFIER_RETRY_TOPIC));
	if (c->op == OP_CANCEL && !c->recurring &&
	    c->old_due >= tasks_out_of_reach(mg, c->now)) {
		/* In no index: nothing to decide against, no tombstone. */
		c->far = 1;
		c->phase = 1;
		db_pool_submit(mg->db, &c->job);
		return;
	}
	if (c->op == OP_CANCEL) {
		struct slot_eval ev;

		slot_eval_init(&ev,
			       c->recurring ? SCRIPT_CANCEL_SERIES
					    : SCRIPT_CANCEL,
			       c->slot, "dich");
		redis_args_addstr(&ev.a, c->id);
		redis_args_addint(&ev.a, c->now);
		redis_args_addint(&ev.a, c->old_due);
		redis_args_addstr(&ev.a, c->topic);
		rc = redis_eval_args(mg->redis, redis_decided_cb, c, &ev.a);
		slot_eval_free(&ev);
	} else {
		struct task t;
		size_t plen;

		/* Indexed again only if the new time is within reach of
		 * the loader's horizon (with the manager's usual margin). */
		payload_row_task(&c->rows, 0, &t);
		t.due_at = c->new_due;
		t.attempt = 0;
		c->payload = c->new_due < c->now + mg->horizon_ms +
						     mg->index_margin_ms
				     ? payload_encode(&t, &plen)
				     : xstrdup("");
		payload_row_clear(&t);
		rc = reschedule_in_redis(c, redis_decided_cb);
	}
	if (rc < 0) {
		http_reply_error(c->req, 503, "unavailable", NULL,
				 "redis unavailable: cannot decide against "
				 "a concurrent claim; retry");
		change_free(c);
	}
}

static struct change *
change_new(struct manager *mg, struct evhttp_request *req, enum op op,
	   const char *id, size_t idlen)
{
	struct change *c;

	if (!api_check_id(req, id, idlen))
		return NULL;
	c = xcalloc(1, sizeof(*c));
	c->mg = mg;
	c->req = req;
	c->op = op;
	c->now = clock_now_ms();
	memcpy(c->id, id, idlen);
	c->job.run = change_run;
	c->job.done_cb = change_done_cb;
	return c;
}

void
tasks_cancel(struct manager *mg, struct evhttp_request *req, const char *id,
	     size_t idlen)
{
	struct change *c = change_new(mg, req, OP_CANCEL, id, idlen);

	if (c == NULL)
		return;
	mg->inflight++;
	db_pool_submit(mg->db, &c->job);
}

/* PATCH {"cron": "...", "timezone": "..."} of a recurring task. */
static void
reschedule_cron(struct manager *mg, struct evhttp_request *req, const char *id,
		size_t idlen, json_t *in)
{
	const json_t *cron = json_object_get(in, "cron");
	const json_t *zone = json_object_get(in, "timezone");
	struct cron_error ce;
	struct cron parsed;
	struct change *c;
	char err[256];

	if (json_object_size(in) != (zone != NULL ? 2u : 1u)) {
		http_reply_error(req, 400, "invalid_value", "cron",
				 "give cron (and optionally timezone) alone");
		return;
	}
	if (!json_is_string(cron) || (zone != NULL && !json_is_string(zone))) {
		http_reply_error(req, 400, "invalid_type",
				 json_is_string(cron) ? "timezone" : "cron",
				 "cron and timezone must be strings");
		return;
	}
	if (cron_parse(json_string_value(cron), &parsed, &ce) < 0) {
		http_reply_error(req, 400, "invalid_value", "cron", "cron %s",
				 ce.message);
		return;
	}
	if (zone != NULL &&
	    tz_get(json_string_value(zone), err, sizeof(err)) == NULL) {
		http_reply_error(req, 400, "invalid_value", "timezone", "%s",
				 err);
		return;
	}
	c = change_new(mg, req, OP_RESCHEDULE, id, idlen);
	if (c == NULL)
		return;
	c->new_cron = xstrdup(json_string_value(cron));
	c->new_tz = zone ? xstrdup(json_string_value(zone)) : NULL;
	mg->inflight++;
	db_pool_submit(mg->db, &c->job);
}

static const char *const reschedule_fields[] = {"due_at", "delay_ms", "cron",
						"timezone", NULL};

void
tasks_reschedule(struct manager *mg, struct evhttp_request *req, const char *id,
		 size_t idlen)
{
	json_t *in, *due, *delay;
	json_error_t jerr;
	struct change *c;
	size_t len;
	char *body = http_body(req, &len);
	int64_t now = manager_due_now(mg), v;

	in = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	xfree(body);
	if (in == NULL) {
		http_reply_error(req, 400, "invalid_json", NULL,
				 "malformed JSON at line %d column %d: %s",
				 jerr.line, jerr.column, jerr.text);
		return;
	}
	if (!json_is_object(in)) {
		json_decref(in);
		http_reply_error(
			req, 400, "invalid_json", NULL,
			"expected {\"due_at\":ms} or {\"delay_ms\":n}");
		return;
	}
	/* A misspelt due_at must not be ignored. */
	if (!api_fields_known(req, in, reschedule_fields)) {
		json_decref(in);
		return;
	}
	if (json_object_get(in, "cron") != NULL) {
		reschedule_cron(mg, req, id, idlen, in);
		json_decref(in);
		return;
	}
	if (json_object_get(in, "timezone") != NULL) {
		json_decref(in);
		http_reply_error(req, 400, "missing_field", "cron",
				 "timezone goes with cron: PATCH "
				 "{\"cron\":\"...\",\"timezone\":\"...\"} "
				 "(the expression again, to keep it)");
		return;
	}
	due = json_object_get(in, "due_at");
	delay = json_object_get(in, "delay_ms");
	if ((due == NULL) == (delay == NULL) || json_object_size(in) != 1) {
		json_decref(in);
		http_reply_error(req, 400, "invalid_value", "due_at",
				 "give exactly one of due_at and delay_ms");
		return;
	}
	if (!json_is_integer(due ? due : delay)) {
		json_decref(in);
		http_reply_error(
			req, 400, "invalid_type", due ? "due_at" : "delay_ms",
			"%s must be an integer", due ? "due_at" : "delay_ms");
		return;
	}
	v = json_integer_value(due ? due : delay);
	json_decref(in);
	if (v < 0 || v > (due ? now : 0) + mg->limits.max_delay_ms) {
		http_reply_error(
			req, 400, "invalid_value", due ? "due_at" : "delay_ms",
			"%s must be 0 to %s%lld ms",
			due ? "due_at" : "delay_ms", due ? "now + " : "",
			(long long)mg->limits.max_delay_ms);
		return;
	}
	c = change_new(mg, req, OP_RESCHEDULE, id, idlen);
	if (c == NULL)
		return;
	c->new_due = due ? v : now + v;
	mg->inflight++;
	db_pool_submit(mg->db, &c->job);
}

/* List ------------------------------------------------------------------ */

/*
 * Only a topic with a status is served by an index in due order (by_topic);
 * a list by topic alone, by status alone or of everything sorts every
 * matching row (11 s for a topic of a million tasks). So that read-role
 * clients cannot take the database from submissions, a list statement is
 * cut at LIST_DB_TIMEOUT_S (503: narrow it) and lists use at most half of
 * the pool at once (503 busy beyond).
 */
#define LIST_DB_TIMEOUT_S 5
#define LIST_STR_(x) #x
#define LIST_STR(x) LIST_STR_(x)
#define LIST_SQL_HEAD                                   \
	"SET STATEMENT max_statement_time = " LIST_STR( \
		LIST_DB_TIMEOUT_S) " FOR "

struct list_job {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	char topic[TASK_TOPIC_MAX + 1];
	char status[16];
	int64_t from, to, after_due;
	char after_id[TASK_ID_MAX + 1];
	int limit;
	unsigned int db_errno;
	struct db_rows rows;
};

static int
list_run(struct db_conn *c, struct db_job *job)
{
	static const char *const sql[4] = {
		LIST_SQL_HEAD SQL_TASK_LIST_COLS SQL_TASK_LIST_ORDER,
		LIST_SQL_HEAD SQL_TASK_LIST_COLS
		"AND topic = ?" SQL_TASK_LIST_ORDER,
		LIST_SQL_HEAD SQL_TASK_LIST_COLS
		"AND status = ?" SQL_TASK_LIST_ORDER,
		LIST_SQL_HEAD SQL_TASK_LIST_COLS
		"AND topic = ? AND status = ?" SQL_TASK_LIST_ORDER};
	struct list_job *l = (struct list_job *)job;
	struct db_params p;
	int v = (l->topic[0] ? 1 : 0) | (l->status[0] ? 2 : 0), rc;

	db_params_init(&p, 8);
	db_params_int(&p, l->after_due);
	db_params_int(&p, l->after_due);
	db_params_str(&p, l->after_id);
	db_params_int(&p, l->from);
	db_params_int(&p, l->to);
	if (l->topic[0])
		db_params_str(&p, l->topic);
	if (l->status[0])
		db_params_str(&p, l->status);
	db_params_int(&p, l->limit + 1);
	rc = db_query(c, sql[v], &p, &l->rows);
	db_params_free(&p);
	if (rc < 0)
		l->db_errno = db_conn_errno(c);
	return rc;
}

static void
list_done_cb(struct db_job *job, int status, const char *err)
{
	struct list_job *l = (struct list_job *)job;
	json_t *tasks, *out;
	size_t n = l->rows.nrows;

	l->mg->listing--;
	if (status < 0 && l->db_errno == DB_ER_STATEMENT_TIMEOUT) {
		http_reply_error(l->req, 503, "unavailable", NULL,
				 "listing took longer than %d s: give a topic "
				 "with a status, or a narrower due_from and "
				 "due_to",
				 LIST_DB_TIMEOUT_S);
	} else if (status < 0) {
		http_reply_error(l->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
	} else {
		tasks = json_array();
		for (size_t i = 0; i < n && i < (size_t)l->limit; i++)
			json_array_append_new(
				tasks,
				json_pack(
					"{s:s, s:s, s:s, s:I, s:I, s:I, s:I}",
					"id", db_rows_get(&l->rows, i, 0, NULL),
					"topic",
					db_rows_get(&l->rows, i, 1, NULL),
					"status",
					db_rows_get(&l->rows, i, 2, NULL),
					"due_at",
					(json_int_t)db_rows_int(&l->rows, i, 3),
					"attempt",
					(json_int_t)db_rows_int(&l->rows, i, 4),
					"created_at",
					(json_int_t)db_rows_int(&l->rows, i, 5),
					"updated_at",
					(json_int_t)db_rows_int(&l->rows, i,
								6)));
		out = json_pack("{s:o}", "tasks", tasks);
		if (n > (size_t)l->limit) {
			const json_t *last =
				json_array_get(tasks, (size_t)l->limit - 1);
			char *cur = xasprintf(
				"%lld:%s",
				(long long)json_integer_value(
					json_object_get(last, "due_at")),
				json_string_value(json_object_get(last, "id")));

			json_object_set_new(out, "next_cursor",
					    json_string(cur));
			xfree(cur);
		} else {
			json_object_set_new(out, "next_cursor", json_null());
		}
		http_reply_json(l->req, 200, out);
	}
	db_rows_free(&l->rows);
	l->mg->inflight--;
	xfree(l);
}

static int
query_int(const char *s, int64_t *out)
{
	char *end;

	if (s == NULL || *s == '\0')
		return -1;
	*out = strtoll(s, &end, 10);
	return *end == '\0' ? 0 : -1;
}

static int
max_listing(const struct manager *mg)
{
	int n = (int)cfg_int(mg->cfg, CFG_DB_POOL_SIZE) / 2;

	return n > 0 ? n : 1;
}

static const char *const list_params[] = {
	"topic", "status", "due_from", "due_to", "limit", "cursor", NULL};

void
tasks_list(struct manager *mg, struct evhttp_request *req)
{
	const char *q =
		evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	struct list_job *l = xcalloc(1, sizeof(*l));
	struct evkeyvalq kv;
	const char *v;
	enum task_status st;
	int64_t n;

	l->mg = mg;
	l->req = req;
	l->from = INT64_MIN / 2;
	l->to = INT64_MAX / 2;
	l->after_due = INT64_MIN / 2;
	l->limit = 100;
	TAILQ_INIT(&kv);
	if (q != NULL && evhttp_parse_query_str(q, &kv) != 0) {
		http_reply_error(req, 400, "invalid_value", NULL,
				 "malformed query string");
		goto bad;
	}
	if (http_query_known(req, list_params) < 0)
		goto bad;
	/* Decoded values are C strings: an encoded NUL would cut a filter
	 * short (topic=a%00b listing topic a) instead of being refused. */
	if (q != NULL && strstr(q, "%00") != NULL) {
		http_reply_error(req, 400, "invalid_value", NULL,
				 "query parameters must not contain NUL");
		goto bad;
	}
	if ((v = evhttp_find_header(&kv, "topic")) != NULL) {
		if (!task_topic_valid(v, strlen(v))) {
			http_reply_error(req, 400, "invalid_value", "topic",
					 "not a valid topic");
			goto bad;
		}
		snprintf(l->topic, sizeof(l->topic), "%s", v);
	}
	if ((v = evhttp_find_header(&kv, "status")) != NULL) {
		if (task_status_parse(v, &st) < 0) {
			http_reply_error(req, 400, "invalid_value", "status",
					 "status must be scheduled, firing, "
					 "delivered, cancelled or expired");
			goto bad;
		}
		snprintf(l->status, sizeof(l->status), "%s", v);
	}
	if ((v = evhttp_find_header(&kv, "limit")) != NULL) {
		if (query_int(v, &n) < 0 || n < 1 || n > 1000) {
			http_reply_error(req, 400, "invalid_value", "limit",
					 "limit must be 1..1000");
			goto bad;
		}
		l->limit = (int)n;
	}
	if ((v = evhttp_find_header(&kv, "due_from")) != NULL &&
	    query_int(v, &l->from) < 0) {
		http_reply_error(req, 400, "invalid_value", "due_from",
				 "due_from must be ms since the epoch");
		goto bad;
	}
	if ((v = evhttp_find_header(&kv, "due_to")) != NULL &&
	    query_int(v, &l->to) < 0) {
		http_reply_error(req, 400, "invalid_value", "due_to",
				 "due_to must be ms since the epoch");
		goto bad;
	}
	if ((v = evhttp_find_header(&kv, "cursor")) != NULL) {
		const char *colon = strchr(v, ':');
		char num[32];

		if (colon == NULL || colon - v >= (long)sizeof(num) ||
		    !task_id_valid(colon + 1, strlen(colon + 1))) {
			http_reply_error(req, 400, "invalid_value", "cursor",
					 "not a cursor from a previous page");
			goto bad;
		}
		snprintf(num, sizeof(num), "%.*s", (int)(colon - v), v);
		if (query_int(num, &l->after_due) < 0) {
			http_reply_error(req, 400, "invalid_value", "cursor",
					 "not a cursor from a previous page");
			goto bad;
		}
		snprintf(l->after_id, sizeof(l->after_id), "%s", colon + 1);
	}
	evhttp_clear_headers(&kv);
	if (mg->listing >= max_listing(mg)) {
		http_reply_error(req, 503, "busy", NULL,
				 "%d lists are already running (half of "
				 "db.pool_size); try again",
				 mg->listing);
		xfree(l);
		return;
	}
	l->job.run = list_run;
	l->job.done_cb = list_done_cb;
	mg->listing++;
	mg->inflight++;
	db_pool_submit(mg->db, &l->job);
	return;
bad:
	evhttp_clear_headers(&kv);
	xfree(l);
}
