#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "cfg.h"
#include "commit.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "http.h"
#include "kafka.h"
#include "log.h"
#include "metrics.h"
#include "redis.h"
#include "worker.h"
#include "xmalloc.h"
#include "zk.h"

#define STOP_GRACE_MS 15000

static void
register_metrics(struct worker *w)
{
#define WM_REG(f, t, n, h) w->m.f = metrics_register(METRIC_##t, n, h, NULL, 0);
	WORKER_METRICS(WM_REG)
#undef WM_REG
}

static void
redis_state_cb(struct redis *r, int up, void *arg)
{
	struct worker *w = arg;

	metric_set(w->m.redis_up, up);
	if (up)
		scanner_redis_up(w);
}

/* Wakes published while the subscription was down are lost. */
static void
redis_sub_state_cb(struct redis *r, int up, void *arg)
{
	struct worker *w = arg;

	if (up && w->sc != NULL)
		scanner_scan_all(w);
}

static void
redis_failover_cb(struct redis *r, int up, void *arg)
{
	struct worker *w = arg;

	metric_inc(w->m.redis_failovers);
	recovery_failover(w);
}

static void
gauges_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	metric_set(w->m.db_up, db_pool_connected(w->db));
	metric_set(w->m.kafka_queue, kafka_outq_len(w->kafka));
}

/* Graceful stop: no new claims; wait until what was claimed is published
 * and recorded, then leave. Recorded means in Redis too: the commands
 * that take a delivered task out of flight are sent without a reply
 * callback, and one still in the output buffer at exit would leave the
 * task in flight for the next owner's reaper to fire again. A slot's busy
 * count covers every task from its claim on, those claimed ahead and
 * waiting for their millisecond too: they are published at once rather
 * than left in flight for a lease. */
static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	int busy = 0;

	for (int i = 0; i < w->nslots; i++)
		busy |= w->slots[i].claiming || w->slots[i].busy > 0;
	if ((firing_busy(w) == 0 && !busy && redis_pending(w->redis) == 0) ||
	    clock_mono_ms() > w->stop_deadline_ms)
		event_base_loopexit(w->base, NULL);
}

static void
reload_cb(void *arg)
{
	struct worker *w = arg;
	enum log_level lvl;
	char err[512];

	if (cfg_reload(w->cfg, err, sizeof(err)) < 0) {
		log_error("reload failed; keeping the running config",
			  "error=\"%s\"", err);
		return;
	}
	log_level_parse(cfg_str(w->cfg, CFG_LOG_LEVEL), &lvl);
	log_set_level(lvl);
	http_server_reload_tls(w->http);
}

static void
stop_cb(int count, void *arg)
{
	struct worker *w = arg;
	struct timeval tick = {0, 10000};

	if (count > 1) {
		log_warn("second stop signal: exiting now", "");
		exit(1);
	}
	w->stopping = 1;
	scanner_stop(w);
	w->stop_deadline_ms = clock_mono_ms() + STOP_GRACE_MS;
	w->stop_ev = event_new(w->base, -1, EV_PERSIST, drain_cb, w);
	event_add(w->stop_ev, &tick);
}

static void
r_readyz(void *ctx, struct evhttp_request *req, const char *a, size_t len)
{
	struct worker *w = ctx;
	int zk = zk_is_ready(w->zk), redis = redis_up(w->redis);
	int db = db_pool_ready(w->db);
	int kafka = !kafka_brokers_down(w->kafka) && !kafka_stalled(w->kafka);
	int ok = zk && redis && db && kafka;

	(void)a;
	(void)len;
	http_reply_json(req, ok ? 200 : 503,
			json_pack("{s:b, s:b, s:b, s:b, s:b, s:s}", "ready", ok,
				  "zookeeper", zk, "redis", redis, "db", db,
				  "kafka", kafka, "id", w->id));
}

/* A few scrapers: /metrics, /healthz and /readyz, all public. */
static const struct http_route routes[] = {
	{EVHTTP_REQ_GET, "/metrics", 0, HTTP_SHAPE_NATIVE, 0,
	 http_route_metrics},
	{EVHTTP_REQ_GET, "/healthz", 0, HTTP_SHAPE_NATIVE, 0,
	 http_route_healthz},
	{EVHTTP_REQ_GET, "/readyz", 0, HTTP_SHAPE_NATIVE, 0, r_readyz},
};

