#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "worker.h"
#include "xmalloc.h"

/*
 * DB mode: while Redis is unavailable each owner fires its slots straight
 * from the DB. A claim is one transaction: lock the slot's fence row and
 * check our epoch, take due tasks with FOR UPDATE SKIP LOCKED, move them
 * to `firing` with a lease and a state-log row. They are then published
 * like any other task and marked delivered from the delivery report.
 *
 * The DB lease reaper (every mode) puts `firing` tasks whose lease ran out
 * and that nobody here holds back to `scheduled`: a publisher that died
 * in DB mode is replaced by the slot's next owner.
 */

#define DBFIRE_TICK_MS 50

struct dbclaim {
	struct db_job job;
	struct worker *w;
	int slot;
	int64_t epoch;
	int64_t now;
	int limit;
	int fenced;
	struct db_rows rows;
	char owner[128];
	int64_t lease_ms;
};

static void
bind_firing_log(struct db_params *p, size_t i, void *arg)
{
	struct dbclaim *c = arg;

	db_params_str(p, db_rows_get(&c->rows, i, 0, NULL));
	db_params_str(p, "scheduled");
	db_params_str(p, "firing");
	db_params_str(p, c->owner);
	db_params_int(p, c->epoch);
	db_params_int(p, db_rows_int(&c->rows, i, 7) + 1);
	db_params_int(p, c->now);
	db_params_str(p, "db mode");
}

static int
dbclaim_run(struct db_conn *conn, struct db_job *job)
{
	struct dbclaim *c = (struct dbclaim *)job;
	struct db_params p;
	struct db_rows ep;

	if (db_begin(conn) < 0)
		return -1;
	db_params_init(&p, 8);
	db_params_int(&p, c->slot);
	db_params_int(&p, c->epoch);
	db_params_int(&p, c->now);
	if (db_exec(conn, SQL_SLOT_FENCE, &p, NULL) < 0)
		goto fail;
	p.n = 0;
	db_params_int(&p, c->slot);
	if (db_query(conn, SQL_SLOT_EPOCH_LOCK, &p, &ep) < 0)
		goto fail;
	c->fenced = ep.nrows == 1 && db_rows_int(&ep, 0, 0) > c->epoch;
	db_rows_free(&ep);
	if (c->fenced) {
		db_params_free(&p);
		db_rollback(conn);
		return 0;
	}
	p.n = 0;
	db_params_int(&p, c->slot);
	db_params_int(&p, c->now);
	db_params_int(&p, c->limit);
	if (db_query(conn, SQL_TASK_DUE_LOCK, &p, &c->rows) < 0)
		goto fail;
	for (size_t i = 0; i < c->rows.nrows; i++) {
		p.n = 0;
		db_params_str(&p, c->owner);
		db_params_int(&p, c->epoch);
		db_params_int(&p, c->now + c->lease_ms);
		db_params_int(&p, c->now);
		db_params_int(&p, c->now);
		db_params_str(&p, db_rows_get(&c->rows, i, 0, NULL));
		if (db_exec(conn, SQL_TASK_MARK_FIRING, &p, NULL) < 0)
			goto fail;
	}
	if (c->rows.nrows > 0 &&
	    db_exec_rows(conn, SQL_TASK_LOG_INSERT_PREFIX,
			 SQL_TASK_LOG_INSERT_ROW, c->rows.nrows,
			 SQL_TASK_LOG_INSERT_NCOLS, bind_firing_log, c,
			 NULL) < 0)
		goto fail;
	db_params_free(&p);
	if (db_commit(conn) < 0) {
		/* Not claimed (or not known to be: a commit cut off may have
		 * gone through, and then the rows' leases bring them back):
		 * publishing them would race their next claim. */
		db_rows_free(&c->rows);
		return -1;
	}
	return 0;
fail:
	db_params_free(&p);
	db_rows_free(&c->rows);
	db_rollback(conn);
	return -1;
}

static void dbclaim_slot(struct worker *w, int slot);

void
dbmode_marked(struct worker *w, const struct wtask *t)
{
	struct wslot *s = &w->slots[t->slot];

	if (s->dbclaiming)
		hmap_set_add(&s->marked_in_claim, t->id);
}

