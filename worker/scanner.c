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

#define REAP_LIMIT 1000 /* in-flight entries read by one reap */
#define SWEEP_OVERDUE_MS 3000
#define LOAD_BATCH 2000

/* The scanner's own state (scanner_start .. scanner_free). */
struct scanner {
	struct event *scan_ev;
	struct event *tick_ev;
	struct event *claim_retry_ev;
	struct limbo *limbo; /* claims whose reply was lost */
};

struct slot_call {
	struct worker *w;
	int slot;
	unsigned gen; /* the slot's generation when sent */
	int64_t epoch;
	/* For scans: from the start, and the highest score asked for. */
	int full;
	int64_t max;
	/* For claims: the tasks sent, in order, and their lease's end. */
	struct wtask **tasks;
	size_t n;
	int64_t lease_until;
};

static struct slot_call *
slot_call_new(struct worker *w, int slot)
{
	struct slot_call *c = xcalloc(1, sizeof(*c));

	c->w = w;
	c->slot = slot;
	c->gen = w->slots[slot].gen;
	return c;
}

static void
slot_call_free(struct slot_call *c)
{
	xfree(c->tasks);
	xfree(c);
}

void
wtask_release(struct worker *w, struct wtask *t)
{
	int slot = t->slot, busy = t->state >= WT_CLAIMING;

	if (timerwheel_pending(&t->timer))
		timerwheel_cancel(w->wheel, &t->timer);
	/* Let go unclaimed: it may still wait in due/, below what the
	 * incremental scans read from. */
	if (t->state <= WT_CLAIMING)
		w->slots[slot].scan_full = 1;
	hmap_del(w->tasks, t->id);
	xfree(t->payload);
	xfree(t->ktopic);
	if (t->early != NULL) {
		task_clear(t->early);
		xfree(t->early);
	}
	xfree(t);
	if (busy && --w->slots[slot].busy == 0)
		coord_slot_idle(w, slot);
}

/* Ticks when the millisecond of the wheel's next timer begins: the wheel's
 * time is the millisecond of its last advance, so waiting whole
 * milliseconds from now would publish up to a millisecond late. (epoll
 * rounds the wait up to a millisecond; a precise timer, timerfd, costs a
 * syscall or two per loop iteration, which showed at 20k tasks/s.) */
static void
arm_tick(struct worker *w)
{
	int64_t next = timerwheel_next_timeout(w->wheel), wait_us;
	struct timeval tv;

	if (next < 0 || next > 1000)
		next = 1000;
	wait_us = (timerwheel_now(w->wheel) + next) * 1000 - clock_now_us();
	if (wait_us < 0)
		wait_us = 0;
	if (wait_us > next * 1000) /* the wall clock went back */
		wait_us = next * 1000;
	tv.tv_sec = (time_t)(wait_us / 1000000);
	tv.tv_usec = (suseconds_t)(wait_us % 1000000);
	evtimer_add(w->sc->tick_ev, &tv);
}

static void claim_slot(struct worker *w, int slot);

/*
 * When the wheel queues a task due at due for its claim: claim_ahead_ms
 * before, rounded down to a multiple of claim_group_ms, so that a slot's
 * tasks due within one group of milliseconds go in one claim call (most
 * carry one or two tasks otherwise: a call per slot per millisecond).
 */
static int64_t
claim_at(const struct worker *w, int64_t due)
{
	int64_t at = due - w->claim_ahead_ms, g = w->claim_group_ms;

	if (g > 1)
		at -= ((at % g) + g) % g;
	return at;
}

/* The wheel says a task is due: queue it for the next claim round trip. */
static void
due_cb(struct timerwheel_timer *tm, void *arg)
{
	struct wtask *t = arg;
	struct worker *w = t->w;
	struct wslot *s = &w->slots[t->slot];

	t->state = WT_CLAIMQ;
	t->next = NULL;
	if (s->claimq_tail != NULL)
		s->claimq_tail->next = t;
	else
		s->claimq_head = t;
	s->claimq_tail = t;
	s->claimq_n++;
}

static void
claim_all(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		if (w->slots[i].claimq_n > 0 && !w->slots[i].claiming)
			claim_slot(w, i);
}

void
scanner_tick(struct worker *w)
{
	timerwheel_advance(w->wheel, worker_now(w));
	claim_all(w);
	metric_set(w->m.wheel_size, (double)timerwheel_count(w->wheel));
	metric_set(w->m.held, (double)hmap_count(w->tasks));
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	scanner_tick(w);
	arm_tick(w);
}

static void
claim_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	claim_all(arg);
}

static void limbo_add(struct worker *w, const struct wtask *t);

/* An early-claimed task's due millisecond: publish it, unless ZooKeeper
 * has been silent too long meanwhile (then it stays in flight in Redis for
 * the slot's next owner, as after a claim reply that comes too late). */
static void
early_cb(struct timerwheel_timer *tm, void *arg)
{
	struct wtask *t = arg;
	struct worker *w = t->w;
	struct task *pt = t->early;

	t->early = NULL;
	t->state = WT_CLAIMING;
	if (!coord_fresh(w) || !slot_holds(w, t))
		wtask_release(w, t);
	else
		firing_publish_task(w, t, pt);
	task_clear(pt);
	xfree(pt);
}

/*
 * A task claimed before its due time (worker.claim_ahead_ms) waits in the
 * wheel for its millisecond. The due time is the payload's: the task may
 * have been rescheduled since it was scanned. 1 if it waits (then t keeps
 * pt's contents).
 */
