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
#include "num.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "worker.h"
#include "xmalloc.h"

/*
 * Redis is an index the DB can always rebuild (CONTRACT guarantee 4):
 *  - each slot's index carries a marker key, set when it was built; a
 *    missing marker (restart without persistence, FLUSHALL, failover to an
 *    empty replica) makes the owner rebuild the slot before claiming again;
 *  - while Redis is unreachable, owned slots fire from the DB (dbmode.c);
 *    when it is back, each slot is rebuilt (stale entries dropped, tasks
 *    accepted meanwhile indexed) and switches back.
 */

#define RECOVERY_TICK_MS 250
#define MARKER_CHECK_MS 1000
#define REDIS_DOWN_GRACE_MS 1000
#define REDIS_UP_GRACE_MS 1000
#define REBUILD_PAGE 2000
#define REBUILD_RETRY_MS 1000

/* The degraded modes' own state (recovery_start .. recovery_stop). */
struct recovery {
	int64_t redis_down_since_ms; /* monotonic; 0: up or unknown */
	int64_t redis_up_since_ms;
	int db_mode_logged;
	char db_mode_why[256]; /* why the last slot went to SM_DB */
	/* The primary refuses writes (NOREPLICAS: fewer good replicas than
	 * its min-replicas-to-write): claims fail, so Redis counts as down
	 * until a probe write goes through. */
	int refused;
	int probing;
	struct event *recovery_ev;
};

int
recovery_held(struct worker *w, const char *id)
{
	return hmap_get(w->tasks, id) != NULL;
}

static void
done_key(char *buf, size_t len, int64_t due_at, const char *id)
{
	snprintf(buf, len, "%lld:%s", (long long)due_at, id);
}

/* A page of the rebuild may have read the task as scheduled before this
 * record committed, and reach the loop after the task was released: it
 * must not be indexed again (it would fire twice). Keyed by its due time
 * too, so that a recurring task's next occurrence is indexed. */
void
recovery_task_finished(struct worker *w, const struct wtask *t)
{
	char key[NUM_LL_MAX + TASK_ID_MAX + 2];

	done_key(key, sizeof(key), t->due_at, t->id);
	hmap_set_add(&w->slots[t->slot].rebuild_done, key);
}

/* Held (publishing, recording) or recorded since the rebuild began. */
static int
rebuild_skip(struct worker *w, struct wslot *s, const struct db_rows *rows,
	     size_t i)
{
	const char *id = db_rows_get(rows, i, PC_ID, NULL);
	char key[NUM_LL_MAX + TASK_ID_MAX + 2];

	if (recovery_held(w, id))
		return 1;
	if (s->rebuild_done == NULL)
		return 0;
	done_key(key, sizeof(key), db_rows_int(rows, i, PC_DUE_AT), id);
	return hmap_get(s->rebuild_done, key) != NULL;
}

static void
count_db_mode(struct worker *w)
{
	int n = 0;

	for (int i = 0; i < w->nslots; i++)
		n += slot_owned(w, i) && w->slots[i].mode == SM_DB;
	metric_set(w->m.db_mode, n);
	if (w->rec == NULL)
		return;
	if (n > 0 && !w->rec->db_mode_logged) {
		w->rec->db_mode_logged = 1;
		log_warn("redis fallback on: firing from the database",
			 "slots=%d reason=\"%s\"", n, w->rec->db_mode_why);
	} else if (n == 0 && w->rec->db_mode_logged) {
		w->rec->db_mode_logged = 0;
		log_info("redis fallback off: firing from redis again", "");
	}
}

/* why: for the fallback's log line (quotes in it become '). */
static void
enter_db_mode(struct worker *w, int slot, const char *why)
{
	if (w->rec != NULL) {
		snprintf(w->rec->db_mode_why, sizeof(w->rec->db_mode_why), "%s",
			 why);
		for (char *p = w->rec->db_mode_why; *p; p++)
			if (*p == '"' || *p == '\\')
				*p = '\'';
	}
	wslot_set_mode(&w->slots[slot], SM_DB);
	/* Ids read from Redis are claimed through the DB now. */
	scanner_drop_slot(w, slot);
	count_db_mode(w);
}