static void
dbclaim_done_cb(struct db_job *job, int status, const char *err)
{
	struct dbclaim *c = (struct dbclaim *)job;
	struct worker *w = c->w;
	struct wslot *s = &w->slots[c->slot];
	size_t n = c->rows.nrows;

	s->dbclaiming = 0;
	if (status < 0) {
		log_warn("db mode claim failed", "slot=%d error=\"%s\"",
			 c->slot, err);
	} else if (c->fenced) {
		metric_inc(w->m.fenced);
		log_warn("db mode claim fenced: a newer epoch owns the slot",
			 "slot=%d epoch=%lld", c->slot, (long long)c->epoch);
	}
	for (size_t i = 0; i < n; i++) {
		const char *id = db_rows_get(&c->rows, i, 0, NULL);
		struct wtask *t;
		struct task pt;

		/* Claimed through Redis before the switch and still in
		 * flight here: its delivery report records it. Or recorded
		 * already: its record waited for this claim's locks, then
		 * made the row delivered, and its answer overtook ours on
		 * the way to the loop (publishing it again was a duplicate,
		 * with kafka.exactly_once too). */
		if (hmap_get(w->tasks, id) != NULL ||
		    (s->marked_in_claim != NULL &&
		     hmap_get(s->marked_in_claim, id) != NULL))
			continue;
		t = xcalloc(1, sizeof(*t));
		snprintf(t->id, sizeof(t->id), "%s", id);
		t->slot = c->slot;
		t->w = w;
		t->epoch = c->epoch;
		t->attempt = (int)db_rows_int(&c->rows, i, 7) + 1;
		t->from_db = 1;
		t->counted = 1;
		t->state = WT_CLAIMING;
		s->busy++;
		hmap_put(w->tasks, t->id, t);
		payload_row_task(&c->rows, i, &pt);
		metric_inc(w->m.db_claims);
		firing_publish_task(w, t, &pt);
		payload_row_clear(&pt);
	}
	db_rows_free(&c->rows);
	hmap_set_free(&s->marked_in_claim);
	/* A full batch: more are due right now. */
	if (status == 0 && !c->fenced && n == (size_t)c->limit)
		dbclaim_slot(w, c->slot);
	xfree(c);
}

static void
dbclaim_slot(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];
	struct dbclaim *c;

	if (!slot_owned(w, slot) || s->mode != SM_DB ||
	    !eos_slot_ready(w, slot) || s->dbclaiming || w->stopping ||
	    !coord_fresh(w))
		return;
	/* Back-pressure, as in Redis mode: tasks stay scheduled. */
	if (kafka_outq_len(w->kafka) + eos_queued(w) + w->claim_batch >
		    (size_t)w->queue_max ||
	    kafka_brokers_down(w->kafka)) {
		metric_inc(w->m.backpressure);
		return;
	}
	c = xcalloc(1, sizeof(*c));
	c->w = w;
	c->slot = slot;
	c->epoch = s->epoch;
	c->now = worker_now(w);
	c->limit = w->claim_batch;
	c->lease_ms = w->lease_ms;
	snprintf(c->owner, sizeof(c->owner), "%s", w->id);
	c->job.run = dbclaim_run;
	c->job.done_cb = dbclaim_done_cb;
	s->dbclaiming = 1;
	db_pool_submit(w->db, &c->job);
}

static void
dbfire_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < w->nslots; i++)
		dbclaim_slot(w, i);
}

/* DB lease reaper ------------------------------------------------------ */

struct dbreap {
	struct db_job job;
	struct worker *w;
	int slot;
	unsigned gen; /* the slot's generation when sent */
	int64_t now;
	int phase; /* 0: find expired, 1: requeue the ones not held here */
	struct db_rows rows;
	char **ids;
	size_t nids;
	struct db_rows *payloads; /* per requeued id (phase 1) */
	size_t npayloads;
};