static int
claimed_early(struct worker *w, struct wtask *t, const struct task *pt)
{
	if (pt->due_at <= worker_now(w))
		return 0;
	t->state = WT_EARLY;
	t->early = xmemdup(pt, sizeof(*pt));
	t->timer.fire_cb = early_cb;
	timerwheel_add(w->wheel, &t->timer, pt->due_at);
	return 1;
}

static void
claim_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;
	struct worker *w = c->w;
	struct wslot *s = &w->slots[c->slot];
	struct task pt;
	int slot, early = 0;

	s->claiming = 0;
	metric_inc(w->m.claims);
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		/* Unknown outcome: the claim may have run. Put them back as
		 * soon as Redis answers again (the lease reaper would, but
		 * only a lease later). */
		log_warn("claim failed", "slot=%d error=\"%s\"", c->slot,
			 reply ? reply->str : "disconnected");
		if (reply != NULL)
			recovery_write_refused(w, reply->str);
		for (size_t i = 0; i < c->n; i++) {
			if (reply == NULL)
				limbo_add(w, c->tasks[i]);
			wtask_release(w, c->tasks[i]);
		}
		slot_call_free(c);
		return;
	}
	if (reply->type == REDIS_REPLY_INTEGER && reply->integer == -1) {
		metric_add(w->m.fenced, (double)c->n);
		log_warn("claim fenced: a newer epoch owns the slot",
			 "slot=%d epoch=%lld", c->slot, (long long)s->epoch);
		for (size_t i = 0; i < c->n; i++)
			wtask_release(w, c->tasks[i]);
		slot_call_free(c);
		return;
	}
	/* Woken after a long stop (SIGSTOP, a VM pause): the session may be
	 * gone and the slot someone else's. What we claimed stays in flight
	 * for the new owner's reaper; publish nothing. Fresh is not enough:
	 * an answer ZooKeeper sent before the stop, served on waking, can
	 * make it fresh again, and the loop may serve the session's expiry
	 * (the slot lost) before this reply, which Redis sent before the
	 * stop (CI: a task published 3 ms after "slot lost ... session
	 * expired", under the old epoch). */
	if (!coord_fresh(w) || !slot_current(w, c->slot, c->gen)) {
		for (size_t i = 0; i < c->n; i++)
			wtask_release(w, c->tasks[i]);
		slot_call_free(c);
		return;
	}
	/* Two elements for each id sent, in the order sent: the attempt and
	 * the payload of a task claimed, 0 and nil for one that was not (it is
	 * released below). */
	for (size_t j = 0; j < c->n && 2 * j + 1 < reply->elements; j++) {
		redisReply *attempt = reply->element[2 * j];
		redisReply *payload = reply->element[2 * j + 1];
		struct wtask *t = c->tasks[j];

		if (t == NULL || t->state != WT_CLAIMING ||
		    payload->type != REDIS_REPLY_STRING ||
		    attempt->type != REDIS_REPLY_INTEGER)
			continue;
		t->attempt = (int)attempt->integer;
		t->epoch = c->epoch;
		t->lease_until = c->lease_until;
		if (firing_decode(w, t, payload->str, payload->len, &pt) < 0) {
			c->tasks[j] = NULL; /* freed */
			continue;
		}
		if (pause_hold(w, t, &pt)) {
			task_clear(&pt);
			c->tasks[j] = NULL; /* released when held */
			continue;
		}
		if (claimed_early(w, t, &pt)) {
			early++;
			continue;
		}
		if (firing_publish_task(w, t, &pt) < 0)
			c->tasks[j] = NULL; /* freed */
		task_clear(&pt);
	}
	/* The wheel has earlier timers now: tick on the first. */
	if (early) {
		evtimer_del(w->sc->tick_ev);
		arm_tick(w);
	}
	/* Sent but not returned: cancelled, rescheduled or taken. */
	for (size_t i = 0; i < c->n; i++) {
		if (c->tasks[i] != NULL && c->tasks[i]->state == WT_CLAIMING) {
			metric_inc(w->m.claim_lost);
			wtask_release(w, c->tasks[i]);
			c->tasks[i] = NULL;
		}
	}
	slot = c->slot;
	slot_call_free(c);
	if (s->claimq_n > 0)
		claim_slot(w, slot);
}

