#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "daemon.h"
#include "db.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "worker.h"
#include "xmalloc.h"
#include "zk.h"

/*
 * Paused topics (docs/architecture.md, "Pausing topics"). The DB's
 * topic_pause is the truth: read at start, every PAUSE_REFRESH_MS and
 * whenever the manager touches <root>/paused after a commit (a watch; a
 * pause the node's data names applies at once, and the DB read that
 * follows it decides, and brings resumes with their rates). A claimed task of a paused topic is not published:
 * SCRIPT_HOLD moves it from inflight to {prophet:N}:held:<topic>. When the
 * topic is resumed, the owners of the slots move their held tasks back to
 * due, oldest first: all at once, or at the resume's rate (this worker's
 * share of it, in proportion to the slots it owns), merging the heads of
 * its slots' held sets so that the oldest held task goes first.
 */

#define PAUSE_REFRESH_MS 1000
#define DRAIN_TICK_MS 100
#define DRAIN_RECHECK_MS 30000	    /* a hold that raced a resume */
#define DRAIN_RECHECK_FOR_MS 300000 /* that long after the resume */
#define DRAIN_PEEK 8
#define LIFT_ALL 2000 /* released per call without a rate */

enum head_state { HS_UNKNOWN, HS_KNOWN, HS_OUT };

struct ptopic {
	char topic[TASK_TOPIC_MAX + 1];
	int paused;
	int rate; /* resume rate, tasks/s for the cluster; 0: unlimited */
	int64_t resumed_at; /* wall ms of the last resume (DB); 0: none */
	int draining;
	double budget;
	long long released; /* by this drain, on this worker */
	int64_t resumed_ms; /* monotonic: when this worker saw the resume */
	/* Per slot: the due times of its oldest held tasks. */
	enum head_state *hs;
	int *nhead;
	int64_t *head;
	int seen; /* in the last read */
};

struct pause {
	struct ptopic **t;
	size_t n;
	size_t npaused; /* none: the claim path looks no further */
	int loaded;	/* from the DB or the node: claims may go out */
	int refreshing;
	int again;
	char path[512];
	struct event *refresh_ev;
	struct event *drain_ev;
	int64_t next_recheck_ms;
};

static struct ptopic *
find(struct pause *p, const char *topic)
{
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->t[i]->topic, topic) == 0)
			return p->t[i];
	return NULL;
}

static struct ptopic *
get_or_add(struct worker *w, const char *topic)
{
	struct pause *p = w->pause;
	struct ptopic *t = find(p, topic);

	if (t != NULL)
		return t;
	t = xcalloc(1, sizeof(*t));
	snprintf(t->topic, sizeof(t->topic), "%s", topic);
	t->hs = xcalloc((size_t)w->nslots, sizeof(*t->hs));
	t->nhead = xcalloc((size_t)w->nslots, sizeof(*t->nhead));
	t->head = xcalloc((size_t)w->nslots * DRAIN_PEEK, sizeof(*t->head));
	p->t = xrealloc(p->t, (p->n + 1) * sizeof(*p->t));
	p->t[p->n++] = t;
	return t;
}

static void
ptopic_free(struct ptopic *t)
{
	xfree(t->hs);
	xfree(t->nhead);
	xfree(t->head);
	xfree(t);
}

static void
gauge(struct worker *w)
{
	size_t n = 0;

	for (size_t i = 0; i < w->pause->n; i++)
		n += w->pause->t[i]->paused != 0;
	w->pause->npaused = n;
	metric_set(w->m.paused_topics, (double)n);
}

/* Heads unknown in every slot (or one): the drain looks again. */
static void
drain_activate(struct worker *w, struct ptopic *t, int slot)
{
	for (int i = 0; i < w->nslots; i++)
		if (slot < 0 || i == slot)
			if (t->hs[i] != HS_OUT)
				t->hs[i] = HS_UNKNOWN;
	if (!t->draining) {
		t->budget = 0;
		t->released = 0;
	}
	t->draining = 1;
}