/*
 * worker.rt_priority: the loop thread (claims, the timing wheel, every
 * publish and its fired-at stamp) at SCHED_RR, so that CPU-bound work on
 * the same host (MariaDB running a bulk job, say) cannot hold a due
 * publish for a scheduler time slice. Only this thread: set before any
 * other exists, with RESET_ON_FORK, so that every thread it creates (the
 * DB pool's, librdkafka's, ZooKeeper's, now or later) starts as a normal
 * one. Refused before the worker registers anywhere.
 */
static void
loop_realtime(struct worker *w)
{
	int prio = (int)cfg_int(w->cfg, CFG_WORKER_RT_PRIORITY);
	struct sched_param sp;

	if (prio == 0)
		return;
	memset(&sp, 0, sizeof(sp));
	sp.sched_priority = prio;
	if (sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &sp) != 0)
		log_fatal("worker.rt_priority",
			  "error=\"cannot run the firing loop at SCHED_RR "
			  "priority %d: %s (the unit needs LimitRTPRIO=%d, "
			  "RestrictRealtime=no and SystemCallFilter="
			  "sched_setscheduler, or CAP_SYS_NICE; or set "
			  "worker.rt_priority = 0)\"",
			  prio, strerror(errno), prio);
	log_info("firing loop at real-time priority",
		 "policy=SCHED_RR priority=%d", prio);
}

