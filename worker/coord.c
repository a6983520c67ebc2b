#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "assign.h"
#include "cfg.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "url.h"
#include "utf8.h"
#include "worker.h"
#include "xmalloc.h"
#include "zk.h"
#include "zknode.h"

/*
 * Coordination through ZooKeeper (DESIGN.md section 3):
 *  - membership: ephemeral /workers/<id>;
 *  - election: ephemeral-sequential /election/c_<id>_<seq>, each candidate
 *    watching only its predecessor; the winner writes /master;
 *  - assignment: the master computes it (proto/assign.c) on every change
 *    and writes it with one zoo_multi guarded by its election node and the
 *    slot nodes' versions, so a deposed master cannot write;
 *  - handover: the master sets `requested`; the owner stops claiming,
 *    drains, then writes owner=requested, epoch+1; a new owner raises the
 *    Redis and DB fences before it claims. A dead owner's slot is given
 *    directly with epoch+1.
 * All ZooKeeper calls are asynchronous; completions run on the loop.
 */

#define COORD_TICK_MS 500
#define REBALANCE_DELAY_US 20000
#define NOAUTH_RETRY_S 1
#define RELEASE_TIMEOUT_MS 15000

/* Coordination's own state: nothing outside this file reads it (the rest
 * of the worker asks coord_fresh(), coord_may_claim(), slot_owned()). */
struct coord {
	char election_path[512];
	/* A candidate's create, or the search for one after a lost answer,
	 * is out: the periodic tick must not stand a second time meanwhile
	 * (a second candidate of ours would wait for the first for good).
	 * Only within the session it was sent in. */
	int electing;
	int64_t electing_session;
	int master;
	int master_node;       /* /master written by us */
	int fenced;	       /* self-fenced: ZooKeeper unreachable */
	int64_t last_zk_ok_ms; /* monotonic time of the last ZK reply */
	int64_t session_timeout_ms;
	int64_t session_id;
	struct slot_node *view; /* last read of each slot node */
	int *view_version;	/* their data versions, -1 unknown */
	char **members;		/* live workers (the master's view) */
	int nmembers;
	int members_known;
	int multi_inflight;
	int multi_noauth; /* the last assignment write met the tree's ACL */
	int64_t rebalance_started_ms;
	struct event *rebalance_ev;
	struct event *coord_ev;
};

static void read_slot(struct worker *w, int slot);
static void read_members(struct worker *w);
static void elect(struct worker *w);
static void check_election(struct worker *w);
static void schedule_rebalance(struct worker *w);
static void slot_reconcile(struct worker *w, int slot);

static int
slot_of_path(const struct worker *w, const char *path)
{
	char prefix[512];
	size_t n;
	char *end;
	long v;

	zpath(prefix, sizeof(prefix), w->root, ZPATH_SLOT_PREFIX);
	n = strlen(prefix);
	if (path == NULL || strncmp(path, prefix, n) != 0)
		return -1;
	v = strtol(path + n, &end, 10);
	if (*end != '\0' || v < 0 || v >= w->nslots)
		return -1;
	return (int)v;
}

int
coord_fresh(const struct worker *w)
{
	return clock_mono_ms() - w->co->last_zk_ok_ms <
	       w->co->session_timeout_ms * 2 / 3;
}

int
coord_may_claim(struct worker *w, int slot)
{
	return slot_owned(w, slot) && w->slots[slot].mode == SM_REDIS &&
	       coord_fresh(w) && eos_slot_ready(w, slot);
}

static void
zk_ok(struct worker *w)
{
	w->co->last_zk_ok_ms = clock_mono_ms();
	if (w->co->fenced) {
		w->co->fenced = 0;
		metric_set(w->m.self_fenced, 0);
		log_info("zookeeper reachable again: claiming resumes", "");
		for (int i = 0; i < w->nslots; i++)
			read_slot(w, i);
	}
}

static void
update_owned_gauge(struct worker *w)
{
	int n = 0;

	for (int i = 0; i < w->nslots; i++) {
		int owned = slot_owned(w, i);

		n += owned;
		metric_vec_set(w->m.epoch, (size_t)i,
			       owned ? (double)w->slots[i].epoch : 0);
	}
	metric_set(w->m.slots_owned, n);
}

/* Slots ---------------------------------------------------------------- */

int
slot_phase_set(struct worker *w, int slot, enum slot_phase to, const char *why)
{
	struct wslot *s = &w->slots[slot];
	enum slot_phase from = s->phase;
	int rc = wslot_move(s, to);

	if (rc == 0)
		return 0;
	if (rc < 0) {
		log_error("slot phase change refused (a bug)",
			  "slot=%d from=%s to=%s reason=\"%s\"", slot,
			  slot_phase_name(from), slot_phase_name(to), why);
		return 0;
	}
	log_debug("slot phase",
		  "slot=%d from=%s to=%s epoch=%lld "
		  "reason=\"%s\"",
		  slot, slot_phase_name(from), slot_phase_name(to),
		  (long long)s->epoch, why);
	if (from == SP_OWNED || to == SP_OWNED)
		update_owned_gauge(w);
	return 1;
}

/* Leaves STARTING or OWNED for IDLE: what was running for the slot stops
 * (scans, claims, a rebuild: their generation is gone). */
void
slot_lose(struct worker *w, int slot, const char *why)
{
	struct wslot *s = &w->slots[slot];

	if (s->phase != SP_OWNED && s->phase != SP_STARTING)
		return;
	if (s->phase == SP_OWNED) {
		metric_inc(w->m.slots_lost);
		log_info("slot lost", "slot=%d epoch=%lld reason=\"%s\"", slot,
			 (long long)s->epoch, why);
	}
	slot_phase_set(w, slot, SP_IDLE, why);
	wslot_set_mode(&w->slots[slot], SM_REDIS);
	scanner_drop_slot(w, slot);
	eos_slot_lost(w, slot);
}

