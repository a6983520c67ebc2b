#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "cfg.h"
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
#include "utf8.h"
#include "xmalloc.h"

/*
 * Restore operations (mykit-delay's reStore / reStoreJob): re-index tasks
 * from the DB into Redis. Workers rebuild a lost index by themselves; these
 * are the operator's tools for everything else: a Redis restored from an
 * old snapshot, tasks given up as `expired` that should fire after all.
 *
 * POST /v1/admin/restore {"slot":n?, "expired":bool} starts a job and
 * answers 202 with its id; GET /v1/admin/restore/{job} shows its progress.
 * With "expired": true, expired tasks go back to scheduled (their ttl
 * cleared, a state-log row each) before the index is rebuilt.
 * POST /v1/tasks/{id}/restore re-indexes one task.
 * Tasks in flight at that moment may be published twice (same prophet-id).
 */

#define RESTORE_PAGE 2000
#define RESTORE_KEEP 16

struct restore_job {
	int id;
	int expired;
	int first_slot, last_slot; /* inclusive */
	int slot;		   /* current */
	int64_t end_ms;
	int64_t after_due;
	char after_id[TASK_ID_MAX + 1];
	size_t indexed;
	size_t revived;
	int done;
	int dropped; /* pushed out of jobs[] while running: freed when done */
	char error[256];
	int64_t started_ms;
	int64_t finished_ms;
	struct manager *mg;
};

static struct restore_job *jobs[RESTORE_KEEP];
static int next_job_id = 1;

/* One step, with a copy of the job's cursor: the pool thread never
 * reads r, which the loop keeps (and GET /v1/admin/restore shows). */
struct page_job {
	struct db_job job;
	struct restore_job *r;
	int revive; /* first step of a slot with expired=true */
	int slot;
	int64_t end_ms;
	int64_t after_due;
	char after_id[TASK_ID_MAX + 1];
	unsigned long long revived;
	struct db_rows rows;
};

static void restore_step(struct restore_job *r, int revive);

static json_t *
job_json(const struct restore_job *r)
{
	json_t *j = json_pack(
		"{s:i, s:b, s:b, s:i, s:i, s:I, s:I, s:I}", "job", r->id,
		"done", r->done, "expired", r->expired, "slots_total",
		r->last_slot - r->first_slot + 1, "slots_done",
		r->slot - r->first_slot, "tasks_indexed",
		(json_int_t)r->indexed, "tasks_revived", (json_int_t)r->revived,
		"elapsed_ms",
		(json_int_t)((r->done ? r->finished_ms : clock_mono_ms()) -
			     r->started_ms));

	json_object_set_new(j, "error",
			    r->error[0] ? utf8_json_str(r->error)
					: json_null());
	return j;
}

static void
restore_finish(struct restore_job *r, const char *err)
{
	r->done = 1;
	r->finished_ms = clock_mono_ms();
	if (err != NULL) {
		snprintf(r->error, sizeof(r->error), "%s", err);
		log_warn("restore failed", "job=%d slot=%d error=\"%s\"", r->id,
			 r->slot, err);
	} else {
		r->slot = r->last_slot + 1;
		log_info("restore complete",
			 "job=%d indexed=%zu revived=%zu duration_ms=%lld",
			 r->id, r->indexed, r->revived,
			 (long long)(r->finished_ms - r->started_ms));
	}
	/* Its callbacks are done with it (each caller returns right after)
	 * and nobody can ask for it any more. */
	if (r->dropped)
		xfree(r);
}

static void
bind_revive(struct db_params *p, struct page_job *pj)
{
	db_params_int(p, clock_now_ms());
	db_params_int(p, pj->slot);
}