static void
set_paused(struct worker *w, struct ptopic *t, int paused, const char *from)
{
	if (paused && !t->paused)
		log_info("topic paused: holding its tasks", "topic=%s from=%s",
			 t->topic, from);
	else if (!paused && t->paused)
		log_info("topic resumed: releasing its held tasks",
			 "topic=%s rate=%d from=%s", t->topic, t->rate, from);
	if (!paused && (t->paused || !w->pause->loaded)) {
		t->resumed_ms = clock_mono_ms();
		drain_activate(w, t, -1);
	}
	t->paused = paused;
	if (paused)
		t->draining = 0;
}

int
pause_ready(const struct worker *w)
{
	return w->pause != NULL && w->pause->loaded;
}

int
pause_is_paused(const struct worker *w, const char *topic)
{
	struct ptopic *t;

	if (w->pause->npaused == 0)
		return 0;
	t = find(w->pause, topic);
	return t != NULL && t->paused;
}

/* The DB read. ----------------------------------------------------------- */

struct refresh {
	struct db_job job;
	struct worker *w;
	struct db_rows rows;
};

static int
refresh_run(struct db_conn *c, struct db_job *job)
{
	struct refresh *r = (struct refresh *)job;

	return db_query(c, SQL_PAUSE_LIST, NULL, &r->rows);
}

static void refresh(struct worker *w);

static void
refresh_done_cb(struct db_job *job, int status, const char *err)
{
	struct refresh *r = (struct refresh *)job;
	struct worker *w = r->w;
	struct pause *p = w->pause;

	p->refreshing = 0;
	if (status < 0) {
		if (!p->loaded)
			log_warn("cannot read the paused topics; claims wait",
				 "error=\"%s\"", err);
	} else if (!p->again) {
		/* A read that started before a change the node announced
		 * would undo it for a moment: only the latest applies. */
		for (size_t i = 0; i < p->n; i++)
			p->t[i]->seen = 0;
		for (size_t i = 0; i < r->rows.nrows; i++) {
			struct ptopic *t = get_or_add(
				w, db_rows_get(&r->rows, i, 0, NULL));

			t->seen = 1;
			t->rate = (int)db_rows_int(&r->rows, i, 2);
			t->resumed_at = db_rows_int(&r->rows, i, 3);
			set_paused(w, t, db_rows_int(&r->rows, i, 1) != 0,
				   "db");
		}
		for (size_t i = 0; i < p->n; i++)
			if (!p->t[i]->seen)
				set_paused(w, p->t[i], 0, "db");
		if (!p->loaded)
			log_info("paused topics read", "rows=%zu",
				 r->rows.nrows);
		p->loaded = 1;
		gauge(w);
	}
	db_rows_free(&r->rows);
	xfree(r);
	if (p->again) {
		p->again = 0;
		refresh(w);
	}
}

static void
refresh(struct worker *w)
{
	struct pause *p = w->pause;
	struct refresh *r;

	if (p->refreshing) {
		p->again = 1;
		return;
	}
	r = xcalloc(1, sizeof(*r));
	r->w = w;
	r->job.run = refresh_run;
	r->job.done_cb = refresh_done_cb;
	p->refreshing = 1;
	db_pool_submit(w->db, &r->job);
}

static void
refresh_cb(evutil_socket_t fd, short what, void *arg)
{
	refresh(arg);
}

/* The node: {"paused":["topic",...]} written by the manager after each
 * commit. --------------------------------------------------------------- */