struct fence_call {
	struct worker *w;
	int slot;
	unsigned gen;
};

struct fence_job {
	struct db_job job;
	struct worker *w;
	int slot;
	unsigned gen;
	int64_t epoch;
	int gain_db; /* Redis is down: own the slot in DB mode once done */
};

int
coord_db_fence(struct db_conn *c, int slot, int64_t epoch)
{
	struct db_params p;
	int rc;

	db_params_init(&p, 3);
	db_params_int(&p, slot);
	db_params_int(&p, epoch);
	db_params_int(&p, clock_now_ms());
	rc = db_exec(c, SQL_SLOT_FENCE, &p, NULL);
	db_params_free(&p);
	return rc;
}

static int
fence_run(struct db_conn *c, struct db_job *job)
{
	struct fence_job *f = (struct fence_job *)job;

	return coord_db_fence(c, f->slot, f->epoch);
}

static void gained(struct worker *w, int slot, const char *mode);

static void
fence_done_cb(struct db_job *job, int status, const char *err)
{
	struct fence_job *f = (struct fence_job *)job;
	struct wslot *s = &f->w->slots[f->slot];

	if (status < 0)
		log_warn("database fence not raised",
			 "slot=%d epoch=%lld error=\"%s\"", f->slot,
			 (long long)f->epoch, err);
	if (f->gain_db && s->phase == SP_STARTING && s->gen == f->gen) {
		/* In DB mode the DB fence is the only one: no claims
		 * before it is raised. */
		if (status == 0) {
			wslot_set_mode(&f->w->slots[f->slot], SM_DB);
			gained(f->w, f->slot, "db");
		} else {
			slot_phase_set(f->w, f->slot, SP_IDLE,
				       "database fence not raised");
		}
	}
	xfree(f);
}

static void
submit_fence(struct worker *w, int slot, int gain_db)
{
	struct fence_job *f = xcalloc(1, sizeof(*f));

	f->w = w;
	f->slot = slot;
	f->gen = w->slots[slot].gen;
	f->epoch = w->slots[slot].epoch;
	f->gain_db = gain_db;
	f->job.run = fence_run;
	f->job.done_cb = fence_done_cb;
	db_pool_submit(w->db, &f->job);
}

static void
gained(struct worker *w, int slot, const char *mode)
{
	struct wslot *s = &w->slots[slot];

	slot_phase_set(w, slot, SP_OWNED, "fenced");
	s->next_load_ms = 0;
	s->next_move_ms = 0;
	s->next_reap_ms = 0;
	s->takeover_before = clock_now_ms() + w->lease_ms;
	eos_slot_gained(w, slot);
	metric_inc(w->m.slots_gained);
	log_info("slot gained", "slot=%d epoch=%lld mode=%s", slot,
		 (long long)s->epoch, mode);
	pause_slot_ready(w, slot);
}

static void
redis_fence_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct fence_call *fc = arg;
	struct worker *w = fc->w;
	struct wslot *s = &w->slots[fc->slot];

	if (s->phase != SP_STARTING || s->gen != fc->gen) {
		xfree(fc);
		return;
	}
	if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
		/* Retried by the coordination tick. A refusal (a full Redis
		 * refuses the fence's write) is said once per slot, not per
		 * retry. */
		if (reply != NULL && reply->type == REDIS_REPLY_ERROR &&
		    !s->fence_refused) {
			s->fence_refused = 1;
			log_warn("redis refused the slot's fence: slot not "
				 "started, retrying",
				 "slot=%d epoch=%lld error=\"%s\"", fc->slot,
				 (long long)s->epoch, reply->str);
		}
		slot_phase_set(w, fc->slot, SP_IDLE, "redis fence not raised");
		xfree(fc);
		return;
	}
	s->fence_refused = 0;
	if (reply->integer < 0) {
		metric_inc(w->m.fenced);
		log_warn("slot fenced by a newer epoch in redis",
			 "slot=%d epoch=%lld", fc->slot, (long long)s->epoch);
		slot_phase_set(w, fc->slot, SP_IDLE, "fenced in redis");
		read_slot(w, fc->slot);
		xfree(fc);
		return;
	}
	submit_fence(w, fc->slot, 0);
	gained(w, fc->slot, "redis");
	recovery_slot_ready(w, fc->slot, reply->integer == 1);
	xfree(fc);
}

/* Ours at epoch: raise the Redis fence (the claims' check), then the DB
 * fence (the state updates' check), then claim. */
static void
slot_gain(struct worker *w, int slot, int64_t epoch)
{
	struct wslot *s = &w->slots[slot];
	struct fence_call *fc;
	struct slot_eval ev;

	if (!redis_up(w->redis)) {
		/* Just started, or a blip: Redis gets its grace period before
		 * the slot is taken in DB mode (the tick retries). */
		if (recovery_redis_down_ms(w) < 1000)
			return;
		s->epoch = epoch;
		slot_phase_set(w, slot, SP_STARTING, "gain, redis down");
		submit_fence(w, slot, 1);
		return;
	}
	s->epoch = epoch;
	slot_phase_set(w, slot, SP_STARTING, "gain");
	CRASHPOINT("gain_before_fence");
	fc = xcalloc(1, sizeof(*fc));
	fc->w = w;
	fc->slot = slot;
	fc->gen = s->gen;
	slot_eval_init(&ev, SCRIPT_FENCE, slot, "em");
	redis_args_addint(&ev.a, epoch);
	if (redis_eval_args(w->redis, redis_fence_cb, fc, &ev.a) < 0) {
		slot_phase_set(w, slot, SP_IDLE, "redis unavailable");
		xfree(fc);
	}
	slot_eval_free(&ev);
}