static void
claim_slot(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];
	struct slot_eval ev;
	struct slot_call *c;
	int64_t now = worker_now(w);
	size_t n;

	if (!coord_may_claim(w, slot) || w->stopping || !redis_up(w->redis) ||
	    !pause_ready(w))
		return;
	/* Not before the reference clock is known (its first sample comes
	 * within a Redis round trip). */
	if (!refclock_known(w->clock)) {
		struct timeval tv = {0, 50000};

		if (!evtimer_pending(w->sc->claim_retry_ev, NULL))
			evtimer_add(w->sc->claim_retry_ev, &tv);
		return;
	}
	/* Back-pressure: leave tasks due in Redis while Kafka is full or
	 * unreachable (there, a task's ttl_ms can still expire it; in the
	 * producer's queue it would wait forever). */
	if (kafka_outq_len(w->kafka) + eos_queued(w) + w->claim_batch >
		    (size_t)w->queue_max ||
	    kafka_brokers_down(w->kafka)) {
		struct timeval tv = {0, 50000};

		metric_inc(w->m.backpressure);
		if (!evtimer_pending(w->sc->claim_retry_ev, NULL))
			evtimer_add(w->sc->claim_retry_ev, &tv);
		return;
	}
	n = s->claimq_n < (size_t)w->claim_batch ? s->claimq_n
						 : (size_t)w->claim_batch;
	c = slot_call_new(w, slot);
	c->epoch = s->epoch;
	c->tasks = xcalloc(n, sizeof(*c->tasks));
	slot_eval_init(&ev, SCRIPT_CLAIM, slot, "dtiae");
	redis_args_addint(&ev.a, s->epoch);
	/* The latest due time a queued task can have (claim_at). */
	redis_args_addint(&ev.a,
			  now + w->claim_ahead_ms + w->claim_group_ms - 1);
	c->lease_until = now + w->lease_ms;
	redis_args_addint(&ev.a, c->lease_until);
	for (size_t i = 0; i < n; i++) {
		struct wtask *t = s->claimq_head;

		s->claimq_head = t->next;
		t->next = NULL;
		t->state = WT_CLAIMING;
		s->busy++;
		c->tasks[i] = t;
		redis_args_addstr(&ev.a, t->id);
	}
	if (s->claimq_head == NULL)
		s->claimq_tail = NULL;
	s->claimq_n -= n;
	c->n = n;
	if (redis_eval_args(w->redis, claim_reply_cb, c, &ev.a) < 0) {
		for (size_t i = 0; i < n; i++)
			wtask_release(w, c->tasks[i]);
		slot_call_free(c);
	} else {
		s->claiming = 1;
	}
	slot_eval_free(&ev);
}

static void scan_slot(struct worker *w, int slot, int64_t now);

/*
 * What a scan's reply covered: up to the score asked for, or, cut by the
 * batch limit, up to the last score read (the next scan starts at that
 * score again, for the entries that share it).
 */
static void
scan_advance(struct worker *w, const struct slot_call *c,
	     const redisReply *reply)
{
	struct wslot *s = &w->slots[c->slot];
	int64_t hwm = c->max;

	if (reply->elements >= 2 * (size_t)w->scan_batch) {
		const redisReply *last = reply->element[reply->elements - 1];
		long long v;

		if (last->type != REDIS_REPLY_STRING ||
		    num_parse_ll(last->str, last->len, &v) < 0) {
			s->scan_full = 1;
			return;
		}
		hwm = v;
	}
	s->scan_hwm = hwm;
	s->scan_gen = c->gen;
}

static void
scan_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;
	struct worker *w = c->w;
	struct wslot *s = &w->slots[c->slot];
	int added = 0;

	s->scanning = 0;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    !slot_current(w, c->slot, c->gen) || w->stopping) {
		if (c->full)
			s->scan_full = 1;
		slot_call_free(c);
		return;
	}
	scan_advance(w, c, reply);
	if (s->rescan) {
		s->rescan = 0;
		scan_slot(w, c->slot, worker_now(w));
	}
	metric_add(w->m.scan_read, (double)(reply->elements / 2));
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const char *id = reply->element[i]->str;
		redisReply *score = reply->element[i + 1];
		long long due;
		struct wtask *t;

		if (num_parse_ll(score->str, score->len, &due) < 0)
			due = strtoll(score->str, NULL, 10);
		t = hmap_get(w->tasks, id);

		if (t != NULL) {
			/* Rescheduled while waiting in the wheel. */
			if (t->state == WT_WHEEL && t->due_at != due) {
				t->due_at = due;
				timerwheel_add(w->wheel, &t->timer,
					       claim_at(w, due));
			}
			continue;
		}
		if (reply->element[i]->len > TASK_ID_MAX)
			continue;
		t = xcalloc(1, sizeof(*t));
		memcpy(t->id, id, reply->element[i]->len + 1);
		t->slot = c->slot;
		t->due_at = due;
		t->state = WT_WHEEL;
		t->w = w;
		t->timer.fire_cb = due_cb;
		t->timer.arg = t;
		hmap_put(w->tasks, t->id, t);
		/* Claimed a little ahead, published on its millisecond
		 * (early_cb): the claim round trip is not part of the
		 * lateness. */
		timerwheel_add(w->wheel, &t->timer, claim_at(w, due));
		added++;
	}
	slot_call_free(c);
	if (added) {
		/* Overdue ones fire now; the rest on their millisecond. */
		scanner_tick(w);
		evtimer_del(w->sc->tick_ev);
		arm_tick(w);
	}
}

static void
scan_slot(struct worker *w, int slot, int64_t now)
{
	char kdue[RKEY_MAX], min[NUM_LL_MAX] = "-inf", max[NUM_LL_MAX],
			     limit[NUM_LL_MAX];
	struct slot_call *c = slot_call_new(w, slot);
	struct wslot *s = &w->slots[slot];
	int64_t mono = clock_mono_ms();

	c->full = s->scan_full || s->scan_gen != s->gen ||
		  mono >= s->next_full_scan_ms;
	c->max = now + w->lookahead_ms;
	if (c->full) {
		s->scan_full = 0;
		s->next_full_scan_ms = mono + w->full_scan_ms;
		metric_inc(w->m.scans_full);
	} else {
		num_format_ll(min, s->scan_hwm);
	}
	rkey_due(kdue, sizeof(kdue), slot);
	num_format_ll(max, c->max);
	num_format_ll(limit, w->scan_batch);
	if (redis_commandl(w->redis, scan_reply_cb, c, "ZRANGEBYSCORE", kdue,
			   min, max, "WITHSCORES", "LIMIT", "0", limit,
			   NULL) < 0) {
		if (c->full)
			s->scan_full = 1;
		slot_call_free(c);
	} else {
		s->scanning = 1;
	}
}