int
main(int argc, char **argv)
{
	struct worker w;
	struct event *gauges;
	struct timeval one_s = {1, 0};
	enum log_level lvl;
	char err[512];

	memset(&w, 0, sizeof(w));
	w.cfg = cfg_from_args(&argc, argv, "prophet-worker",
			      "Prophet data plane: fires due tasks to Kafka.");
	if (argc > 1) {
		fprintf(stderr, "prophet-worker: unexpected argument '%s'\n",
			argv[1]);
		return 2;
	}
	log_level_parse(cfg_str(w.cfg, CFG_LOG_LEVEL), &lvl);
	log_init("worker", lvl);
	if (cfg_str(w.cfg, CFG_WORKER_ID)[0] != '\0')
		snprintf(w.id, sizeof(w.id), "%s",
			 cfg_str(w.cfg, CFG_WORKER_ID));
	else
		daemon_default_id(w.id, sizeof(w.id));
	log_info("starting", "version=%s commit=%s id=%s config=%s",
		 PACKAGE_VERSION, prophet_commit, w.id, cfg_path(w.cfg));
	w.nslots = (int)cfg_int(w.cfg, CFG_CLUSTER_SLOTS);
	w.slots = xcalloc((size_t)w.nslots, sizeof(*w.slots));
	w.lookahead_ms = cfg_int(w.cfg, CFG_WORKER_LOOKAHEAD_MS);
	w.lease_ms = cfg_int(w.cfg, CFG_WORKER_LEASE_MS);
	w.misfire_threshold_ms =
		cfg_int(w.cfg, CFG_WORKER_MISFIRE_THRESHOLD_MS);
	w.horizon_ms = cfg_int(w.cfg, CFG_TASK_HORIZON_MS);
	w.index_margin_ms = cfg_int(w.cfg, CFG_TASK_INDEX_MARGIN_MS);
	w.bucket_ms = cfg_int(w.cfg, CFG_TASK_BUCKET_MS);
	w.bucket_near_ms = cfg_int(w.cfg, CFG_TASK_BUCKET_NEAR_MS);
	w.claim_batch = (int)cfg_int(w.cfg, CFG_WORKER_CLAIM_BATCH);
	w.claim_ahead_ms = cfg_int(w.cfg, CFG_WORKER_CLAIM_AHEAD_MS);
	w.claim_group_ms = cfg_int(w.cfg, CFG_WORKER_CLAIM_GROUP_MS);
	w.scan_batch = (int)cfg_int(w.cfg, CFG_WORKER_SCAN_BATCH);
	w.queue_max = (int)cfg_int(w.cfg, CFG_KAFKA_QUEUE_MAX);
	w.topic_prefix = cfg_str(w.cfg, CFG_KAFKA_TOPIC_PREFIX);
	w.tasks = hmap_create();
	loop_realtime(&w);

	daemon_libevent_init();
	w.base = event_base_new();
	w.daemon = daemon_create(w.base, stop_cb, reload_cb, &w);
	register_metrics(&w);

	w.kafka = kafka_producer_create(w.base, w.cfg, firing_dr_cb, &w, err,
					sizeof(err));
	if (w.kafka == NULL)
		log_fatal("kafka producer", "error=\"%s\"", err);
	w.dsn = db_dsn_create(w.cfg, err, sizeof(err));
	if (w.dsn == NULL)
		log_fatal("bad config", "error=\"%s\"", err);
	w.db = db_pool_create(w.base, w.dsn,
			      (int)cfg_int(w.cfg, CFG_DB_POOL_SIZE), "worker");
	db_pool_watch(w.db);
	w.redis = redis_create(w.base, w.cfg, redis_state_cb, &w);
	redis_on_failover(w.redis, redis_failover_cb, &w);
	w.redis_sub = redis_create(w.base, w.cfg, redis_sub_state_cb, &w);
	w.clock = refclock_create(w.base, w.redis,
				  cfg_int(w.cfg, CFG_WORKER_MAX_CLOCK_SKEW_MS),
				  w.m.clock_offset, w.m.clock_skewed);
	{
		struct http_limits lim = {
			.max_body = 65536,
			.timeout_s = 30,
			.max_connections = 64,
			.tls_cert = cfg_str(w.cfg, CFG_WORKER_HTTP_TLS_CERT),
			.tls_key = cfg_str(w.cfg, CFG_WORKER_HTTP_TLS_KEY),
			.tls_client_ca =
				cfg_str(w.cfg, CFG_WORKER_HTTP_TLS_CLIENT_CA),
		};

		w.http = http_server_create(
			w.base, cfg_str(w.cfg, CFG_WORKER_HTTP_LISTEN), &lim,
			err, sizeof(err));
	}
	if (w.http == NULL)
		log_fatal("http", "error=\"%s\"", err);
	http_server_set_routes(w.http, routes,
			       sizeof(routes) / sizeof(routes[0]), NULL, &w);
	if (coord_start(&w, err, sizeof(err)) < 0)
		log_fatal("coordination", "error=\"%s\"", err);
	firing_start(&w);
	eos_start(&w);
	scanner_start(&w);
	recovery_start(&w);
	dbmode_start(&w);
	pause_start(&w);
	gauges = event_new(w.base, -1, EV_PERSIST, gauges_cb, &w);
	event_add(gauges, &one_s);

	log_info("ready", "id=%s slots=%d listen=%s", w.id, w.nslots,
		 cfg_str(w.cfg, CFG_WORKER_HTTP_LISTEN));
	daemon_notify("READY=1");
	event_base_dispatch(w.base);
	daemon_teardown(DAEMON_TEARDOWN_S);
	if (FAULTPOINT("teardown_hang"))
		pause(); /* a library that does not return: a signal ends it */

	log_info("stopping", "held=%zu publishing=%zu", hmap_count(w.tasks),
		 firing_publishing(&w));
	coord_stop(&w);
	eos_stop(&w);
	kafka_producer_destroy(w.kafka, 2000);
	db_pool_destroy(w.db);
	db_dsn_destroy(w.dsn);
	firing_stop(&w);
	recovery_stop(&w);
	dbmode_stop(&w);
	event_free(gauges);
	if (w.stop_ev != NULL)
		event_free(w.stop_ev);
	scanner_release(&w);
	redis_destroy(w.redis_sub);
	redis_destroy(w.redis);
	refclock_destroy(w.clock);
	pause_stop(&w);
	timerwheel_destroy(w.wheel);
	http_server_free(w.http);
	daemon_destroy(w.daemon);
	event_base_free(w.base);
	metrics_free_all();
	scanner_free(&w);
	coord_free(&w);
	firing_free(&w);
	hmap_destroy(w.tasks);
	dbmode_free(&w);
	xfree(w.slots);
	cfg_destroy(w.cfg);
	log_info("stopped", "");
	return 0;
}