struct release_call {
	struct worker *w;
	int slot;
	unsigned gen;
	char *data;
};

static void
release_done_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct release_call *rc_ = arg;
	struct worker *w = rc_->w;
	struct wslot *s = &w->slots[rc_->slot];
	int current = s->phase == SP_HANDING && s->gen == rc_->gen;

	if (rc == ZOK) {
		zk_ok(w);
		if (current)
			slot_phase_set(w, rc_->slot, SP_IDLE, "handed over");
		metric_inc(w->m.slots_lost);
		log_info("slot handed over", "slot=%d to=%s epoch=%lld",
			 rc_->slot, w->co->view[rc_->slot].requested,
			 (long long)w->co->view[rc_->slot].epoch + 1);
		/* Drained (its transactions committed and recorded, our
		 * producer cleared from the slot's record), or the drain
		 * timed out: the next owner fences our producer. */
		eos_slot_lost(w, rc_->slot);
	} else {
		log_warn("handover write failed", "slot=%d error=\"%s\"",
			 rc_->slot, zerror(rc));
		if (current)
			slot_phase_set(w, rc_->slot, SP_DRAINING,
				       "handover write failed");
	}
	read_slot(w, rc_->slot);
	xfree(rc_->data);
	xfree(rc_);
}

/* Drained: give the slot to the requested worker with the next epoch. */
static void
try_finish_release(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];
	struct slot_node n = w->co->view[slot];
	struct release_call *rc;
	char path[512];

	if (s->phase != SP_DRAINING || w->co->view_version[slot] < 0)
		return;
	if (s->busy > 0) {
		if (clock_mono_ms() - s->release_started_ms <
		    RELEASE_TIMEOUT_MS)
			return;
		log_warn("handover drain timed out; releasing anyway",
			 "slot=%d busy=%d", slot, s->busy);
	}
	if (!coord_fresh(w) || !eos_release(w, slot, s->busy == 0))
		return;
	CRASHPOINT("handover_drained_before_release");
	snprintf(n.owner, sizeof(n.owner), "%s", n.requested);
	n.requested[0] = '\0';
	n.epoch++;
	n.updated_at = clock_now_ms();
	rc = xcalloc(1, sizeof(*rc));
	rc->w = w;
	rc->slot = slot;
	rc->data = slot_node_encode(&n);
	zpath_slot(path, sizeof(path), w->root, slot);
	slot_phase_set(w, slot, SP_HANDING, "drained");
	rc->gen = s->gen;
	if (zk_aset(w->zk, path, rc->data, w->co->view_version[slot],
		    release_done_cb, rc) < 0) {
		slot_phase_set(w, slot, SP_DRAINING, "handover write not sent");
		xfree(rc->data);
		xfree(rc);
	}
}

void
coord_slot_idle(struct worker *w, int slot)
{
	if (w->zk == NULL)
		return;
	try_finish_release(w, slot);
}

static void
begin_release(struct worker *w, int slot)
{
	struct wslot *s = &w->slots[slot];

	if (s->phase == SP_DRAINING || s->phase == SP_HANDING)
		return;
	log_info("handover requested: draining", "slot=%d to=%s busy=%d", slot,
		 w->co->view[slot].requested, s->busy);
	slot_phase_set(w, slot, SP_DRAINING, "handover requested");
	s->release_started_ms = clock_mono_ms();
	wslot_set_mode(&w->slots[slot], SM_REDIS);
	scanner_drop_slot(w, slot);
	try_finish_release(w, slot);
}

/* Makes the local state of a slot follow its node. */
static void
slot_reconcile(struct worker *w, int slot)
{
	const struct slot_node *v = &w->co->view[slot];
	struct slot_seen seen;
	const char *why;
	int act;

	if (w->co->view_version[slot] < 0 || w->stopping)
		return;
	seen.mine = strcmp(v->owner, w->id) == 0;
	seen.requested_other =
		v->requested[0] && strcmp(v->requested, w->id) != 0;
	seen.epoch = v->epoch;
	act = slot_decide(&w->slots[slot], &seen, coord_fresh(w));
	why = !seen.mine ? (v->owner[0] ? "reassigned" : "unowned")
			 : "epoch changed";
	if (act & SD_LOSE)
		slot_lose(w, slot, why);
	if (act & SD_DROP)
		slot_phase_set(w, slot, SP_IDLE, why);
	if (act & SD_RELEASE)
		begin_release(w, slot);
	if (act & SD_CANCEL) {
		/* The master took the request back. */
		slot_phase_set(w, slot, SP_IDLE, "handover cancelled");
		log_info("handover cancelled", "slot=%d", slot);
	}
	if (act & SD_GAIN)
		slot_gain(w, slot, v->epoch);
}

static void
slot_read_cb(struct zk *z, int rc, const char *data, int len,
	     const struct Stat *st, void *arg)
{
	struct worker *w = ((struct fence_call *)arg)->w;
	int slot = ((struct fence_call *)arg)->slot;
	struct slot_node n;

	xfree(arg);
	if (rc != ZOK) {
		if (rc == ZNONODE)
			log_error("slot node missing (is a manager running?)",
				  "slot=%d", slot);
		return;
	}
	zk_ok(w);
	if (slot_node_decode(data, len, &n) < 0) {
		log_error("slot node unreadable", "slot=%d data=\"%.*s\"", slot,
			  len > 200 ? 200 : len, data ? data : "");
		return;
	}
	w->co->view[slot] = n;
	w->co->view_version[slot] = st->version;
	slot_reconcile(w, slot);
	if (w->co->master)
		schedule_rebalance(w);
}