static void
requeue_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;
	struct worker *w = c->w;

	w->slots[c->slot].reaping = 0;
	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER &&
	    reply->integer > 0) {
		w->slots[c->slot].scan_full = 1; /* due again, now */
		metric_add(w->m.requeued, (double)reply->integer);
		log_info("leases expired: tasks requeued", "slot=%d count=%lld",
			 c->slot, (long long)reply->integer);
	}
	slot_call_free(c);
}

struct limbo {
	int slot;
	int64_t due_at;
	char id[TASK_ID_MAX + 1];
	struct limbo *next;
};

static void
limbo_add(struct worker *w, const struct wtask *t)
{
	struct limbo *l = xcalloc(1, sizeof(*l));

	l->slot = t->slot;
	l->due_at = t->due_at;
	memcpy(l->id, t->id, sizeof(l->id));
	l->next = w->sc->limbo;
	w->sc->limbo = l;
}

void
scanner_redis_up(struct worker *w)
{
	struct limbo *l, *n;

	if (w->sc == NULL)
		return;
	/* Wakes and writes may have been missed meanwhile, and the limbo
	 * goes back to due/ below. */
	scanner_scan_all(w);
	for (int slot = 0; slot < w->nslots && w->sc->limbo != NULL; slot++) {
		struct slot_eval ev;

		slot_eval_init(&ev, SCRIPT_UNCLAIM, slot, "di");
		for (l = w->sc->limbo; l != NULL; l = l->next) {
			if (l->slot != slot)
				continue;
			redis_args_addstr(&ev.a, l->id);
			redis_args_addint(&ev.a, l->due_at);
		}
		if (ev.a.argc > 5)
			redis_eval_args(w->redis, NULL, NULL, &ev.a);
		slot_eval_free(&ev);
	}
	for (l = w->sc->limbo; l != NULL; l = n) {
		n = l->next;
		xfree(l);
	}
	w->sc->limbo = NULL;
}

/* The DB's word on expired leases: a task recorded as delivered (its
 * publisher died between the DB update and the Redis cleanup), cancelled
 * or expired must not fire again. */
struct reap_job {
	struct db_job job;
	struct worker *w;
	int slot;
	char **ids;
	size_t n;
	int *final;
	int64_t upto; /* requeue leases ending up to this (SCRIPT_REQUEUE) */
};

static int
reap_run(struct db_conn *c, struct db_job *job)
{
	struct reap_job *r = (struct reap_job *)job;
	struct db_params p;
	struct db_rows rows;

	db_params_init(&p, 1);
	for (size_t i = 0; i < r->n; i++) {
		p.n = 0;
		db_params_str(&p, r->ids[i]);
		if (db_query(c, SQL_TASK_STATUS, &p, &rows) < 0) {
			db_params_free(&p);
			return -1;
		}
		r->final[i] =
			rows.nrows == 1 &&
			strcmp(db_rows_get(&rows, 0, 0, NULL), "scheduled") !=
				0 &&
			strcmp(db_rows_get(&rows, 0, 0, NULL), "firing") != 0;
		db_rows_free(&rows);
	}
	db_params_free(&p);
	return 0;
}

static void
reap_done_cb(struct db_job *job, int status, const char *err)
{
	struct reap_job *r = (struct reap_job *)job;
	struct worker *w = r->w;
	struct slot_eval req, fin;
	struct slot_call *c = slot_call_new(w, r->slot);

	int64_t now = worker_now(w);

	slot_eval_init(&req, SCRIPT_REQUEUE, r->slot, "di");
	redis_args_addint(&req.a, now);
	redis_args_addint(&req.a, r->upto > now ? r->upto : now);
	slot_eval_init(&fin, SCRIPT_FORGET, r->slot, "ita");
	/* DB unavailable: requeue them all (at-least-once over not at all). */
	if (status < 0)
		log_warn("lease reaper cannot ask the database; requeueing",
			 "slot=%d error=\"%s\"", r->slot, err);
	for (size_t i = 0; i < r->n; i++)
		redis_args_addstr(status == 0 && r->final[i] ? &fin.a : &req.a,
				  r->ids[i]);
	if (fin.a.argc > 6) {
		log_info("expired leases of finished tasks dropped",
			 "slot=%d count=%d", r->slot, fin.a.argc - 6);
		redis_eval_args(w->redis, NULL, NULL, &fin.a);
	}
	if (req.a.argc > 7 && !w->stopping &&
	    redis_eval_args(w->redis, requeue_reply_cb, c, &req.a) == 0)
		c = NULL;
	else
		w->slots[r->slot].reaping = 0;
	slot_eval_free(&req);
	slot_eval_free(&fin);
	if (c != NULL)
		slot_call_free(c);
	for (size_t i = 0; i < r->n; i++)
		xfree(r->ids[i]);
	xfree(r->ids);
	xfree(r->final);
	xfree(r);
}

/* Expired leases of tasks we do not hold go back to due (after asking the
 * DB); the ones we hold (Kafka slow, DB update pending) get their lease
 * extended. Right after the slot was gained, the leases an earlier owner
 * took count as expired: that owner is dead or fenced (its session ended
 * before the slot was reassigned, and a worker that lost ZooKeeper for 2/3
 * of the session timeout publishes nothing more), so its claimed tasks
 * fire again now rather than a lease later. */