/* Rebuild ------------------------------------------------------------- */

struct rebuild {
	struct worker *w;
	int slot;
	unsigned gen;
	int64_t epoch;
	int64_t end_ms;	   /* everything due before this is indexed */
	int64_t after_due; /* keyset cursor */
	char after_id[TASK_ID_MAX + 1];
};

/* One page's query: a copy of the rebuild's cursor (the pool thread
 * never reads rb, the loop's). */
struct rebuild_job {
	struct db_job job;
	struct rebuild *rb;
	int slot;
	int64_t end_ms;
	int64_t after_due;
	char after_id[TASK_ID_MAX + 1];
	struct db_rows rows;
};

static void rebuild_reset(struct rebuild *rb);
static void rebuild_page(struct rebuild *rb);

static int
rebuild_current(struct rebuild *rb)
{
	return slot_current(rb->w, rb->slot, rb->gen) &&
	       rb->w->slots[rb->slot].mode == SM_REBUILD && !rb->w->stopping;
}

static void
rebuild_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct rebuild *rb = arg;

	if (rebuild_current(rb))
		rebuild_reset(rb);
	else
		xfree(rb);
}

/* Something failed: Redis gone means DB mode; otherwise try again soon. */
static void
rebuild_fail(struct rebuild *rb, const char *step, const char *err)
{
	struct worker *w = rb->w;
	struct timeval tv = {0, REBUILD_RETRY_MS * 1000};

	if (!rebuild_current(rb)) {
		xfree(rb);
		return;
	}
	log_warn("rebuild step failed", "slot=%d step=%s error=\"%s\"",
		 rb->slot, step, err);
	if (!redis_up(w->redis)) {
		char why[256];

		snprintf(why, sizeof(why),
			 "redis went down while slot %d was rebuilt (%s: %s)",
			 rb->slot, step, err);
		enter_db_mode(w, rb->slot, why);
		xfree(rb);
		return;
	}
	event_base_once(w->base, -1, EV_TIMEOUT, rebuild_retry_cb, rb, &tv);
}

static void
marker_set_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct rebuild *rb = arg;
	struct worker *w = rb->w;
	struct wslot *s = &w->slots[rb->slot];
	double secs;

	if (!rebuild_current(rb)) {
		xfree(rb);
		return;
	}
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		rebuild_fail(rb, "marker", reply ? reply->str : "disconnected");
		return;
	}
	secs = (double)(clock_mono_ms() - s->rebuild_started_ms) / 1000.0;
	wslot_set_mode(&w->slots[rb->slot], SM_REDIS);
	hmap_set_free(&s->rebuild_done);
	s->next_load_ms = 0;
	s->next_move_ms = 0;
	s->next_reap_ms = 0;
	pause_slot_ready(w, rb->slot);
	metric_inc(w->m.rebuilds);
	metric_observe(w->m.rebuild_seconds, secs);
	log_info("slot index rebuilt", "slot=%d tasks=%zu duration_ms=%.0f",
		 rb->slot, s->rebuild_tasks, secs * 1000);
	count_db_mode(w);
	xfree(rb);
}

static void
pointer_saved(int status, const char *err, void *arg)
{
	struct rebuild *rb = arg;
	char kmark[RKEY_MAX], now[NUM_LL_MAX];

	if (!rebuild_current(rb)) {
		xfree(rb);
		return;
	}
	if (status < 0) {
		rebuild_fail(rb, "pointer", err);
		return;
	}
	rkey_marker(kmark, sizeof(kmark), rb->slot);
	num_format_ll(now, worker_now(rb->w));
	if (redis_commandl(rb->w->redis, marker_set_cb, rb, "SET", kmark, now,
			   NULL) < 0)
		rebuild_fail(rb, "marker", "redis unavailable");
}