static void
read_slot(struct worker *w, int slot)
{
	struct fence_call *a = xcalloc(1, sizeof(*a));
	char path[512];

	a->w = w;
	a->slot = slot;
	zpath_slot(path, sizeof(path), w->root, slot);
	if (zk_aget(w->zk, path, 1, slot_read_cb, a) < 0)
		xfree(a);
}

/* Master: assignment ---------------------------------------------------- */

static int
is_member(const struct worker *w, const char *id)
{
	if (id == NULL || id[0] == '\0')
		return 0;
	for (int i = 0; i < w->co->nmembers; i++)
		if (!strcmp(w->co->members[i], id))
			return 1;
	return 0;
}

struct multi_call {
	struct worker *w;
	int n;
	zoo_op_t *ops;
	zoo_op_result_t *res;
	char **paths;
	char **datas;
};

static void
multi_free(struct multi_call *m)
{
	for (int i = 0; i < m->n; i++) {
		xfree(m->paths[i]);
		xfree(m->datas[i]);
	}
	xfree(m->ops);
	xfree(m->res);
	xfree(m->paths);
	xfree(m->datas);
	xfree(m);
}

/* The slot nodes' ACL no longer names our identity (a password rotated
 * in the tree before this worker got it): no re-read makes the write
 * pass, so say which key once and try again each second, not at once. */
static void
assign_noauth(struct worker *w, struct zk *z)
{
	struct timeval tv = {NOAUTH_RETRY_S, 0};
	char err[512];

	if (!w->co->multi_noauth) {
		w->co->multi_noauth = 1;
		if (zk_check_access(z, w->root, err, sizeof(err)) == 0)
			snprintf(err, sizeof(err),
				 "zookeeper: %s (zookeeper.auth_file)",
				 zerror(ZNOAUTH));
		log_error("assignment write refused by the tree's ACL; "
			  "retrying every second",
			  "error=\"%s\"", err);
	}
	evtimer_del(w->co->rebalance_ev);
	evtimer_add(w->co->rebalance_ev, &tv);
}

static void
multi_done_cb(struct zk *z, int rc, void *arg)
{
	struct multi_call *m = arg;
	struct worker *w = m->w;

	w->co->multi_inflight = 0;
	if (rc == ZOK) {
		zk_ok(w);
		w->co->multi_noauth = 0;
		metric_inc(w->m.rebalances);
		log_info("assignment written", "changes=%d", m->n - 1);
	} else if (rc == ZNOAUTH) {
		assign_noauth(w, z);
	} else {
		/* A version moved under us (a handover completed) or we are
		 * no longer master: re-read and let the watches decide. */
		log_info("assignment write refused, retrying", "error=\"%s\"",
			 zerror(rc));
		for (int i = 0; i < w->nslots; i++)
			read_slot(w, i);
	}
	multi_free(m);
}

static int
view_complete(const struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		if (w->co->view_version[i] < 0)
			return 0;
	return w->co->members_known;
}

static void
multi_add_set(struct multi_call *m, const char *path, const struct slot_node *n,
	      int version)
{
	m->paths[m->n] = xstrdup(path);
	m->datas[m->n] = slot_node_encode(n);
	zoo_set_op_init(&m->ops[m->n], m->paths[m->n], m->datas[m->n],
			(int)strlen(m->datas[m->n]), version, NULL);
	m->n++;
}

static void
rebalance(struct worker *w)
{
	const char **holders, **target;
	struct multi_call *m;
	int settled = 1;

	if (!w->co->master || w->co->multi_inflight || !view_complete(w) ||
	    w->co->election_path[0] == '\0' || w->stopping)
		return;
	holders = xcalloc((size_t)w->nslots, sizeof(*holders));
	target = xcalloc((size_t)w->nslots, sizeof(*target));
	for (int i = 0; i < w->nslots; i++) {
		const struct slot_node *v = &w->co->view[i];

		if (is_member(w, v->requested))
			holders[i] = v->requested;
		else if (is_member(w, v->owner))
			holders[i] = v->owner;
	}
	assign_compute(w->nslots, holders, (const char *const *)w->co->members,
		       w->co->nmembers, target);
	m = xcalloc(1, sizeof(*m));
	m->w = w;
	m->ops = xcalloc((size_t)w->nslots + 1, sizeof(*m->ops));
	m->res = xcalloc((size_t)w->nslots + 1, sizeof(*m->res));
	m->paths = xcalloc((size_t)w->nslots + 1, sizeof(char *));
	m->datas = xcalloc((size_t)w->nslots + 1, sizeof(char *));
	/* Guard: our election node must still exist. */
	m->paths[0] = xstrdup(w->co->election_path);
	zoo_check_op_init(&m->ops[0], m->paths[0], -1);
	m->n = 1;
	for (int i = 0; i < w->nslots; i++) {
		struct slot_node n = w->co->view[i];
		const char *t = target[i] ? target[i] : "";
		char path[512];

		if (!strcmp(n.owner, t) && n.requested[0] == '\0')
			continue;
		settled = 0;
		zpath_slot(path, sizeof(path), w->root, i);
		n.updated_at = clock_now_ms();
		if (!is_member(w, n.owner)) {
			/* Dead or no owner: give it directly. */
			snprintf(n.owner, sizeof(n.owner), "%s", t);
			n.requested[0] = '\0';
			n.epoch++;
		} else if (!strcmp(n.owner, t)) {
			n.requested[0] = '\0';
		} else if (strcmp(n.requested, t) != 0) {
			snprintf(n.requested, sizeof(n.requested), "%s", t);
		} else {
			continue; /* handover under way */
		}
		multi_add_set(m, path, &n, w->co->view_version[i]);
	}
	xfree(holders);
	xfree(target);
	if (settled) {
		if (w->co->rebalance_started_ms > 0) {
			double s = (double)(clock_mono_ms() -
					    w->co->rebalance_started_ms) /
				   1000.0;

			metric_observe(w->m.rebalance_seconds, s);
			log_info("rebalance complete",
				 "duration_ms=%.0f "
				 "workers=%d",
				 s * 1000, w->co->nmembers);
			w->co->rebalance_started_ms = 0;
		}
		multi_free(m);
		return;
	}
	if (w->co->rebalance_started_ms == 0)
		w->co->rebalance_started_ms = clock_mono_ms();
	if (m->n == 1) {
		multi_free(m); /* only handovers in progress */
		return;
	}
	CRASHPOINT("master_before_assign_write");
	if (zk_amulti(w->zk, m->n, m->ops, m->res, multi_done_cb, m) < 0) {
		multi_free(m);
		return;
	}
	w->co->multi_inflight = 1;
}

