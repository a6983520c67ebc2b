#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "redis.h"
#include "rindex.h"
#include "scripts.h"
#include "utf8.h"
#include "xmalloc.h"
#include "zk.h"
#include "zknode.h"

/*
 * GET /v1/cluster: the same facts `zkCli.sh get /prophet/...` shows (master,
 * workers, each slot's owner, requested owner and epoch), plus per slot the
 * Redis backlog: pending (due, not yet claimed), in flight, and lag (how
 * long the oldest due task has been waiting). Gathered with asynchronous
 * calls; answered when the last one is back or after a timeout.
 */

#define CLUSTER_TIMEOUT_MS 5000

struct gather {
	struct manager *mg;
	struct evhttp_request *req;
	int outstanding;
	int replied;
	int zk_failed;
	int64_t now;
	json_t *master;
	json_t *workers; /* array */
	json_t *slots;	 /* array, index = slot */
	struct event *timeout;
};

struct gather_arg {
	struct gather *g;
	int index;
	char id[ZKNODE_ID_MAX];
};

static void
gather_reply(struct gather *g, int code)
{
	json_t *out;

	if (g->replied)
		return;
	g->replied = 1;
	if (code != 200) {
		http_reply_error(g->req, code, "unavailable", NULL,
				 "zookeeper did not answer");
	} else {
		out = json_pack("{s:O, s:O, s:O, s:i, s:I}", "master",
				g->master, "workers", g->workers, "slots",
				g->slots, "slot_count", g->mg->nslots, "at",
				(json_int_t)g->now);
		json_object_set_new(out, "callbacks", cover_status_json(g->mg));
		http_reply_json(g->req, 200, out);
	}
	g->mg->inflight--;
}

static void
gather_put(struct gather *g)
{
	if (--g->outstanding > 0)
		return;
	gather_reply(g, g->zk_failed ? 503 : 200);
	event_free(g->timeout);
	json_decref(g->master);
	json_decref(g->workers);
	json_decref(g->slots);
	xfree(g);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	gather_reply(arg, 503);
}

static json_t *
parse_json(const char *data, int len)
{
	json_t *j;

	if (data == NULL || len <= 0)
		return NULL;
	j = json_loadb(data, (size_t)len, 0, NULL);
	return j;
}

static void
master_cb(struct zk *z, int rc, const char *data, int len,
	  const struct Stat *st, void *arg)
{
	struct gather *g = arg;
	json_t *j = rc == ZOK ? parse_json(data, len) : NULL;

	if (rc != ZOK && rc != ZNONODE)
		g->zk_failed = 1;
	if (j != NULL) {
		json_decref(g->master);
		g->master = j;
	}
	gather_put(g);
}

static void
worker_cb(struct zk *z, int rc, const char *data, int len,
	  const struct Stat *st, void *arg)
{
	struct gather_arg *a = arg;
	struct gather *g = a->g;
	struct worker_node n;
	json_t *j;

	/* Its known members only: the node is anybody's who can write to
	 * ZooKeeper. */
	if (rc == ZOK && worker_node_decode(data, len, &n) == 0)
		j = worker_node_json(&n);
	else
		j = json_pack("{s:o}", "id", utf8_json_str(a->id));
	json_array_append_new(g->workers, j);
	xfree(a);
	gather_put(g);
}

static void
workers_cb(struct zk *z, int rc, const struct String_vector *names, void *arg)
{
	struct gather *g = arg;
	char path[512];

	if (rc != ZOK) {
		g->zk_failed = 1;
	} else {
		for (int i = 0; i < names->count; i++) {
			struct gather_arg *a = xcalloc(1, sizeof(*a));

			a->g = g;
			snprintf(a->id, sizeof(a->id), "%s", names->data[i]);
			zpath_child(path, sizeof(path),
				    cfg_str(g->mg->cfg, CFG_CLUSTER_ROOT),
				    ZPATH_WORKERS, names->data[i]);
			g->outstanding++;
			if (zk_aget(z, path, 0, worker_cb, a) < 0) {
				g->outstanding--;
				xfree(a);
			}
		}
	}
	gather_put(g);
}