static void
reap_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;
	struct worker *w = c->w;
	struct wslot *s = &w->slots[c->slot];
	char kinf[RKEY_MAX];
	struct redis_args ext;
	struct reap_job *rj;
	int64_t now = worker_now(w);

	if (reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == 0)
		s->takeover_before = 0; /* nothing in flight at all */
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements == 0 || w->stopping) {
		w->slots[c->slot].reaping = 0;
		slot_call_free(c);
		return;
	}
	rkey_inflight(kinf, sizeof(kinf), c->slot);
	redis_args_init(&ext);
	redis_args_addstr(&ext, "ZADD");
	redis_args_addstr(&ext, kinf);
	redis_args_addstr(&ext, "XX");
	rj = xcalloc(1, sizeof(*rj));
	rj->w = w;
	rj->slot = c->slot;
	rj->ids = xcalloc(reply->elements, sizeof(char *));
	rj->final = xcalloc(reply->elements, sizeof(int));
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const char *id = reply->element[i]->str;
		int64_t lease = strtoll(reply->element[i + 1]->str, NULL, 10);

		if (hmap_get(w->tasks, id) != NULL) {
			redis_args_addint(&ext, now + w->lease_ms);
			redis_args_addstr(&ext, id);
		} else if (lease <= now || lease < s->takeover_before) {
			rj->ids[rj->n++] = xstrdup(id);
		}
	}
	rj->upto = s->takeover_before - 1;
	/* Every earlier owner's lease was seen. */
	if (reply->elements / 2 < REAP_LIMIT)
		s->takeover_before = 0;
	if (ext.argc > 3)
		redis_command_argv(w->redis, NULL, NULL, ext.argc, ext.argv,
				   ext.len);
	redis_args_free(&ext);
	slot_call_free(c);
	if (rj->n == 0) {
		w->slots[rj->slot].reaping = 0;
		xfree(rj->ids);
		xfree(rj->final);
		xfree(rj);
		return;
	}
	rj->job.run = reap_run;
	rj->job.done_cb = reap_done_cb;
	db_pool_submit(w->db, &rj->job);
}

static void
reap_slot(struct worker *w, int slot, int64_t now)
{
	char kinf[RKEY_MAX], max[NUM_LL_MAX], limit[NUM_LL_MAX];
	struct slot_call *c = slot_call_new(w, slot);
	int64_t upto = now + w->lease_ms / 2;

	/* Half a lease ahead: the leases of tasks we still hold are renewed
	 * before they run out; only expired ones of others are requeued (and
	 * after a takeover, all of an earlier owner's). */
	if (w->slots[slot].takeover_before > upto)
		upto = w->slots[slot].takeover_before;
	rkey_inflight(kinf, sizeof(kinf), slot);
	num_format_ll(max, upto);
	num_format_ll(limit, REAP_LIMIT);
	if (redis_commandl(w->redis, reap_reply_cb, c, "ZRANGEBYSCORE", kinf,
			   "-inf", max, "WITHSCORES", "LIMIT", "0", limit,
			   NULL) < 0)
		slot_call_free(c);
	else
		w->slots[slot].reaping = 1;
}

/* Horizon loader ------------------------------------------------------ */

struct load_job {
	struct db_job job;
	struct worker *w;
	int slot;
	unsigned gen;
	int64_t from;
	int64_t to;
	int64_t next_from;
	struct db_rows rows;
};

static int
load_run(struct db_conn *c, struct db_job *job)
{
	struct load_job *l = (struct load_job *)job;
	struct db_params p;
	struct db_rows st;
	int rc;

	db_params_init(&p, 4);
	db_params_int(&p, l->slot);
	rc = db_query(c, "SELECT loaded_until FROM slot_state WHERE slot = ?",
		      &p, &st);
	if (rc < 0) {
		db_params_free(&p);
		return -1;
	}
	l->from = st.nrows ? db_rows_int(&st, 0, 0) : 0;
	db_rows_free(&st);
	if (l->from >= l->to) {
		l->next_from = l->from;
		db_params_free(&p);
		return 0;
	}
	db_params_int(&p, l->from);
	db_params_int(&p, l->to);
	db_params_int(&p, LOAD_BATCH);
	rc = db_query(c, SQL_TASK_DUE_IN_SLOT, &p, &l->rows);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	/* A full batch may stop inside a millisecond: resume at the last
	 * due time (re-indexing that millisecond is harmless). */
	l->next_from =
		l->rows.nrows == LOAD_BATCH
			? db_rows_int(&l->rows, l->rows.nrows - 1, PC_DUE_AT)
			: l->to;
	if (l->next_from == l->from && l->rows.nrows == LOAD_BATCH)
		l->next_from = l->from + 1;
	return 0;
}

/* Moves a slot's time pointer forward (never back); then(status, err,
 * arg) runs on the loop when it is saved or failed. */
struct pointer_job {
	struct db_job job;
	int slot;
	int64_t until;
	void (*then)(int status, const char *err, void *arg);
	void *arg;
};

static int
pointer_run(struct db_conn *c, struct db_job *job)
{
	struct pointer_job *pj = (struct pointer_job *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 3);
	db_params_int(&p, pj->slot);
	db_params_int(&p, pj->until);
	db_params_int(&p, clock_now_ms());
	rc = db_exec(c, SQL_SLOT_POINTER, &p, NULL);
	db_params_free(&p);
	return rc;
}