static void
index_page_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct rebuild *rb = arg;

	if (!rebuild_current(rb)) {
		xfree(rb);
		return;
	}
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		rebuild_fail(rb, "index", reply ? reply->str : "disconnected");
		return;
	}
	rebuild_page(rb);
}

static int
page_run(struct db_conn *c, struct db_job *job)
{
	struct rebuild_job *j = (struct rebuild_job *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 6);
	db_params_int(&p, j->slot);
	db_params_int(&p, j->end_ms);
	db_params_int(&p, j->after_due);
	db_params_int(&p, j->after_due);
	db_params_str(&p, j->after_id);
	db_params_int(&p, REBUILD_PAGE);
	rc = db_query(c, SQL_TASK_SCHEDULED_PAGE, &p, &j->rows);
	db_params_free(&p);
	return rc;
}

/* Indexes one page of the slot's scheduled tasks, skipping those this
 * worker still holds (publishing or recording: they are in flight) and
 * those it recorded since the rebuild began (rebuild_skip). */
static void
page_done_cb(struct db_job *job, int status, const char *err)
{
	struct rebuild_job *j = (struct rebuild_job *)job;
	struct rebuild *rb = j->rb;
	struct worker *w = rb->w;
	struct wslot *s = &w->slots[rb->slot];
	struct rindex ix;
	size_t n = j->rows.nrows, indexed;

	if (!rebuild_current(rb)) {
		db_rows_free(&j->rows);
		xfree(j);
		xfree(rb);
		return;
	}
	if (status < 0) {
		db_rows_free(&j->rows);
		xfree(j);
		rebuild_fail(rb, "select", err);
		return;
	}
	if (n == 0) {
		db_rows_free(&j->rows);
		xfree(j);
		scanner_save_pointer(w, rb->slot, rb->end_ms, pointer_saved,
				     rb);
		return;
	}
	rindex_init(&ix, rb->slot, w->bucket_ms,
		    clock_now_ms() + w->bucket_near_ms);
	for (size_t i = 0; i < n; i++)
		if (!rebuild_skip(w, s, &j->rows, i))
			rindex_add_row(&ix, &j->rows, i);
	indexed = rindex_count(&ix);
	rb->after_due = db_rows_int(&j->rows, n - 1, PC_DUE_AT);
	snprintf(rb->after_id, sizeof(rb->after_id), "%s",
		 db_rows_get(&j->rows, n - 1, PC_ID, NULL));
	s->rebuild_tasks += indexed;
	metric_add(w->m.rebuild_tasks, (double)indexed);
	if (s->rebuild_tasks >= REBUILD_PAGE &&
	    s->rebuild_tasks % (REBUILD_PAGE * 10) < indexed)
		log_info("rebuild progress", "slot=%d tasks=%zu", rb->slot,
			 s->rebuild_tasks);
	if (indexed == 0)
		rebuild_page(rb);
	else if (redis_eval_args(w->redis, index_page_cb, rb, &ix.ev.a) < 0)
		rebuild_fail(rb, "index", "redis unavailable");
	rindex_free(&ix);
	db_rows_free(&j->rows);
	xfree(j);
}

static void
rebuild_page(struct rebuild *rb)
{
	struct rebuild_job *j = xcalloc(1, sizeof(*j));

	j->rb = rb;
	j->slot = rb->slot;
	j->end_ms = rb->end_ms;
	j->after_due = rb->after_due;
	memcpy(j->after_id, rb->after_id, sizeof(j->after_id));
	j->job.run = page_run;
	j->job.done_cb = page_done_cb;
	db_pool_submit(rb->w->db, &j->job);
}

static void
reset_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct rebuild *rb = arg;

	if (!rebuild_current(rb)) {
		xfree(rb);
		return;
	}
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		rebuild_fail(rb, "reset", reply ? reply->str : "disconnected");
		return;
	}
	if (reply->type == REDIS_REPLY_INTEGER && reply->integer < 0) {
		/* A newer epoch owns the slot: ZooKeeper will tell us. */
		metric_inc(rb->w->m.fenced);
		log_warn("rebuild fenced: a newer epoch owns the slot",
			 "slot=%d epoch=%lld", rb->slot, (long long)rb->epoch);
		slot_lose(rb->w, rb->slot, "rebuild fenced in redis");
		xfree(rb);
		return;
	}
	rebuild_page(rb);
}