static void
slot_cb(struct zk *z, int rc, const char *data, int len, const struct Stat *st,
	void *arg)
{
	struct gather_arg *a = arg;
	struct gather *g = a->g;
	json_t *s = json_array_get(g->slots, (size_t)a->index);
	struct slot_node n;

	if (rc == ZOK && slot_node_decode(data, len, &n) == 0) {
		json_object_set_new(s, "owner",
				    n.owner[0] ? utf8_json_str(n.owner)
					       : json_null());
		json_object_set_new(s, "requested",
				    n.requested[0] ? utf8_json_str(n.requested)
						   : json_null());
		json_object_set_new(s, "epoch", json_integer(n.epoch));
		json_object_set_new(s, "updated_at",
				    json_integer(n.updated_at));
	} else {
		g->zk_failed = 1;
	}
	xfree(a);
	gather_put(g);
}

/* MULTI-less pipeline reply: ZCARD due, ZCARD inflight, oldest due. */
static void
backlog_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct gather_arg *a = arg;
	struct gather *g = a->g;
	json_t *s = json_array_get(g->slots, (size_t)a->index);

	if (reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == 4) {
		redisReply *due = reply->element[0];
		redisReply *inf = reply->element[1];
		redisReply *oldest = reply->element[2];
		long long lag = 0;

		json_object_set_new(s, "pending", json_integer(due->integer));
		json_object_set_new(s, "inflight", json_integer(inf->integer));
		if (oldest->type == REDIS_REPLY_ARRAY &&
		    oldest->elements == 2) {
			long long score =
				strtoll(oldest->element[1]->str, NULL, 10);

			lag = g->now > score ? g->now - score : 0;
		}
		json_object_set_new(s, "lag_ms", json_integer(lag));
	}
	xfree(a);
	gather_put(g);
}

/* Sends SCRIPT_BACKLOG for slot. */
static int
backlog_send(struct manager *mg, int slot, redis_reply_fn cb, void *arg)
{
	struct slot_eval ev;
	int rc;

	slot_eval_init(&ev, SCRIPT_BACKLOG, slot, "ditacvkb");
	rc = redis_eval_args(mg->redis, cb, arg, &ev.a);
	slot_eval_free(&ev);
	return rc;
}

void
cluster_get(struct manager *mg, struct evhttp_request *req)
{
	struct gather *g = xcalloc(1, sizeof(*g));
	const char *root = cfg_str(mg->cfg, CFG_CLUSTER_ROOT);
	struct timeval tv = {CLUSTER_TIMEOUT_MS / 1000, 0};
	char path[512];

	g->mg = mg;
	g->req = req;
	g->now = clock_now_ms();
	g->master = json_null();
	g->workers = json_array();
	g->slots = json_array();
	g->outstanding = 1; /* ours, dropped at the end */
	g->timeout = evtimer_new(mg->base, timeout_cb, g);
	evtimer_add(g->timeout, &tv);
	mg->inflight++;

	zpath(path, sizeof(path), root, ZPATH_MASTER);
	g->outstanding++;
	if (zk_aget(mg->zk, path, 0, master_cb, g) < 0) {
		g->outstanding--;
		g->zk_failed = 1;
	}
	zpath(path, sizeof(path), root, ZPATH_WORKERS);
	g->outstanding++;
	if (zk_aget_children(mg->zk, path, 0, workers_cb, g) < 0) {
		g->outstanding--;
		g->zk_failed = 1;
	}
	for (int i = 0; i < mg->nslots; i++) {
		struct gather_arg *a = xcalloc(1, sizeof(*a));

		json_array_append_new(
			g->slots, json_pack("{s:i, s:n, s:n, s:n}", "slot", i,
					    "pending", "inflight", "lag_ms"));
		a->g = g;
		a->index = i;
		zpath_slot(path, sizeof(path), root, i);
		g->outstanding++;
		if (zk_aget(mg->zk, path, 0, slot_cb, a) < 0) {
			g->outstanding--;
			g->zk_failed = 1;
			xfree(a);
		}
		a = xcalloc(1, sizeof(*a));
		a->g = g;
		a->index = i;
		g->outstanding++;
		if (backlog_send(mg, i, backlog_cb, a) < 0) {
			g->outstanding--;
			xfree(a);
		}
	}
	gather_put(g);
}