static int
dbreap_run(struct db_conn *c, struct db_job *job)
{
	struct dbreap *r = (struct dbreap *)job;
	struct db_params p;

	db_params_init(&p, 3);
	if (r->phase == 0) {
		db_params_int(&p, r->slot);
		db_params_int(&p, r->now);
		if (db_query(c, SQL_TASK_FIRING_EXPIRED, &p, &r->rows) < 0) {
			db_params_free(&p);
			return -1;
		}
		db_params_free(&p);
		return 0;
	}
	r->payloads = xcalloc(r->nids, sizeof(*r->payloads));
	for (size_t i = 0; i < r->nids; i++) {
		unsigned long long a = 0;

		p.n = 0;
		db_params_int(&p, r->now);
		db_params_str(&p, r->ids[i]);
		db_params_int(&p, r->now);
		if (db_exec(c, SQL_TASK_REQUEUE, &p, &a) < 0)
			break;
		if (a == 0)
			continue;
		p.n = 0;
		db_params_str(&p, r->ids[i]);
		if (db_query(c, SQL_TASK_PAYLOAD, &p,
			     &r->payloads[r->npayloads]) == 0)
			r->npayloads++;
	}
	db_params_free(&p);
	return 0;
}

static void
dbreap_free(struct dbreap *r)
{
	db_rows_free(&r->rows);
	for (size_t i = 0; i < r->nids; i++)
		xfree(r->ids[i]);
	xfree(r->ids);
	for (size_t i = 0; i < r->npayloads; i++)
		db_rows_free(&r->payloads[i]);
	xfree(r->payloads);
	xfree(r);
}

/* Requeued tasks of a slot on the Redis path go back into its index. */
static void
index_requeued(struct worker *w, struct dbreap *r)
{
	struct rindex ix;

	rindex_init(&ix, r->slot, w->bucket_ms,
		    clock_now_ms() + w->bucket_near_ms);
	for (size_t i = 0; i < r->npayloads; i++)
		if (r->payloads[i].nrows == 1)
			rindex_add_row(&ix, &r->payloads[i], 0);
	if (rindex_count(&ix) > 0)
		redis_eval_args(w->redis, NULL, NULL, &ix.ev.a);
	rindex_free(&ix);
}

static void
dbreap_done_cb(struct db_job *job, int status, const char *err)
{
	struct dbreap *r = (struct dbreap *)job;
	struct worker *w = r->w;
	struct wslot *s = &w->slots[r->slot];

	/* Phase 0 only read: its answer is stale once the slot moved on.
	 * Phase 1 requeued rows in the DB: they go into the index whenever
	 * the slot is still ours in Redis mode, whatever changed since. */
	if (status < 0 || w->stopping ||
	    (r->phase == 0 ? !slot_current(w, r->slot, r->gen)
			   : !slot_owned(w, r->slot))) {
		s->dbreaping = 0;
		dbreap_free(r);
		return;
	}
	if (r->phase == 0) {
		r->ids = xcalloc(r->rows.nrows + 1, sizeof(char *));
		for (size_t i = 0; i < r->rows.nrows; i++) {
			const char *id = db_rows_get(&r->rows, i, 0, NULL);

			if (hmap_get(w->tasks, id) == NULL)
				r->ids[r->nids++] = xstrdup(id);
		}
		if (r->nids == 0) {
			s->dbreaping = 0;
			dbreap_free(r);
			return;
		}
		r->phase = 1;
		db_pool_submit(w->db, &r->job);
		return;
	}
	s->dbreaping = 0;
	if (r->npayloads > 0) {
		metric_add(w->m.db_requeued, (double)r->npayloads);
		log_info("db leases expired: tasks requeued",
			 "slot=%d count=%zu", r->slot, r->npayloads);
		if (s->mode == SM_REDIS)
			index_requeued(w, r);
	}
	dbreap_free(r);
}

void
dbmode_reap_slot(struct worker *w, int slot)
{
	struct dbreap *r = xcalloc(1, sizeof(*r));

	r->w = w;
	r->slot = slot;
	r->gen = w->slots[slot].gen;
	r->now = worker_now(w);
	r->job.run = dbreap_run;
	r->job.done_cb = dbreap_done_cb;
	w->slots[slot].dbreaping = 1;
	db_pool_submit(w->db, &r->job);
}

void
dbmode_start(struct worker *w)
{
	struct timeval tv = {0, DBFIRE_TICK_MS * 1000};

	w->dbfire_ev = event_new(w->base, -1, EV_PERSIST, dbfire_tick_cb, w);
	event_add(w->dbfire_ev, &tv);
}

void
dbmode_free(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		hmap_set_free(&w->slots[i].marked_in_claim);
}

void
dbmode_stop(struct worker *w)
{
	if (w->dbfire_ev != NULL)
		event_free(w->dbfire_ev);
	w->dbfire_ev = NULL;
}