static void
pointer_done_cb(struct db_job *job, int status, const char *err)
{
	struct pointer_job *pj = (struct pointer_job *)job;

	if (pj->then != NULL)
		pj->then(status, err, pj->arg);
	else if (status < 0)
		log_warn("time pointer not saved", "slot=%d error=\"%s\"",
			 pj->slot, err);
	xfree(pj);
}

void
scanner_save_pointer(struct worker *w, int slot, int64_t until,
		     void (*then)(int status, const char *err, void *arg),
		     void *arg)
{
	struct pointer_job *pj = xcalloc(1, sizeof(*pj));

	pj->slot = slot;
	pj->until = until;
	pj->then = then;
	pj->arg = arg;
	pj->job.run = pointer_run;
	pj->job.done_cb = pointer_done_cb;
	db_pool_submit(w->db, &pj->job);
}

struct index_call {
	struct worker *w;
	int slot;
	int64_t from; /* the due times loaded: from .. next_from */
	int64_t next_from;
	size_t n;
};

static void
index_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct index_call *ic = arg;
	struct worker *w = ic->w;

	w->slots[ic->slot].loading = 0;
	if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
		log_warn("horizon load not indexed", "slot=%d error=\"%s\"",
			 ic->slot, reply ? reply->str : "disconnected");
		xfree(ic);
		return;
	}
	if (reply->integer > 0) {
		/* Normally far ahead; after a slot's first load or a long
		 * stop, due soon or overdue, below the scanned score. */
		if (ic->from <= w->slots[ic->slot].scan_hwm)
			w->slots[ic->slot].scan_full = 1;
		metric_add(w->m.loaded, (double)reply->integer);
		log_info("horizon loaded", "slot=%d tasks=%lld", ic->slot,
			 (long long)reply->integer);
	}
	/* Only once the index holds the window does the pointer move. */
	scanner_save_pointer(w, ic->slot, ic->next_from, NULL, NULL);
	if (ic->n == LOAD_BATCH)
		w->slots[ic->slot].next_load_ms = 0;
	xfree(ic);
}

static void
load_done_cb(struct db_job *job, int status, const char *err)
{
	struct load_job *l = (struct load_job *)job;
	struct worker *w = l->w;
	struct index_call *ic;
	struct rindex ix;

	if (status < 0) {
		log_warn("horizon load failed", "slot=%d error=\"%s\"", l->slot,
			 err);
		w->slots[l->slot].loading = 0;
		goto out;
	}
	if (l->next_from == l->from || !slot_current(w, l->slot, l->gen)) {
		w->slots[l->slot].loading = 0;
		goto out;
	}
	rindex_init(&ix, l->slot, w->bucket_ms,
		    clock_now_ms() + w->bucket_near_ms);
	for (size_t i = 0; i < l->rows.nrows; i++)
		rindex_add_row(&ix, &l->rows, i);
	ic = xcalloc(1, sizeof(*ic));
	ic->w = w;
	ic->slot = l->slot;
	ic->from = l->from;
	ic->next_from = l->next_from;
	ic->n = l->rows.nrows;
	if (l->rows.nrows == 0) {
		/* Nothing to index: just move the pointer. */
		redisReply zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};

		index_reply_cb(w->redis, &zero, ic);
	} else if (redis_eval_args(w->redis, index_reply_cb, ic, &ix.ev.a) <
		   0) {
		w->slots[l->slot].loading = 0;
		xfree(ic);
	}
	rindex_free(&ix);
out:
	db_rows_free(&l->rows);
	xfree(l);
}

static void
trim_moved_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;

	if (reply != NULL && reply->type == REDIS_REPLY_STRING)
		c->w->slots[c->slot].moved_cursor =
			strtoll(reply->str, NULL, 10);
	slot_call_free(c);
}

/* One HSCAN step of the slot's moved entries, deleting those whose last
 * copy was due before `before` (left by a cancel, or by a reschedule whose
 * old copy had already left its bucket). */
static void
trim_moved(struct worker *w, int slot, int64_t before)
{
	struct slot_call *c = slot_call_new(w, slot);
	struct slot_eval ev;

	slot_eval_init(&ev, SCRIPT_MOVED_TRIM, slot, "v");
	redis_args_addint(&ev.a, w->slots[slot].moved_cursor);
	redis_args_addint(&ev.a, before);
	if (redis_eval_args(w->redis, trim_moved_cb, c, &ev.a) < 0)
		slot_call_free(c);
	slot_eval_free(&ev);
}

static void
load_slot(struct worker *w, int slot, int64_t now)
{
	struct load_job *l = xcalloc(1, sizeof(*l));
	char kc[RKEY_MAX], before[NUM_LL_MAX];

	/* Cancel tombstones (scored by the later of the cancel and the
	 * task's due time) outlive a loader's round trip and the bucket a
	 * copy may wait in; moved entries outlive their copies likewise. */
	rkey_cancelled(kc, sizeof(kc), slot);
	num_format_ll(before, now - 3600000);
	redis_commandl(w->redis, NULL, NULL, "ZREMRANGEBYSCORE", kc, "-inf",
		       before, NULL);
	trim_moved(w, slot, now - 3600000);

	l->w = w;
	l->slot = slot;
	l->gen = w->slots[slot].gen;
	l->to = now + w->horizon_ms;
	l->job.run = load_run;
	l->job.done_cb = load_done_cb;
	w->slots[slot].loading = 1;
	db_pool_submit(w->db, &l->job);
}

