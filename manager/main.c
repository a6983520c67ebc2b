#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "auth.h"
#include "cfg.h"
#include "commit.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "redis.h"
#include "tz.h"
#include "url.h"
#include "xmalloc.h"
#include "zk.h"

static void
register_metrics(struct manager *mg)
{
#define MM_REG(f, t, n, h) \
	mg->m.f = metrics_register(METRIC_##t, n, h, NULL, 0);
	MANAGER_METRICS(MM_REG)
#undef MM_REG
	{
		static const double rows[] = {1,   2,	5,   10,   50,
					      100, 250, 500, 1000, 5000};

		metric_set_buckets(mg->m.db_batch_rows, rows,
				   sizeof(rows) / sizeof(rows[0]));
	}
}

static void
zk_event_cb(struct zk *z, int type, int state, const char *path, void *arg)
{
	struct manager *mg = arg;
	char err[512];

	prune_zk_event(mg, type, state, path);
	if (type != ZOO_SESSION_EVENT)
		return;
	metric_set(mg->m.zk_up, state == ZOO_CONNECTED_STATE);
	log_info("zookeeper session", "state=%s", zk_state_name(state));
	if (state == ZOO_EXPIRED_SESSION_STATE) {
		zk_reopen(z);
	} else if (state == ZOO_CONNECTED_STATE && !mg->stopping) {
		/* Repair the tree on every (re)connect: someone may have
		 * deleted nodes while we were away. */
		if (zktree_ensure(z, cfg_str(mg->cfg, CFG_CLUSTER_ROOT),
				  mg->nslots, err, sizeof(err)) < 0)
			log_error("zookeeper tree repair failed",
				  "error=\"%s\"", err);
	}
}

static void
redis_state_cb(struct redis *r, int up, void *arg)
{
	struct manager *mg = arg;

	metric_set(mg->m.redis_up, up);
	if (up && mg->ingest != NULL)
		ingest_redis_up(mg);
}

/* A Redis failover: index writes acknowledged by the old primary may be
 * missing on the new one, whichever slot they were for. Every slot is
 * handed to its owner for a rebuild (its marker deleted), as after lost
 * index writes. */
static void
redis_failover_cb(struct redis *r, int up, void *arg)
{
	struct manager *mg = arg;

	metric_inc(mg->m.redis_failovers);
	if (mg->ingest == NULL)
		return;
	memset(mg->index_dirty, 1, (size_t)mg->nslots);
	ingest_redis_up(mg);
}

static void
gauges_cb(evutil_socket_t fd, short what, void *arg)
{
	struct manager *mg = arg;

	metric_set(mg->m.db_up, db_pool_connected(mg->db));
	ingest_index_probe(mg);
}

/* Waits for requests already handed to the database to be answered. */
static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct manager *mg = arg;

	if (mg->inflight == 0 || clock_mono_ms() > mg->stop_deadline_ms)
		event_base_loopexit(mg->base, NULL);
}

static void
free_topics(char **topics)
{
	for (char **t = topics; t != NULL && *t != NULL; t++)
		xfree(*t);
	xfree(topics);
}

/* http.topics_allowed: "a, b,c" -> {"a","b","c",NULL}; NULL when empty. */
static int
load_topics(const char *list, char ***out, char *err, size_t errlen)
{
	char *copy = xstrdup(list), *save = NULL;
	char **topics = NULL;
	size_t n = 0;

	for (char *t = strtok_r(copy, ", ", &save); t != NULL;
	     t = strtok_r(NULL, ", ", &save)) {
		if (!task_topic_valid(t, strlen(t))) {
			snprintf(err, errlen,
				 "http.topics_allowed: '%s' is not a valid "
				 "topic",
				 t);
			xfree(copy);
			free_topics(topics);
			return -1;
		}
		topics = xrealloc(topics, (n + 2) * sizeof(char *));
		topics[n++] = xstrdup(t);
		topics[n] = NULL;
	}
	xfree(copy);
	*out = topics;
	return 0;
}

/* Tokens and the topic allow-list: at start (fatal on error) and on
 * SIGHUP (the running ones stay on error). */
static int
load_access(struct manager *mg, char *err, size_t errlen)
{
	struct auth *a =
		auth_load(cfg_str(mg->cfg, CFG_HTTP_TOKENS_FILE), err, errlen);
	char **topics;

	if (a == NULL)
		return -1;
	if (load_topics(cfg_str(mg->cfg, CFG_HTTP_TOPICS_ALLOWED), &topics, err,
			errlen) < 0) {
		auth_destroy(a);
		return -1;
	}
	auth_destroy(mg->auth);
	mg->auth = a;
	free_topics(mg->topics_allowed);
	mg->topics_allowed = topics;
	return 0;
}