static void
rebalance_cb(evutil_socket_t fd, short what, void *arg)
{
	rebalance(arg);
}

static void
schedule_rebalance(struct worker *w)
{
	struct timeval tv = {0, REBALANCE_DELAY_US};

	if (!evtimer_pending(w->co->rebalance_ev, NULL))
		evtimer_add(w->co->rebalance_ev, &tv);
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
members_cb(struct zk *z, int rc, const struct String_vector *names, void *arg)
{
	struct worker *w = arg;

	if (rc != ZOK || !w->co->master)
		return;
	zk_ok(w);
	for (int i = 0; i < w->co->nmembers; i++)
		xfree(w->co->members[i]);
	xfree(w->co->members);
	w->co->nmembers = 0;
	w->co->members = xcalloc((size_t)names->count + 1, sizeof(char *));
	for (int i = 0; i < names->count; i++) {
		char why[256];

		/* Anyone with access to ZooKeeper may create a node here: a
		 * name no worker could have would be cut or unwritable in
		 * the slot nodes' JSON, so it gets no slots. */
		if (cfg_check_worker_id(names->data[i], why, sizeof(why)) < 0 ||
		    names->data[i][0] == '\0') {
			log_warn("not a worker id: ignored", "node=\"%.100s\"",
				 names->data[i]);
			continue;
		}
		w->co->members[w->co->nmembers++] = xstrdup(names->data[i]);
	}
	qsort(w->co->members, (size_t)w->co->nmembers, sizeof(char *), cmp_str);
	w->co->members_known = 1;
	if (w->co->rebalance_started_ms == 0)
		w->co->rebalance_started_ms = clock_mono_ms();
	log_info("membership", "workers=%d", w->co->nmembers);
	schedule_rebalance(w);
}

static void
read_members(struct worker *w)
{
	char path[512];

	zpath(path, sizeof(path), w->root, ZPATH_WORKERS);
	zk_aget_children(w->zk, path, 1, members_cb, w);
}

/* Master: /master node -------------------------------------------------- */

static void master_node_cb(struct zk *z, int rc, const char *value, void *arg);

static void
write_master_node(struct worker *w)
{
	char path[512], *data;
	json_t *j;

	zpath(path, sizeof(path), w->root, ZPATH_MASTER);
	j = json_object();
	json_object_set_new(j, "id", utf8_json_str(w->id));
	json_object_set_new(j, "since", json_integer(clock_now_ms()));
	data = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (data == NULL)
		abort();
	zk_acreate(w->zk, path, data, ZOO_EPHEMERAL, master_node_cb, w);
	free(data);
}

static void
master_exists_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct worker *w = arg;

	if (!w->co->master)
		return;
	if (rc == ZNONODE)
		write_master_node(w);
	else if (rc == ZOK && st->ephemeralOwner == zk_session_id(w->zk))
		w->co->master_node = 1;
	/* Else a previous master's node: the watch tells us when it goes. */
}

static void
master_node_cb(struct zk *z, int rc, const char *value, void *arg)
{
	struct worker *w = arg;
	char path[512];

	if (rc == ZOK) {
		w->co->master_node = 1;
		return;
	}
	if (rc == ZNODEEXISTS && w->co->master) {
		zpath(path, sizeof(path), w->root, ZPATH_MASTER);
		zk_aexists(w->zk, path, 1, master_exists_cb, w);
	}
}

/* Election -------------------------------------------------------------- */

static const char *
seq_of(const char *name)
{
	const char *u = strrchr(name, '_');

	return u ? u + 1 : name;
}

static int
cmp_seq(const void *a, const void *b)
{
	return strcmp(seq_of(*(char *const *)a), seq_of(*(char *const *)b));
}

static void
become_master(struct worker *w)
{
	if (w->co->master)
		return;
	w->co->master = 1;
	metric_set(w->m.is_master, 1);
	log_info("master elected", "id=%s node=%s", w->id,
		 w->co->election_path);
	write_master_node(w);
	read_members(w);
	for (int i = 0; i < w->nslots; i++)
		read_slot(w, i);
}

static void
step_down(struct worker *w, const char *why)
{
	if (!w->co->master)
		return;
	w->co->master = 0;
	w->co->master_node = 0;
	w->co->members_known = 0;
	metric_set(w->m.is_master, 0);
	log_info("no longer master", "reason=\"%s\"", why);
}