static void
node_cb(struct zk *z, int rc, const char *data, int len, const struct Stat *st,
	void *arg)
{
	struct worker *w = arg;
	json_t *doc, *list, *v;
	json_error_t jerr;
	size_t i;

	if (w->stopping || w->pause == NULL)
		return;
	if (rc == ZOK && data != NULL && len > 0 &&
	    (doc = json_loadb(data, (size_t)len, 0, &jerr)) != NULL) {
		list = json_object_get(doc, "paused");
		if (json_is_array(list)) {
			json_array_foreach (list, i, v) {
				struct ptopic *t;

				if (!json_is_string(v) ||
				    !task_topic_valid(json_string_value(v),
						      json_string_length(v)))
					continue;
				t = get_or_add(w, json_string_value(v));
				set_paused(w, t, 1, "zookeeper");
			}
			/* A resume waits for the DB read below: it carries
			 * the rate of the drain. */
			w->pause->loaded = 1;
			gauge(w);
		}
		json_decref(doc);
	}
	/* The DB decides (the node may be older than it, or missing). */
	refresh(w);
}

static void
watch(struct worker *w)
{
	zk_aget(w->zk, w->pause->path, 1, node_cb, w);
}

int
pause_zk_event(struct worker *w, int type, const char *path)
{
	if (w->pause == NULL || path == NULL ||
	    strcmp(path, w->pause->path) != 0)
		return 0;
	watch(w);
	return 1;
}

void
pause_zk_connected(struct worker *w)
{
	if (w->pause == NULL)
		return;
	watch(w);
}

/* Holding. ---------------------------------------------------------------- */

struct hold_call {
	struct worker *w;
	struct wtask *t;
	char topic[TASK_TOPIC_MAX + 1];
};

static void
hold_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct hold_call *h = arg;
	struct worker *w = h->w;
	struct ptopic *t;

	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER)
		metric_add(w->m.pause_held, (double)reply->integer);
	else
		log_warn("hold failed: the task's lease requeues it",
			 "id=%s error=\"%s\"", h->t->id,
			 reply ? reply->str : "disconnected");
	/* Resumed while the hold was out: that slot's drain looks again. */
	t = w->pause ? find(w->pause, h->topic) : NULL;
	if (t != NULL && !t->paused && slot_owned(w, h->t->slot))
		drain_activate(w, t, h->t->slot);
	wtask_release(w, h->t);
	xfree(h);
}

int
pause_hold(struct worker *w, struct wtask *t, const struct task *pt)
{
	struct slot_eval ev;
	struct hold_call *h;

	if (!pause_is_paused(w, pt->topic))
		return 0;
	h = xcalloc(1, sizeof(*h));
	h->w = w;
	h->t = t;
	snprintf(h->topic, sizeof(h->topic), "%s", pt->topic);
	slot_eval_init(&ev, SCRIPT_HOLD, t->slot, "ih");
	redis_args_addstr(&ev.a, pt->topic);
	redis_args_addstr(&ev.a, t->id);
	redis_args_addint(&ev.a, pt->due_at);
	if (redis_eval_args(w->redis, hold_cb, h, &ev.a) < 0) {
		/* Not sent: its lease brings it back to due and the next
		 * claim holds it. */
		wtask_release(w, t);
		xfree(h);
	}
	slot_eval_free(&ev);
	return 1;
}

/* A Redis call about one topic in one slot (a pace, a lift): what its reply
 * needs to find the topic again. */
struct topic_call {
	struct worker *w;
	char topic[TASK_TOPIC_MAX + 1];
	int slot;
};

/* A fire_all series catching up after a rate-limited resume. -------------- */

static void
pace_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct topic_call *pc = arg;
	struct worker *w = pc->w;
	struct ptopic *t = w->pause ? find(w->pause, pc->topic) : NULL;

	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER)
		metric_add(w->m.pause_held, (double)reply->integer);
	/* After any lift sent before the hold: the slot's drain looks again
	 * and finds it (a lift sent later sees it anyway). */
	if (t != NULL && !t->paused && slot_owned(w, pc->slot))
		drain_activate(w, t, pc->slot);
	xfree(pc);
}