static void
reload_cb(void *arg)
{
	struct manager *mg = arg;
	enum log_level lvl;
	char err[512];

	if (cfg_reload(mg->cfg, err, sizeof(err)) < 0) {
		log_error("reload failed; keeping the running config",
			  "error=\"%s\"", err);
		return;
	}
	log_level_parse(cfg_str(mg->cfg, CFG_LOG_LEVEL), &lvl);
	log_set_level(lvl);
	http_server_reload_tls(mg->http);
	if (load_access(mg, err, sizeof(err)) < 0)
		log_error("reload of tokens/topics failed; keeping the "
			  "running ones",
			  "error=\"%s\"", err);
	else
		log_info("access reloaded", "tokens=%s",
			 auth_enabled(mg->auth) ? "on" : "off");
}

static void
stop_cb(int count, void *arg)
{
	struct manager *mg = arg;
	struct timeval tick = {0, 10000};

	if (count > 1) {
		log_warn("second stop signal: exiting now", "");
		exit(1);
	}
	/* New submissions get 503 from here on. */
	mg->stopping = 1;
	kingest_stop(mg->kingest);
	prune_stop(mg->prune);
	bulk_stop(mg->bulk);
	pull_stop(mg->pull);
	mg->stop_deadline_ms = clock_mono_ms() + 10000;
	mg->stop_ev = event_new(mg->base, -1, EV_PERSIST, drain_cb, mg);
	event_add(mg->stop_ev, &tick);
}