/* Drops the slot's index (stale after DB mode, or half gone after a data
 * loss), raises the fence again, then pages the DB's scheduled tasks in. */
static void
rebuild_reset(struct rebuild *rb)
{
	struct worker *w = rb->w;
	struct slot_eval ev;

	rb->end_ms = worker_now(w) + w->horizon_ms;
	rb->after_due = -1;
	rb->after_id[0] = '\0';
	w->slots[rb->slot].rebuild_tasks = 0;
	slot_eval_init(&ev, SCRIPT_RESET, rb->slot, "dtiaemkbv");
	redis_args_addint(&ev.a, rb->epoch);
	if (redis_eval_args(w->redis, reset_cb, rb, &ev.a) < 0)
		rebuild_fail(rb, "reset", "redis unavailable");
	slot_eval_free(&ev);
}

void
recovery_rebuild(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];
	struct rebuild *rb;

	if (s->mode == SM_REBUILD)
		return;
	wslot_set_mode(&w->slots[slot], SM_REBUILD);
	s->rebuild_started_ms = clock_mono_ms();
	scanner_drop_slot(w, slot);
	log_info("rebuilding slot index from the database",
		 "slot=%d epoch=%lld", slot, (long long)s->epoch);
	rb = xcalloc(1, sizeof(*rb));
	rb->w = w;
	rb->slot = slot;
	rb->gen = s->gen;
	rb->epoch = s->epoch;
	rebuild_reset(rb);
}

/*
 * The new primary may lack the last writes the old one acknowledged
 * (replication is asynchronous), and its "built" markers came with the
 * replicated data, so they prove nothing: every owned slot is treated as
 * if its marker were gone. A slot in DB mode is rebuilt anyway when Redis
 * has been up for a moment; a rebuild under way on the old primary
 * starts again (its pages may have gone to the old one).
 */
void
recovery_failover(struct worker *w)
{
	int n = 0, db = 0;

	for (int i = 0; i < w->nslots; i++) {
		struct wslot *s = &w->slots[i];

		if (!slot_owned(w, i))
			continue;
		if (s->mode == SM_DB) {
			db++;
			continue;
		}
		if (s->mode == SM_REBUILD) /* recovery_rebuild starts anew */
			wslot_set_mode(&w->slots[i], SM_REDIS);
		recovery_rebuild(w, i);
		n++;
	}
	log_warn("redis failover: rebuilding every owned slot from the "
		 "database",
		 "slots=%d db_mode=%d", n, db);
}

void
recovery_slot_ready(struct worker *w, int slot, int marker)
{
	struct wslot *s = &w->slots[slot];

	wslot_set_mode(&w->slots[slot], SM_REDIS);
	s->next_marker_ms = clock_mono_ms() + MARKER_CHECK_MS;
	if (!marker) {
		log_warn("slot index missing in redis (new cluster or data "
			 "loss)",
			 "slot=%d", slot);
		recovery_rebuild(w, slot);
	}
	count_db_mode(w);
}

/* Marker checks and mode switches ---------------------------------------- */

struct marker_call {
	struct worker *w;
	int slot;
	unsigned gen;
};

static void
marker_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct marker_call *mc = arg;
	struct worker *w = mc->w;
	struct wslot *s = &w->slots[mc->slot];

	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER &&
	    reply->integer == 0 && slot_current(w, mc->slot, mc->gen) &&
	    s->mode == SM_REDIS && !w->stopping) {
		log_warn("redis data loss detected: index marker gone",
			 "slot=%d", mc->slot);
		recovery_rebuild(w, mc->slot);
	}
	xfree(mc);
}