static int
page_run(struct db_conn *c, struct db_job *job)
{
	struct page_job *pj = (struct page_job *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 6);
	if (pj->revive) {
		if (db_begin(c) < 0)
			goto fail;
		bind_revive(&p, pj);
		if (db_exec(c, SQL_TASK_LOG_REVIVE, &p, NULL) < 0)
			goto fail;
		p.n = 0;
		bind_revive(&p, pj);
		if (db_exec(c, SQL_TASK_REVIVE, &p, &pj->revived) < 0)
			goto fail;
		if (db_commit(c) < 0)
			goto fail;
		db_params_free(&p);
		return 0;
	}
	db_params_int(&p, pj->slot);
	db_params_int(&p, pj->end_ms);
	db_params_int(&p, pj->after_due);
	db_params_int(&p, pj->after_due);
	db_params_str(&p, pj->after_id);
	db_params_int(&p, RESTORE_PAGE);
	rc = db_query(c, SQL_TASK_SCHEDULED_PAGE, &p, &pj->rows);
	db_params_free(&p);
	return rc;
fail:
	db_rollback(c);
	db_params_free(&p);
	return -1;
}

static void
index_cb(struct redis *rd, redisReply *reply, void *arg)
{
	struct restore_job *r = arg;

	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		restore_finish(r, reply ? reply->str : "redis disconnected");
		return;
	}
	restore_step(r, 0);
}

static void
page_done_cb(struct db_job *job, int status, const char *err)
{
	struct page_job *pj = (struct page_job *)job;
	struct restore_job *r = pj->r;
	struct rindex ix;
	size_t n = pj->rows.nrows;

	if (status < 0) {
		restore_finish(r, err);
		goto out;
	}
	if (pj->revive) {
		r->revived += pj->revived;
		restore_step(r, 0);
		goto out;
	}
	if (n == 0) {
		/* Next slot. */
		r->slot++;
		r->after_due = -1;
		r->after_id[0] = '\0';
		if (r->slot > r->last_slot)
			restore_finish(r, NULL);
		else
			restore_step(r, r->expired);
		goto out;
	}
	rindex_init(&ix, r->slot, r->mg->bucket_ms,
		    clock_now_ms() + r->mg->bucket_near_ms);
	for (size_t i = 0; i < n; i++)
		rindex_add_row(&ix, &pj->rows, i);
	r->indexed += n;
	r->after_due = db_rows_int(&pj->rows, n - 1, PC_DUE_AT);
	snprintf(r->after_id, sizeof(r->after_id), "%s",
		 db_rows_get(&pj->rows, n - 1, PC_ID, NULL));
	if (redis_eval_args(r->mg->redis, index_cb, r, &ix.ev.a) < 0)
		restore_finish(r, "redis unavailable");
	rindex_free(&ix);
out:
	db_rows_free(&pj->rows);
	xfree(pj);
}

static void
restore_step(struct restore_job *r, int revive)
{
	struct page_job *pj = xcalloc(1, sizeof(*pj));

	if (r->after_due < 0 && !revive)
		r->end_ms = clock_now_ms() + r->mg->horizon_ms;
	pj->r = r;
	pj->revive = revive;
	pj->slot = r->slot;
	pj->end_ms = r->end_ms;
	pj->after_due = r->after_due;
	memcpy(pj->after_id, r->after_id, sizeof(pj->after_id));
	pj->job.run = page_run;
	pj->job.done_cb = page_done_cb;
	db_pool_submit(r->mg->db, &pj->job);
}

static struct restore_job *
find_job(int id)
{
	for (int i = 0; i < RESTORE_KEEP; i++)
		if (jobs[i] != NULL && jobs[i]->id == id)
			return jobs[i];
	return NULL;
}

void
restore_start(struct manager *mg, struct evhttp_request *req)
{
	static const char *const names[] = {"slot", "expired", NULL};
	json_t *in, *v;
	int slot = -1, expired = 0;

	if (api_body_object(req, 0, &in) < 0)
		return;
	/* A misspelt member ("slots") would restore every slot. */
	if (!api_fields_known(req, in, names)) {
		json_decref(in);
		return;
	}
	v = json_object_get(in, "slot");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= mg->nslots) {
			json_decref(in);
			http_reply_error(req, 400, "invalid_value", "slot",
					 "slot must be 0..%d", mg->nslots - 1);
			return;
		}
		slot = (int)json_integer_value(v);
	}
	v = json_object_get(in, "expired");
	if (v != NULL && !json_is_boolean(v)) {
		json_decref(in);
		http_reply_error(req, 400, "invalid_type", "expired",
				 "expired must be true or false");
		return;
	}
	expired = json_is_true(v);
	json_decref(in);
	restore_launch(mg, req, slot, expired);
}