int
main(int argc, char **argv)
{
	struct manager mg;
	struct event *gauges;
	struct timeval one_s = {1, 0};
	enum log_level lvl;
	char err[512], masked[512];

	memset(&mg, 0, sizeof(mg));
	if (argc == 2 && !strcmp(argv[1], "--print-routes")) {
		api_print_routes(stdout);
		return 0;
	}
	mg.cfg = cfg_from_args(&argc, argv, "prophet-manager",
			       "Prophet control plane and HTTP API.\n"
			       "      --print-routes       print the route "
			       "table and exit");
	if (argc > 1) {
		fprintf(stderr, "prophet-manager: unexpected argument '%s'\n",
			argv[1]);
		return 2;
	}
	log_level_parse(cfg_str(mg.cfg, CFG_LOG_LEVEL), &lvl);
	log_init("manager", lvl);
	log_info("starting", "version=%s commit=%s config=%s", PACKAGE_VERSION,
		 prophet_commit, cfg_path(mg.cfg));
	mg.nslots = (int)cfg_int(mg.cfg, CFG_CLUSTER_SLOTS);
	mg.horizon_ms = cfg_int(mg.cfg, CFG_TASK_HORIZON_MS);
	mg.index_margin_ms = cfg_int(mg.cfg, CFG_TASK_INDEX_MARGIN_MS);
	mg.bucket_ms = cfg_int(mg.cfg, CFG_TASK_BUCKET_MS);
	mg.bucket_near_ms = cfg_int(mg.cfg, CFG_TASK_BUCKET_NEAR_MS);
	mg.limits.max_body = (size_t)cfg_int(mg.cfg, CFG_TASK_MAX_BODY_BYTES);
	mg.limits.max_delay_ms = cfg_int(mg.cfg, CFG_TASK_MAX_DELAY_MS);
	mg.limits.max_headers =
		(size_t)cfg_int(mg.cfg, CFG_TASK_MAX_HEADERS_BYTES);
	mg.limits.callback_hosts =
		cfg_str(mg.cfg, CFG_HTTP_CALLBACK_HOSTS_ALLOWED);
	mg.limits.zone = tz_get;

	if (load_access(&mg, err, sizeof(err)) < 0)
		log_fatal("access", "error=\"%s\"", err);
	if (!auth_enabled(mg.auth) &&
	    !url_listen_is_loopback(cfg_str(mg.cfg, CFG_HTTP_LISTEN)))
		log_warn("the API listens beyond loopback without tokens: "
			 "set http.tokens_file",
			 "listen=%s", cfg_str(mg.cfg, CFG_HTTP_LISTEN));
	daemon_libevent_init();
	mg.base = event_base_new();
	mg.daemon = daemon_create(mg.base, stop_cb, reload_cb, &mg);
	register_metrics(&mg);

	mg.dsn = db_dsn_create(mg.cfg, err, sizeof(err));
	if (mg.dsn == NULL)
		log_fatal("bad config", "error=\"%s\"", err);
	log_info("database", "%s",
		 db_dsn_describe(mg.dsn, masked, sizeof(masked)));
	if (migrate_apply(mg.dsn, 30,
			  cfg_int(mg.cfg, CFG_DB_MIGRATE_COPY_MAX_ROWS), err,
			  sizeof(err)) < 0)
		log_fatal("database migration failed", "error=\"%s\"", err);
	if (guard_start(&mg, 30, err, sizeof(err)) < 0)
		log_fatal("cannot read the cluster secret", "error=\"%s\"",
			  err);

	mg.zk = zk_create(mg.base, mg.cfg, zk_event_cb, &mg);
	if (mg.zk == NULL || zk_wait_connected(mg.zk, 30000) < 0)
		log_fatal("cannot connect to zookeeper", "hosts=%s",
			  cfg_str(mg.cfg, CFG_ZK_HOSTS));
	if (zktree_ensure(mg.zk, cfg_str(mg.cfg, CFG_CLUSTER_ROOT), mg.nslots,
			  err, sizeof(err)) < 0)
		log_fatal("zookeeper tree", "error=\"%s\"", err);

	mg.db = db_pool_create(mg.base, mg.dsn,
			       (int)cfg_int(mg.cfg, CFG_DB_POOL_SIZE), "api");
	db_pool_watch(mg.db);
	mg.redis = redis_create(mg.base, mg.cfg, redis_state_cb, &mg);
	redis_on_failover(mg.redis, redis_failover_cb, &mg);
	mg.clock =
		refclock_create(mg.base, mg.redis,
				cfg_int(mg.cfg, CFG_WORKER_MAX_CLOCK_SKEW_MS),
				mg.m.clock_offset, mg.m.clock_skewed);
	mg.ingest = ingest_create(&mg);
	mg.ktopics = ktopics_create(&mg);
	if (cfg_str(mg.cfg, CFG_KAFKA_INGEST_TOPIC)[0] != '\0' &&
	    (mg.kingest = kingest_create(&mg, err, sizeof(err))) == NULL)
		log_fatal("kafka ingest", "error=\"%s\"", err);
	{
		struct http_limits lim = {
			.max_body = (size_t)cfg_int(mg.cfg,
						    CFG_HTTP_MAX_BODY_BYTES),
			.timeout_s = (int)cfg_int(mg.cfg, CFG_HTTP_TIMEOUT_S),
			.max_connections =
				(long)cfg_int(mg.cfg, CFG_HTTP_MAX_CONNECTIONS),
			.max_body_memory = (size_t)cfg_int(
				mg.cfg, CFG_HTTP_MAX_BODY_MEMORY_BYTES),
			.tls_cert = cfg_str(mg.cfg, CFG_HTTP_TLS_CERT),
			.tls_key = cfg_str(mg.cfg, CFG_HTTP_TLS_KEY),
			.tls_client_ca =
				cfg_str(mg.cfg, CFG_HTTP_TLS_CLIENT_CA),
			.loopback_hosts_only = 1,
		};

		mg.http = http_server_create(mg.base,
					     cfg_str(mg.cfg, CFG_HTTP_LISTEN),
					     &lim, err, sizeof(err));
	}
	if (mg.http == NULL)
		log_fatal("http", "error=\"%s\"", err);
	mg.pull = pull_create(&mg);
	api_register(&mg);
	lateness_start(&mg);
	cluster_sampler_start(&mg);
	topics_start(&mg);
	schedule_start(&mg);
	mg.cover = cover_start(&mg);
	mg.prune = prune_create(&mg);
	mg.bulk = bulk_create(&mg);
	gauges = event_new(mg.base, -1, EV_PERSIST, gauges_cb, &mg);
	event_add(gauges, &one_s);
	gauges_cb(-1, 0, &mg);

	log_info("ready", "listen=%s slots=%d",
		 cfg_str(mg.cfg, CFG_HTTP_LISTEN), mg.nslots);
	daemon_notify("READY=1");
	event_base_dispatch(mg.base);
	daemon_teardown(DAEMON_TEARDOWN_S);

	log_info("stopping", "pending=%zu", mg.inflight);
	if (mg.inflight > 0) {
		log_warn("exiting with requests unanswered", "pending=%zu",
			 mg.inflight);
		return 1;
	}
	/* Before the connections go: nothing may still wait on them. */
	pull_destroy(mg.pull);
	http_server_free(mg.http);
	if (mg.stop_ev != NULL)
		event_free(mg.stop_ev);
	/* Commits in flight complete (their answers are lost with the
	 * connections, but what was committed stays committed). */
	prune_destroy(mg.prune);
	bulk_destroy(mg.bulk);
	schedule_stop(&mg);
	db_pool_destroy(mg.db);
	db_dsn_destroy(mg.dsn);
	kingest_destroy(mg.kingest);
	ktopics_destroy(mg.ktopics);
	event_free(gauges);
	cluster_sampler_stop(&mg);
	topics_stop(&mg);
	redis_destroy(mg.redis);
	/* After: redis_destroy answers the index writes still pending (NULL
	 * replies), whose callbacks mark their slots in index_dirty. */
	ingest_destroy(mg.ingest);
	refclock_destroy(mg.clock);
	schedule_destroy(&mg);
	lateness_shutdown(&mg);
	zk_destroy(mg.zk);
	cover_destroy(mg.cover); /* after: no ZooKeeper answer can follow */
	daemon_destroy(mg.daemon);
	event_base_free(mg.base);
	metrics_free_all();
	auth_destroy(mg.auth);
	free_topics(mg.topics_allowed);
	cfg_destroy(mg.cfg);
	log_info("stopped", "");
	return 0;
}