/* Sweeper: the safety net under every index write (SQL_TASK_OVERDUE). */
struct sweep_job {
	struct db_job job;
	struct worker *w;
	int slot;
	unsigned gen;
	int64_t before;
	struct db_rows rows;
};

static int
sweep_run(struct db_conn *c, struct db_job *job)
{
	struct sweep_job *sj = (struct sweep_job *)job;
	struct db_params p;
	int rc;

	db_params_init(&p, 3);
	db_params_int(&p, sj->slot);
	db_params_int(&p, sj->before);
	db_params_int(&p, clock_now_ms());
	rc = db_query(c, SQL_TASK_OVERDUE, &p, &sj->rows);
	db_params_free(&p);
	return rc;
}

static void
swept_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;

	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER &&
	    reply->integer > 0) {
		c->w->slots[c->slot].scan_full = 1; /* overdue */
		metric_add(c->w->m.loaded, (double)reply->integer);
		log_warn("overdue tasks missing from the index: re-indexed",
			 "slot=%d count=%lld", c->slot,
			 (long long)reply->integer);
	}
	slot_call_free(c);
}

void
scanner_task_finished(struct worker *w, const struct wtask *t)
{
	struct wslot *s = &w->slots[t->slot];

	if (s->finished != NULL)
		hmap_set_add(&s->finished, t->id);
	if (s->mode == SM_REBUILD)
		recovery_task_finished(w, t);
}

void
scanner_free(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++) {
		hmap_set_free(&w->slots[i].finished);
		hmap_set_free(&w->slots[i].rebuild_done);
	}
	xfree(w->sc);
	w->sc = NULL;
}

void
scanner_release(struct worker *w)
{
	event_free(w->sc->scan_ev);
	event_free(w->sc->tick_ev);
	event_free(w->sc->claim_retry_ev);
	w->sc->scan_ev = w->sc->tick_ev = w->sc->claim_retry_ev = NULL;
	scanner_redis_up(w); /* sends and frees what is left */
}

static void
sweep_done_cb(struct db_job *job, int status, const char *err)
{
	struct sweep_job *sj = (struct sweep_job *)job;
	struct worker *w = sj->w;
	struct wslot *s = &w->slots[sj->slot];
	struct slot_call *c;
	struct rindex ix;

	s->sweeping = 0;
	if (status == 0 && slot_current(w, sj->slot, sj->gen) &&
	    s->mode == SM_REDIS) {
		rindex_init(&ix, sj->slot, w->bucket_ms,
			    clock_now_ms() + w->bucket_near_ms);
		for (size_t i = 0; i < sj->rows.nrows; i++) {
			const char *id = db_rows_get(&sj->rows, i, PC_ID, NULL);

			/* Held (publishing, its DB update pending) or
			 * finished since the read: not missing. */
			if (hmap_get(w->tasks, id) == NULL &&
			    (s->finished == NULL ||
			     hmap_get(s->finished, id) == NULL))
				rindex_add_row(&ix, &sj->rows, i);
		}
		c = slot_call_new(w, sj->slot);
		if (rindex_count(&ix) == 0 ||
		    redis_eval_args(w->redis, swept_cb, c, &ix.ev.a) < 0)
			slot_call_free(c);
		rindex_free(&ix);
	}
	hmap_set_free(&s->finished);
	db_rows_free(&sj->rows);
	xfree(sj);
}

static void
sweep_slot(struct worker *w, int slot, int64_t now)
{
	struct sweep_job *sj = xcalloc(1, sizeof(*sj));

	sj->w = w;
	sj->slot = slot;
	sj->gen = w->slots[slot].gen;
	sj->before = now - SWEEP_OVERDUE_MS;
	sj->job.run = sweep_run;
	sj->job.done_cb = sweep_done_cb;
	w->slots[slot].sweeping = 1;
	if (w->slots[slot].finished == NULL)
		w->slots[slot].finished = hmap_create();
	db_pool_submit(w->db, &sj->job);
}

static void move_slot(struct worker *w, int slot, int64_t now);

static void
move_reply_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *c = arg;
	struct worker *w = c->w;
	int slot = c->slot; /* c is freed before the next call is made */
	struct wslot *s = &w->slots[slot];
	long long moved, dropped, more, first;

	s->moving = 0;
	if (reply == NULL || w->stopping || !slot_current(w, c->slot, c->gen)) {
		slot_call_free(c);
		return;
	}
	if (reply->type == REDIS_REPLY_INTEGER && reply->integer == -1) {
		metric_inc(w->m.fenced);
		log_warn("bucket move fenced: a newer owner holds the slot",
			 "slot=%d epoch=%lld", c->slot, (long long)c->epoch);
		slot_call_free(c);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
		log_warn("bucket move failed", "slot=%d error=\"%s\"", c->slot,
			 reply->type == REDIS_REPLY_ERROR ? reply->str
							  : "bad reply");
		slot_call_free(c);
		return;
	}
	moved = reply->element[0]->integer;
	dropped = reply->element[1]->integer;
	more = reply->element[2]->integer;
	first = reply->element[3]->integer;
	metric_add(w->m.bucket_moved, (double)moved);
	metric_add(w->m.bucket_dropped, (double)dropped);
	if (moved > 0 && first < worker_now(w) + w->lookahead_ms)
		scanner_wake(w, slot);
	slot_call_free(c);
	if (more)
		move_slot(w, slot, worker_now(w));
}