int
pause_pace(struct worker *w, int slot, const char *topic, const char *id,
	   int64_t due)
{
	struct ptopic *t = w->pause ? find(w->pause, topic) : NULL;
	struct topic_call *pc;
	struct slot_eval ev;

	if (t == NULL || t->paused || t->rate <= 0 || due >= t->resumed_at)
		return 0;
	pc = xcalloc(1, sizeof(*pc));
	pc->w = w;
	pc->slot = slot;
	snprintf(pc->topic, sizeof(pc->topic), "%s", topic);
	/* From due (where the next occurrence was just indexed) to held. */
	slot_eval_init(&ev, SCRIPT_HOLD, slot, "dh");
	redis_args_addstr(&ev.a, topic);
	redis_args_addstr(&ev.a, id);
	redis_args_addint(&ev.a, due);
	if (redis_eval_args(w->redis, pace_cb, pc, &ev.a) < 0)
		xfree(pc);
	slot_eval_free(&ev);
	return 1;
}

/* Draining a resumed topic. ----------------------------------------------- */

static void
lift_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct topic_call *l = arg;
	struct worker *w = l->w;
	struct ptopic *t = w->pause ? find(w->pause, l->topic) : NULL;
	int s = l->slot;

	xfree(l);
	if (t == NULL)
		return;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements < 1) {
		t->hs[s] = HS_UNKNOWN;
		return;
	}
	if (reply->element[0]->type == REDIS_REPLY_INTEGER &&
	    reply->element[0]->integer > 0) {
		metric_add(w->m.pause_released,
			   (double)reply->element[0]->integer);
		t->released += reply->element[0]->integer;
		scanner_wake(w, s);
	}
	t->nhead[s] = 0;
	for (size_t i = 1; i < reply->elements && i <= DRAIN_PEEK; i++)
		if (reply->element[i]->type == REDIS_REPLY_INTEGER)
			t->head[s * DRAIN_PEEK + t->nhead[s]++] =
				reply->element[i]->integer;
	t->hs[s] = HS_KNOWN;
}

static void
lift(struct worker *w, struct ptopic *t, int slot, int count, int peek)
{
	struct slot_eval ev;
	struct topic_call *l = xcalloc(1, sizeof(*l));

	l->w = w;
	l->slot = slot;
	snprintf(l->topic, sizeof(l->topic), "%s", t->topic);
	slot_eval_init(&ev, SCRIPT_LIFT, slot, "dh");
	redis_args_addstr(&ev.a, t->topic);
	redis_args_addint(&ev.a, count);
	redis_args_addint(&ev.a, peek);
	if (redis_eval_args(w->redis, lift_cb, l, &ev.a) < 0) {
		xfree(l);
	} else {
		t->hs[slot] = HS_OUT;
	}
	slot_eval_free(&ev);
}