/*
 * Every few seconds the Redis backlog of every slot becomes the gauges
 * prophet_slot_pending_tasks and prophet_slot_lag_seconds: the alert "tasks
 * due but not fired" must also see a slot whose owner is dead or stuck,
 * which that owner cannot report itself. NaN while Redis does not answer
 * (the Redis alerts cover that case).
 */
#define SAMPLE_INTERVAL_S 5

struct sample_arg {
	struct manager *mg;
	int slot;
};

static void
sample_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct sample_arg *a = arg;
	struct manager *mg = a->mg;
	double pending = NAN, lag = NAN, bytes = NAN;

	if (reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
	    reply->elements == 4) {
		redisReply *oldest = reply->element[2];
		int64_t now = clock_now_ms();

		pending = (double)reply->element[0]->integer;
		bytes = (double)reply->element[3]->integer;
		lag = 0;
		if (oldest->type == REDIS_REPLY_ARRAY &&
		    oldest->elements == 2) {
			long long score =
				strtoll(oldest->element[1]->str, NULL, 10);

			lag = now > score ? (double)(now - score) / 1000 : 0;
		}
	}
	metric_vec_set(mg->m.slot_pending, (size_t)a->slot, pending);
	metric_vec_set(mg->m.slot_lag, (size_t)a->slot, lag);
	metric_vec_set(mg->m.slot_redis_bytes, (size_t)a->slot, bytes);
	mg->sampling--;
	xfree(a);
}

static void
sample_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct manager *mg = arg;

	if (mg->sampling > 0)
		return; /* Redis is slow: the last round is still out */
	for (int i = 0; i < mg->nslots; i++) {
		struct sample_arg *a = xcalloc(1, sizeof(*a));

		a->mg = mg;
		a->slot = i;
		mg->sampling++;
		if (backlog_send(mg, i, sample_cb, a) < 0) {
			metric_vec_set(mg->m.slot_pending, (size_t)i, NAN);
			metric_vec_set(mg->m.slot_lag, (size_t)i, NAN);
			metric_vec_set(mg->m.slot_redis_bytes, (size_t)i, NAN);
			mg->sampling--;
			xfree(a);
		}
	}
}

void
cluster_sampler_start(struct manager *mg)
{
	struct timeval tv = {SAMPLE_INTERVAL_S, 0};

	mg->m.slot_pending = metrics_register(
		METRIC_GAUGE, "prophet_slot_pending_tasks",
		"Tasks in the slot's Redis index not yet claimed (scheduled "
		"within the horizon, due or not); sampled by the manager",
		"slot", (size_t)mg->nslots);
	mg->m.slot_lag =
		metrics_register(METRIC_GAUGE, "prophet_slot_lag_seconds",
				 "How long the oldest due, unclaimed task of "
				 "the slot has waited",
				 "slot", (size_t)mg->nslots);
	mg->m.slot_redis_bytes = metrics_register(
		METRIC_GAUGE, "prophet_slot_redis_bytes",
		"Redis memory of the slot's index keys (pending, in flight, "
		"tombstones; MEMORY USAGE, sampled); sampled by the manager",
		"slot", (size_t)mg->nslots);
	for (int i = 0; i < mg->nslots; i++) {
		metric_vec_set(mg->m.slot_pending, (size_t)i, NAN);
		metric_vec_set(mg->m.slot_lag, (size_t)i, NAN);
		metric_vec_set(mg->m.slot_redis_bytes, (size_t)i, NAN);
	}
	metric_set(mg->m.cluster_slots, mg->nslots);
	mg->sample_ev = event_new(mg->base, -1, EV_PERSIST, sample_tick_cb, mg);
	event_add(mg->sample_ev, &tv);
	sample_tick_cb(-1, 0, mg);
}

void
cluster_sampler_stop(struct manager *mg)
{
	if (mg->sample_ev != NULL)
		event_free(mg->sample_ev);
	mg->sample_ev = NULL;
}