/* Moves the slot's buckets that start within task.bucket_near_ms into
 * due/task (SCRIPT_MOVE), BUCKET_MOVE_BATCH tasks per call. */
static void
move_slot(struct worker *w, int slot, int64_t now)
{
	struct wslot *s = &w->slots[slot];
	struct slot_call *c = slot_call_new(w, slot);
	struct slot_eval ev;

	c->epoch = s->epoch;
	slot_eval_init(&ev, SCRIPT_MOVE, slot, "dtickbve");
	redis_args_addint(&ev.a, s->epoch);
	redis_args_addint(&ev.a, now + w->bucket_near_ms);
	redis_args_addint(&ev.a, BUCKET_MOVE_BATCH);
	if (redis_eval_args(w->redis, move_reply_cb, c, &ev.a) < 0)
		slot_call_free(c);
	else
		s->moving = 1;
	slot_eval_free(&ev);
}

static void
scan_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	int64_t now = worker_now(w), mono = clock_mono_ms();

	if (w->stopping || !redis_up(w->redis))
		return;
	for (int i = 0; i < w->nslots; i++) {
		int jobs = slot_scan_plan(&w->slots[i], mono,
					  (size_t)w->claim_batch);

		if (jobs & SJ_MOVE)
			move_slot(w, i, now);
		if (jobs & SJ_SCAN)
			scan_slot(w, i, now);
		if (jobs & SJ_REAP)
			reap_slot(w, i, now);
		if (jobs & SJ_LOAD)
			load_slot(w, i, now);
		if (jobs & SJ_SWEEP)
			sweep_slot(w, i, now);
	}
}

/* The manager announced a task due soon in slot: scan it now rather than
 * at the next interval. */
static void
wake_cb(struct redis *r, redisReply *msg, void *arg)
{
	struct worker *w = arg;
	char *end;
	long slot;

	if (msg->type != REDIS_REPLY_STRING || w->stopping)
		return;
	slot = strtol(msg->str, &end, 10);
	if (*end != '\0' || slot < 0 || slot >= w->nslots)
		return;
	scanner_wake(w, (int)slot);
}

void
scanner_scan_all(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		w->slots[i].scan_full = 1;
}

void
scanner_wake(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];

	if (w->stopping || !slot_owned(w, slot) || s->mode != SM_REDIS)
		return;
	/* Whatever woke us may have written below the scanned score. */
	s->scan_full = 1;
	if (s->scanning)
		s->rescan = 1;
	else
		scan_slot(w, slot, worker_now(w));
}

void
scanner_start(struct worker *w)
{
	char chan[512];

	int64_t ms = cfg_int(w->cfg, CFG_WORKER_SCAN_INTERVAL_MS);
	struct timeval tv = {(time_t)(ms / 1000),
			     (suseconds_t)(ms % 1000) * 1000};

	/* A write below the scanned score that no wake announced (the
	 * manager wakes for tasks due within the look-ahead by its clock,
	 * and may compute that a little before its write lands) is read by
	 * the next full scan, which must come while the task is still ahead:
	 * two intervals inside the look-ahead. */
	w->full_scan_ms = w->lookahead_ms - 2 * ms;
	if (w->full_scan_ms < ms)
		w->full_scan_ms = ms;
	scanner_scan_all(w); /* nothing read yet */

	w->wheel = timerwheel_create(worker_now(w));
	w->sc = xcalloc(1, sizeof(*w->sc));
	w->sc->scan_ev = event_new(w->base, -1, EV_PERSIST, scan_cb, w);
	w->sc->tick_ev = evtimer_new(w->base, tick_cb, w);
	w->sc->claim_retry_ev = evtimer_new(w->base, claim_retry_cb, w);
	rchan_wake(chan, sizeof(chan), cfg_str(w->cfg, CFG_CLUSTER_ROOT));
	redis_subscribe(w->redis_sub, chan, wake_cb, w);
	event_add(w->sc->scan_ev, &tv);
	arm_tick(w);
}

struct drop_ctx {
	int slot; /* -1: every slot */
	struct wtask **end;
};

static void
drop_waiting(const char *key, void *value, void *arg)
{
	struct wtask *t = value;
	struct drop_ctx *d = arg;

	if ((t->state == WT_WHEEL || t->state == WT_CLAIMQ) &&
	    (d->slot < 0 || t->slot == d->slot))
		*d->end++ = t;
}

static void
drop_tasks(struct worker *w, int slot)
{
	size_t n = hmap_count(w->tasks);
	struct wtask **all = xcalloc(n + 1, sizeof(*all));
	struct drop_ctx d = {slot, all};

	hmap_foreach(w->tasks, drop_waiting, &d);
	for (struct wtask **p = all; p < d.end; p++)
		wtask_release(w, *p);
	xfree(all);
	for (int i = 0; i < w->nslots; i++) {
		if (slot >= 0 && i != slot)
			continue;
		w->slots[i].claimq_head = w->slots[i].claimq_tail = NULL;
		w->slots[i].claimq_n = 0;
		w->slots[i].scan_full = 1;
	}
}

void
scanner_drop_slot(struct worker *w, int slot)
{
	drop_tasks(w, slot);
}

/* Stops scanning and claiming; tasks not yet claimed stay due in Redis. */
void
scanner_stop(struct worker *w)
{
	event_del(w->sc->scan_ev);
	evtimer_del(w->sc->claim_retry_ev);
	drop_tasks(w, -1);
}