static void
predecessor_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct worker *w = arg;

	/* Gone between the listing and the watch: look again. */
	if (rc == ZNONODE)
		check_election(w);
}

static void
election_children_cb(struct zk *z, int rc, const struct String_vector *names,
		     void *arg)
{
	struct worker *w = arg;
	const char *mine = strrchr(w->co->election_path, '/');
	char **sorted;
	int me = -1;

	if (rc != ZOK || mine == NULL)
		return;
	zk_ok(w);
	mine++;
	sorted = xcalloc((size_t)names->count + 1, sizeof(char *));
	for (int i = 0; i < names->count; i++)
		sorted[i] = names->data[i];
	qsort(sorted, (size_t)names->count, sizeof(char *), cmp_seq);
	for (int i = 0; i < names->count; i++)
		if (!strcmp(sorted[i], mine))
			me = i;
	if (me < 0) {
		/* Our candidate vanished with an old session: stand again. */
		step_down(w, "candidate node gone");
		w->co->election_path[0] = '\0';
		elect(w);
	} else if (me == 0) {
		become_master(w);
	} else {
		char path[512];

		step_down(w, "not the first candidate");
		zpath_child(path, sizeof(path), w->root, ZPATH_ELECTION,
			    sorted[me - 1]);
		zk_aexists(w->zk, path, 1, predecessor_cb, w);
	}
	xfree(sorted);
}

static void
check_election(struct worker *w)
{
	char path[512];

	zpath(path, sizeof(path), w->root, ZPATH_ELECTION);
	zk_aget_children(w->zk, path, 0, election_children_cb, w);
}

struct adopt_call {
	struct worker *w;
	char path[512];
};

static void
adopt_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	struct adopt_call *a = arg;
	struct worker *w = a->w;

	if (rc == ZOK && st->ephemeralOwner == zk_session_id(z) &&
	    w->co->election_path[0] == '\0') {
		snprintf(w->co->election_path, sizeof(w->co->election_path),
			 "%s", a->path);
		check_election(w);
	}
	/* Adopted, or not ours after all: the tick stands again if need be. */
	w->co->electing = 0;
	xfree(a);
}

/* After ZCONNECTIONLOSS on create the node may exist: look for a
 * candidate of ours owned by this session before standing again. */
static void
find_own_cb(struct zk *z, int rc, const struct String_vector *names, void *arg)
{
	struct worker *w = arg;
	char prefix[256];
	int found = 0;

	if (rc != ZOK) {
		w->co->electing = 0;
		elect(w);
		return;
	}
	snprintf(prefix, sizeof(prefix), "c_%s_", w->id);
	for (int i = 0; i < names->count; i++) {
		if (!strncmp(names->data[i], prefix, strlen(prefix)) &&
		    strlen(names->data[i]) == strlen(prefix) + 10) {
			struct adopt_call *a = xcalloc(1, sizeof(*a));

			a->w = w;
			zpath_child(a->path, sizeof(a->path), w->root,
				    ZPATH_ELECTION, names->data[i]);
			if (zk_aexists(z, a->path, 0, adopt_cb, a) == 0)
				found = 1;
			else
				xfree(a);
		}
	}
	if (!found) {
		w->co->electing = 0;
		elect(w);
	}
}

static void
elect_done(struct worker *w, int rc, const char *value)
{
	char path[512];

	if (rc == ZOK) {
		w->co->electing = 0;
		zk_ok(w);
		snprintf(w->co->election_path, sizeof(w->co->election_path),
			 "%s", value);
		log_info("election candidate", "node=%s", value);
		check_election(w);
	} else if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
		zpath(path, sizeof(path), w->root, ZPATH_ELECTION);
		if (zk_aget_children(w->zk, path, 0, find_own_cb, w) < 0)
			w->co->electing = 0;
	} else {
		w->co->electing = 0;
		log_warn("election create failed", "error=\"%s\"", zerror(rc));
	}
}

/* A candidate's answer held back (test builds, fault point
 * election_answer_late) as if ZooKeeper took longer than the
 * coordination tick to answer. */
struct late_answer {
	struct worker *w;
	int rc;
	char value[512];
	struct event *ev;
};

static void
late_answer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct late_answer *l = arg;

	elect_done(l->w, l->rc, l->value);
	event_free(l->ev);
	xfree(l);
}

static void
elect_cb(struct zk *z, int rc, const char *value, void *arg)
{
	struct worker *w = arg;

	if (FAULTPOINT("election_answer_late")) {
		struct late_answer *l = xcalloc(1, sizeof(*l));
		struct timeval tv = {1, 200000};

		l->w = w;
		l->rc = rc;
		snprintf(l->value, sizeof(l->value), "%s", value ? value : "");
		l->ev = evtimer_new(w->base, late_answer_cb, l);
		evtimer_add(l->ev, &tv);
		return;
	}
	elect_done(w, rc, value);
}

static void
elect(struct worker *w)
{
	char path[512];

	if (w->stopping || (w->co->electing &&
			    w->co->electing_session == zk_session_id(w->zk)))
		return;
	snprintf(path, sizeof(path), "%s%s/c_%s_", w->root, ZPATH_ELECTION,
		 w->id);
	w->co->electing_session = zk_session_id(w->zk);
	w->co->electing = zk_acreate(w->zk, path, "", ZOO_EPHEMERAL_SEQUENTIAL,
				     elect_cb, w) == 0;
}

/* Membership ------------------------------------------------------------ */

/* Where others reach our /metrics (the manager's console sums the
 * workers' lateness): worker.http_listen, with a wildcard address replaced
 * by the host name. */