/* One tick of one topic's drain; 0 once every owned slot is empty. */
static int
drain_topic(struct worker *w, struct ptopic *t)
{
	int owned = 0, pending = 0, *take;

	for (int i = 0; i < w->nslots; i++) {
		if (!coord_may_claim(w, i))
			continue;
		owned++;
		if (t->hs[i] == HS_OUT ||
		    (t->hs[i] == HS_KNOWN && t->nhead[i] > 0))
			pending = 1;
		else if (t->hs[i] == HS_UNKNOWN) {
			pending = 1;
			lift(w, t, i, 0, DRAIN_PEEK);
		}
	}
	if (!pending)
		return 0;
	if (t->rate <= 0) {
		for (int i = 0; i < w->nslots; i++)
			if (coord_may_claim(w, i) && t->hs[i] == HS_KNOWN &&
			    t->nhead[i] > 0)
				lift(w, t, i, LIFT_ALL, 1);
		return 1;
	}
	/* This worker's share of the rate, at most a second of it saved
	 * (slots whose heads are not known yet do not take it). */
	{
		double share = (double)t->rate * owned / w->nslots;

		t->budget += share * DRAIN_TICK_MS / 1000.0;
		if (t->budget > share && t->budget > 1)
			t->budget = share > 1 ? share : 1;
	}
	take = xcalloc((size_t)w->nslots, sizeof(*take));
	while (t->budget >= 1) {
		int best = -1;

		for (int i = 0; i < w->nslots; i++) {
			if (!coord_may_claim(w, i) || t->hs[i] != HS_KNOWN ||
			    take[i] >= t->nhead[i])
				continue;
			if (best < 0 ||
			    t->head[i * DRAIN_PEEK + take[i]] <
				    t->head[best * DRAIN_PEEK + take[best]])
				best = i;
		}
		if (best < 0)
			break;
		take[best]++;
		t->budget -= 1;
	}
	/* A rate beyond the heads known (DRAIN_PEEK a slot a tick): the rest
	 * goes round the slots that hold more, oldest first within each. */
	while (t->budget >= 1) {
		int any = 0;

		for (int i = 0; i < w->nslots && t->budget >= 1; i++) {
			if (!coord_may_claim(w, i) || t->hs[i] != HS_KNOWN ||
			    t->nhead[i] < DRAIN_PEEK || take[i] < DRAIN_PEEK ||
			    take[i] >= LIFT_ALL)
				continue;
			take[i]++;
			t->budget -= 1;
			any = 1;
		}
		if (!any)
			break;
	}
	for (int i = 0; i < w->nslots; i++)
		if (take[i] > 0)
			lift(w, t, i, take[i], DRAIN_PEEK);
	xfree(take);
	return 1;
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct pause *p = w->pause;
	int64_t now = clock_mono_ms();

	if (w->stopping || !redis_up(w->redis))
		return;
	if (now >= p->next_recheck_ms) {
		p->next_recheck_ms = now + DRAIN_RECHECK_MS;
		for (size_t i = 0; i < p->n; i++)
			if (!p->t[i]->paused &&
			    now - p->t[i]->resumed_ms < DRAIN_RECHECK_FOR_MS)
				drain_activate(w, p->t[i], -1);
	}
	for (size_t i = 0; i < p->n; i++) {
		struct ptopic *t = p->t[i];

		if (t->paused || !t->draining)
			continue;
		if (!drain_topic(w, t)) {
			if (t->released > 0)
				log_info("held tasks released",
					 "topic=%s count=%lld rate=%d",
					 t->topic, t->released, t->rate);
			t->draining = 0;
			t->budget = 0;
		}
	}
}

void
pause_slot_ready(struct worker *w, int slot)
{
	if (w->pause == NULL)
		return;
	for (size_t i = 0; i < w->pause->n; i++)
		if (!w->pause->t[i]->paused)
			drain_activate(w, w->pause->t[i], slot);
}

void
pause_start(struct worker *w)
{
	struct pause *p = xcalloc(1, sizeof(*p));
	struct timeval rtv = {PAUSE_REFRESH_MS / 1000,
			      (PAUSE_REFRESH_MS % 1000) * 1000};
	struct timeval dtv = {0, DRAIN_TICK_MS * 1000};

	w->pause = p;
	zpath(p->path, sizeof(p->path), w->root, ZPATH_PAUSED);
	p->next_recheck_ms = clock_mono_ms() + DRAIN_RECHECK_MS;
	p->refresh_ev = event_new(w->base, -1, EV_PERSIST, refresh_cb, w);
	event_add(p->refresh_ev, &rtv);
	p->drain_ev = event_new(w->base, -1, EV_PERSIST, drain_cb, w);
	event_add(p->drain_ev, &dtv);
	watch(w);
	refresh(w);
}

void
pause_stop(struct worker *w)
{
	struct pause *p = w->pause;

	if (p == NULL)
		return;
	event_free(p->refresh_ev);
	event_free(p->drain_ev);
	for (size_t i = 0; i < p->n; i++)
		ptopic_free(p->t[i]);
	xfree(p->t);
	xfree(p);
	w->pause = NULL;
}