void
restore_launch(struct manager *mg, struct evhttp_request *req, int slot,
	       int expired)
{
	struct restore_job *r;
	int keep;

	if (!redis_up(mg->redis)) {
		http_reply_error(req, 503, "unavailable", NULL,
				 "redis is unavailable; workers rebuild the "
				 "index by themselves when it returns");
		return;
	}
	r = xcalloc(1, sizeof(*r));
	r->mg = mg;
	r->id = next_job_id++;
	r->expired = expired;
	r->first_slot = slot < 0 ? 0 : slot;
	r->last_slot = slot < 0 ? mg->nslots - 1 : slot;
	r->slot = r->first_slot;
	r->after_due = -1;
	r->started_ms = clock_mono_ms();
	keep = r->id % RESTORE_KEEP;
	/* The oldest job makes room: freed now if finished, else when it
	 * finishes (never under its callbacks). Restores started faster than
	 * they end used to leak the running ones they pushed out. */
	if (jobs[keep] != NULL && jobs[keep]->done)
		xfree(jobs[keep]);
	else if (jobs[keep] != NULL)
		jobs[keep]->dropped = 1;
	jobs[keep] = r;
	log_info("restore started", "job=%d slots=%d-%d expired=%d", r->id,
		 r->first_slot, r->last_slot, expired);
	restore_step(r, expired);
	http_reply_json(req, 202, job_json(r));
}

void
restore_status(struct manager *mg, struct evhttp_request *req, const char *id)
{
	size_t len = strlen(id);
	struct restore_job *r = NULL;
	long long n;

	/* A job number, digits only: strtol alone took "+1" and " 1", and
	 * 4294967297 became job 1 when cast to int. */
	if (len >= 1 && len <= 10 && id[0] != '0' &&
	    strspn(id, "0123456789") == len) {
		n = strtoll(id, NULL, 10);
		if (n <= INT_MAX)
			r = find_job((int)n);
	}

	if (r == NULL) {
		http_reply_error(req, 404, "not_found", "job",
				 "no restore job %s", id);
		return;
	}
	http_reply_json(req, 200, job_json(r));
}

/* One task ----------------------------------------------------------- */

struct one_job {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	char id[TASK_ID_MAX + 1];
	unsigned long long revived;
	struct db_rows rows;
	struct db_rows status;
};

static int
one_run(struct db_conn *c, struct db_job *job)
{
	struct one_job *o = (struct one_job *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 2);
	db_params_int(&p, clock_now_ms());
	db_params_str(&p, o->id);
	rc = db_begin(c);
	if (rc == 0)
		rc = db_exec(c, SQL_TASK_LOG_REVIVE_ONE, &p, NULL);
	if (rc == 0)
		rc = db_exec(c, SQL_TASK_REVIVE_ONE, &p, &o->revived);
	if (rc == 0)
		rc = db_commit(c);
	else
		db_rollback(c);
	p.n = 0;
	db_params_str(&p, o->id);
	if (rc == 0)
		rc = db_query(c, SQL_TASK_PAYLOAD, &p, &o->rows);
	if (rc == 0 && o->rows.nrows == 0)
		rc = db_query(c, "SELECT status FROM tasks WHERE id = ?", &p,
			      &o->status);
	db_params_free(&p);
	return rc;
}

static void
one_index_cb(struct redis *rd, redisReply *reply, void *arg)
{
	struct one_job *o = arg;

	if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
		http_reply_error(o->req, 503, "unavailable", NULL, "redis: %s",
				 reply ? reply->str : "disconnected");
	else
		http_reply_json(o->req, 200,
				json_pack("{s:s, s:s, s:b, s:b}", "id", o->id,
					  "status", "scheduled", "indexed", 1,
					  "revived", o->revived > 0));
	o->mg->inflight--;
	xfree(o);
}