static void
metrics_addr(const struct worker *w, const char *host, char *buf, size_t len)
{
	const char *listen = cfg_str(w->cfg, CFG_WORKER_HTTP_LISTEN);
	char lhost[256];
	int port;

	if (hostport_parse(listen, lhost, sizeof(lhost), &port) == 0 &&
	    (lhost[0] == '\0' || !strcmp(lhost, "0.0.0.0") ||
	     !strcmp(lhost, "::")))
		snprintf(buf, len, "%s:%d", host, port);
	else
		snprintf(buf, len, "%s", listen);
}

static char *
member_json(const struct worker *w)
{
	struct worker_node n;

	memset(&n, 0, sizeof(n));
	snprintf(n.id, sizeof(n.id), "%s", w->id);
	if (gethostname(n.host, sizeof(n.host)) != 0)
		snprintf(n.host, sizeof(n.host), "unknown");
	n.host[sizeof(n.host) - 1] = '\0';
	metrics_addr(w, n.host, n.metrics, sizeof(n.metrics));
	n.pid = getpid();
	n.started_at = clock_now_ms();
	snprintf(n.version, sizeof(n.version), "%s", PACKAGE_VERSION);
	/* The manager reads it over HTTPS then (its lateness chart). */
	n.metrics_tls = cfg_str(w->cfg, CFG_WORKER_HTTP_TLS_CERT)[0] != '\0';
	return worker_node_encode(&n);
}

/* Synchronous: at startup (a clear error for a duplicate id) and after a
 * session expiry, before anything else happens on the new session.
 * Returns -2 when a node with our id belongs to another session: two
 * workers share an id, or our previous incarnation crashed and its session
 * has not expired yet. */
static int
register_node(struct worker *w, char *err, size_t errlen)
{
	char path[512];
	char *data = member_json(w);
	int rc;

	zpath_child(path, sizeof(path), w->root, ZPATH_WORKERS, w->id);
	rc = zoo_create(zk_handle(w->zk), path, data, (int)strlen(data),
			zk_acl(w->zk), ZOO_EPHEMERAL, NULL, 0);
	free(data);
	if (rc == ZNODEEXISTS) {
		struct Stat st;

		if (zoo_exists(zk_handle(w->zk), path, 0, &st) == ZOK &&
		    st.ephemeralOwner == zk_session_id(w->zk))
			return 0;
		snprintf(err, errlen,
			 "worker id '%s' is already registered at %s by a "
			 "live session; give each worker a unique worker.id",
			 w->id, path);
		return -2;
	}
	if (rc == ZNONODE) {
		snprintf(err, errlen,
			 "%s does not exist: start prophet-manager first",
			 path);
		return -1;
	}
	if (rc != ZOK) {
		snprintf(err, errlen, "cannot create %s: %s", path, zerror(rc));
		return -1;
	}
	log_info("registered", "path=%s session=0x%llx", path,
		 (unsigned long long)zk_session_id(w->zk));
	return 0;
}

/* A new session: register, stand for election, read and watch. */
static void
session_setup(struct worker *w)
{
	char err[512];

	w->co->session_id = zk_session_id(w->zk);
	zk_ok(w);
	if (register_node(w, err, sizeof(err)) < 0) {
		/* After an expiry our old node may linger for a moment. */
		log_warn("registration failed, retrying", "error=\"%s\"", err);
		return;
	}
	w->co->election_path[0] = '\0';
	elect(w);
	for (int i = 0; i < w->nslots; i++)
		read_slot(w, i);
}

static void
lose_all(struct worker *w, const char *why)
{
	for (int i = 0; i < w->nslots; i++) {
		slot_lose(w, i, why);
		eos_slot_lost(w, i); /* one that was being released too */
		/* A release write of the old session may never complete
		 * (its handle closed): it must not block the next one. */
		slot_phase_set(w, i, SP_IDLE, why);
		w->co->view_version[i] = -1;
	}
	step_down(w, why);
	w->co->election_path[0] = '\0';
}

static void
zk_event_cb(struct zk *z, int type, int state, const char *path, void *arg)
{
	struct worker *w = arg;
	int slot;

	if (w->stopping)
		return;
	if (type == ZOO_SESSION_EVENT) {
		metric_set(w->m.zk_up, state == ZOO_CONNECTED_STATE);
		log_info("zookeeper session", "state=%s", zk_state_name(state));
		if (state == ZOO_EXPIRED_SESSION_STATE) {
			/* Our ephemeral nodes are gone: others own our
			 * slots now. Stop first, then start over. */
			lose_all(w, "session expired");
			zk_reopen(z);
		} else if (state == ZOO_CONNECTED_STATE) {
			pause_zk_connected(w);
			if (zk_session_id(z) != w->co->session_id)
				session_setup(w);
			else {
				zk_ok(w);
				for (int i = 0; i < w->nslots; i++)
					read_slot(w, i);
				if (w->co->master)
					read_members(w);
				check_election(w);
			}
		}
		return;
	}
	if (pause_zk_event(w, type, path))
		return;
	slot = slot_of_path(w, path);
	if (slot >= 0) {
		read_slot(w, slot);
		return;
	}
	if (type == ZOO_CHILD_EVENT && w->co->master) {
		read_members(w);
		return;
	}
	if (type == ZOO_DELETED_EVENT && path != NULL &&
	    strstr(path, ZPATH_ELECTION "/") != NULL) {
		check_election(w);
		return;
	}
	if (type == ZOO_DELETED_EVENT && path != NULL && w->co->master &&
	    strstr(path, ZPATH_MASTER) != NULL) {
		write_master_node(w);
		return;
	}
}

/* Liveness probe and the periodic re-check of every slot. ----------------- */