void
recovery_write_refused(struct worker *w, const char *err)
{
	if (w->rec == NULL || w->rec->refused ||
	    strncmp(err, "NOREPLICAS", 10) != 0)
		return;
	w->rec->refused = 1;
	log_warn("redis refuses writes: taken as down", "error=\"%s\"", err);
}

static void
probe_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct worker *w = arg;

	if (w->rec == NULL)
		return;
	w->rec->probing = 0;
	if (reply != NULL && reply->type != REDIS_REPLY_ERROR &&
	    w->rec->refused) {
		w->rec->refused = 0;
		log_info("redis takes writes again", "");
	}
}

/* While writes are refused, a write of its own tells when they are not. */
static void
probe_writes(struct worker *w)
{
	char key[RKEY_MAX];

	if (!w->rec->refused || w->rec->probing || !redis_up(w->redis))
		return;
	rkey_slot(key, sizeof(key), 0, "probe");
	if (redis_probe_write(w->redis, key, probe_cb, w) == 0)
		w->rec->probing = 1;
}

static void
recovery_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	int64_t mono = clock_mono_ms();
	int up;

	if (w->stopping)
		return;
	probe_writes(w);
	up = redis_up(w->redis) && !w->rec->refused;
	if (up) {
		w->rec->redis_down_since_ms = 0;
		if (w->rec->redis_up_since_ms == 0)
			w->rec->redis_up_since_ms = mono;
	} else {
		w->rec->redis_up_since_ms = 0;
		if (w->rec->redis_down_since_ms == 0)
			w->rec->redis_down_since_ms = mono;
	}
	for (int i = 0; i < w->nslots; i++) {
		struct wslot *s = &w->slots[i];

		if (!slot_owned(w, i))
			continue;
		if (!up && s->mode != SM_DB &&
		    mono - w->rec->redis_down_since_ms >= REDIS_DOWN_GRACE_MS) {
			char why[96];

			snprintf(why, sizeof(why),
				 "redis unreachable for %lld ms (the redis "
				 "lines before say why)",
				 (long long)(mono -
					     w->rec->redis_down_since_ms));
			enter_db_mode(w, i, why);
		} else if (up && s->mode == SM_DB &&
			   mono - w->rec->redis_up_since_ms >=
				   REDIS_UP_GRACE_MS) {
			recovery_rebuild(w, i);
		} else if (up && s->mode == SM_REDIS &&
			   mono >= s->next_marker_ms) {
			struct marker_call *mc = xcalloc(1, sizeof(*mc));
			char kmark[RKEY_MAX];

			s->next_marker_ms = mono + MARKER_CHECK_MS;
			mc->w = w;
			mc->slot = i;
			mc->gen = s->gen;
			rkey_marker(kmark, sizeof(kmark), i);
			if (redis_commandl(w->redis, marker_cb, mc, "EXISTS",
					   kmark, NULL) < 0)
				xfree(mc);
		}
		if (mono >= s->next_dbreap_ms && !s->dbreaping) {
			s->next_dbreap_ms = mono + 2000;
			dbmode_reap_slot(w, i);
		}
	}
	count_db_mode(w);
}

void
recovery_start(struct worker *w)
{
	struct timeval tv = {0, RECOVERY_TICK_MS * 1000};

	w->rec = xcalloc(1, sizeof(*w->rec));
	w->rec->recovery_ev =
		event_new(w->base, -1, EV_PERSIST, recovery_tick_cb, w);
	event_add(w->rec->recovery_ev, &tv);
}

void
recovery_stop(struct worker *w)
{
	if (w->rec == NULL)
		return;
	if (w->rec->recovery_ev != NULL)
		event_free(w->rec->recovery_ev);
	xfree(w->rec);
	w->rec = NULL;
}

int64_t
recovery_redis_down_ms(const struct worker *w)
{
	if (w->rec == NULL || w->rec->redis_down_since_ms == 0)
		return 0;
	return clock_mono_ms() - w->rec->redis_down_since_ms;
}