static void
one_done_cb(struct db_job *job, int status, const char *err)
{
	struct one_job *o = (struct one_job *)job;
	struct manager *mg = o->mg;
	int slot = slot_of(o->id, strlen(o->id), mg->nslots);
	struct rindex ix;

	if (status < 0) {
		http_reply_error(o->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
	} else if (o->rows.nrows == 0 && o->status.nrows == 0) {
		http_reply_error(o->req, 404, "not_found", "id", "no task '%s'",
				 o->id);
	} else if (o->rows.nrows == 0) {
		http_reply_error(o->req, 409, "conflict", "status",
				 "task '%s' is %s: nothing to restore", o->id,
				 db_rows_get(&o->status, 0, 0, NULL));
	} else {
		rindex_init(&ix, slot, mg->bucket_ms,
			    clock_now_ms() + mg->bucket_near_ms);
		rindex_add_row(&ix, &o->rows, 0);
		status = redis_eval_args(mg->redis, one_index_cb, o, &ix.ev.a);
		rindex_free(&ix);
		db_rows_free(&o->rows);
		db_rows_free(&o->status);
		if (status == 0)
			return; /* answered by one_index_cb */
		http_reply_error(o->req, 503, "unavailable", NULL,
				 "redis is unavailable");
	}
	db_rows_free(&o->rows);
	db_rows_free(&o->status);
	mg->inflight--;
	xfree(o);
}

void
restore_one(struct manager *mg, struct evhttp_request *req, const char *id,
	    size_t idlen)
{
	struct one_job *o;

	if (!api_check_id(req, id, idlen))
		return;
	o = xcalloc(1, sizeof(*o));
	o->mg = mg;
	o->req = req;
	memcpy(o->id, id, idlen);
	o->job.run = one_run;
	o->job.done_cb = one_done_cb;
	mg->inflight++;
	db_pool_submit(mg->db, &o->job);
}

struct clear_call {
	struct manager *mg;
	struct evhttp_request *req;
	int pending;
	int failed;
};

static void
clear_put(struct clear_call *cc)
{
	if (--cc->pending > 0)
		return;
	if (cc->failed)
		http_reply_error(cc->req, 503, "unavailable", NULL,
				 "redis failed while clearing");
	else
		http_reply_json(cc->req, 200, json_pack("{s:s}", "id", "all"));
	cc->mg->inflight--;
	xfree(cc);
}

static void
clear_cb(struct redis *rd, redisReply *reply, void *arg)
{
	struct clear_call *cc = arg;

	if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
		cc->failed = 1;
	clear_put(cc);
}

/* mykit-delay's clearAll empties its Redis queue. Here Redis is only an
 * index: dropping it (markers included) makes every owner rebuild its
 * slots from the DB. Nothing stored in the DB is touched. */
void
restore_clear_all(struct manager *mg, struct evhttp_request *req)
{
	struct clear_call *cc = xcalloc(1, sizeof(*cc));

	cc->mg = mg;
	cc->req = req;
	cc->pending = 1;
	mg->inflight++;
	log_warn("clearAll: dropping the redis index of every slot", "");
	for (int i = 0; i < mg->nslots; i++) {
		char kdue[RKEY_MAX], ktask[RKEY_MAX], katt[RKEY_MAX],
			kmark[RKEY_MAX];

		rkey_due(kdue, sizeof(kdue), i);
		rkey_task(ktask, sizeof(ktask), i);
		rkey_attempt(katt, sizeof(katt), i);
		rkey_marker(kmark, sizeof(kmark), i);
		cc->pending++;
		if (redis_commandl(mg->redis, clear_cb, cc, "DEL", kdue, ktask,
				   katt, kmark, NULL) < 0) {
			cc->pending--;
			cc->failed = 1;
		}
	}
	clear_put(cc); /* ours */
}