static void
probe_cb(struct zk *z, int rc, const struct Stat *st, void *arg)
{
	if (rc == ZOK)
		zk_ok(arg);
}

static void
coord_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	if (w->stopping)
		return;
	if (!coord_fresh(w) && !w->co->fenced) {
		w->co->fenced = 1;
		metric_set(w->m.self_fenced, 1);
		log_warn("zookeeper unreachable for 2/3 of the session timeout:"
			 " claiming stopped",
			 "silent_ms=%lld",
			 (long long)(clock_mono_ms() - w->co->last_zk_ok_ms));
		/* Messages not yet sent must not go out under an epoch we
		 * may no longer hold. */
		kafka_purge_queued(w->kafka);
	}
	zk_aexists(w->zk, w->root, 0, probe_cb, w);
	for (int i = 0; i < w->nslots; i++) {
		if (w->slots[i].phase == SP_DRAINING)
			try_finish_release(w, i);
		else
			slot_reconcile(w, i);
	}
	if (w->co->master)
		schedule_rebalance(w);
	else if (w->co->session_id == zk_session_id(w->zk) &&
		 w->co->election_path[0] == '\0' && zk_is_connected(w->zk))
		session_setup(w);
}

/* The cluster must exist (a manager created it) with our slot count: a
 * worker that saw fewer slots would leave some unscanned. */
static int
check_cluster_config(struct worker *w, char *err, size_t errlen)
{
	char path[512], *data;
	int rc;

	zpath(path, sizeof(path), w->root, ZPATH_CONFIG);
	data = zk_get(w->zk, path, NULL, &rc);
	if (data == NULL) {
		snprintf(err, errlen,
			 "cannot read %s (%s): start "
			 "prophet-manager first",
			 path, zerror(rc));
		return -1;
	}
	rc = cluster_config_verify(data, w->nslots, path, err, errlen);
	xfree(data);
	return rc;
}

int
coord_start(struct worker *w, char *err, size_t errlen)
{
	struct timeval tick;
	int64_t probe_ms, deadline;
	int rc, waited = 0;

	w->co = xcalloc(1, sizeof(*w->co));
	snprintf(w->root, sizeof(w->root), "%s",
		 cfg_str(w->cfg, CFG_CLUSTER_ROOT));
	w->co->session_timeout_ms = cfg_int(w->cfg, CFG_ZK_SESSION_TIMEOUT_MS);
	w->co->view = xcalloc((size_t)w->nslots, sizeof(*w->co->view));
	w->co->view_version = xcalloc((size_t)w->nslots, sizeof(int));
	for (int i = 0; i < w->nslots; i++)
		w->co->view_version[i] = -1;
	w->m.epoch = metrics_register(METRIC_GAUGE, "prophet_slot_epoch",
				      "Epoch under which this worker owns the "
				      "slot (0: not owned)",
				      "slot", (size_t)w->nslots);
	w->zk = zk_create(w->base, w->cfg, zk_event_cb, w);
	if (w->zk == NULL || zk_wait_connected(w->zk, 30000) < 0) {
		snprintf(err, errlen, "cannot connect to zookeeper at %s",
			 cfg_str(w->cfg, CFG_ZK_HOSTS));
		return -1;
	}
	w->co->last_zk_ok_ms = clock_mono_ms();
	if (zk_check_access(w->zk, w->root, err, errlen) < 0 ||
	    check_cluster_config(w, err, errlen) < 0)
		return -1;
	/* A crashed predecessor with our id keeps its node until its session
	 * expires: wait that long before calling the id a duplicate. */
	deadline = clock_mono_ms() + w->co->session_timeout_ms + 5000;
	while ((rc = register_node(w, err, errlen)) == -2 &&
	       clock_mono_ms() < deadline) {
		if (!waited++)
			log_warn("worker id registered by another session; "
				 "waiting for it to expire",
				 "id=%s", w->id);
		usleep(200 * 1000);
	}
	if (rc < 0)
		return -1;
	w->co->session_id = zk_session_id(w->zk);
	elect(w);
	for (int i = 0; i < w->nslots; i++)
		read_slot(w, i);
	w->co->rebalance_ev = evtimer_new(w->base, rebalance_cb, w);
	/* Probe often enough that 2/3 of the timeout spans several. */
	probe_ms = w->co->session_timeout_ms / 6;
	if (probe_ms > COORD_TICK_MS)
		probe_ms = COORD_TICK_MS;
	tick.tv_sec = 0;
	tick.tv_usec = (suseconds_t)probe_ms * 1000;
	w->co->coord_ev = event_new(w->base, -1, EV_PERSIST, coord_tick_cb, w);
	event_add(w->co->coord_ev, &tick);
	return 0;
}

/* Leaving: our ephemeral nodes vanish with the session, so the master
 * reassigns our slots at once instead of after a session timeout. */
void
coord_stop(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		slot_lose(w, i, "shutting down");
	if (w->co->coord_ev != NULL)
		event_free(w->co->coord_ev);
	if (w->co->rebalance_ev != NULL)
		event_free(w->co->rebalance_ev);
	zk_destroy(w->zk);
	w->zk = NULL;
	for (int i = 0; i < w->co->nmembers; i++)
		xfree(w->co->members[i]);
	xfree(w->co->members);
	xfree(w->co->view);
	xfree(w->co->view_version);
	w->co->view = NULL;
	w->co->view_version = NULL;
	w->co->nmembers = 0;
	w->co->members = NULL;
	w->co->coord_ev = w->co->rebalance_ev = NULL;
}

void
coord_free(struct worker *w)
{
	xfree(w->co);
	w->co = NULL;
}
