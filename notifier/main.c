#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "cfg.h"
#include "commit.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "http.h"
#include "httpcli.h"
#include "kafka.h"
#include "log.h"
#include "metrics.h"
#include "netguard.h"
#include "notifier.h"
#include "secret.h"
#include "utf8.h"
#include "xmalloc.h"

static void
register_metrics(struct notifier *n)
{
#define NM_REG(f, t, name, h) \
	n->m.f = metrics_register(METRIC_##t, name, h, NULL, 0);
	NOTIFIER_METRICS(NM_REG)
#undef NM_REG
	{
		static const char *classes[HTTPCLI__CLASS_COUNT];

		for (int i = 0; i < HTTPCLI__CLASS_COUNT; i++)
			classes[i] = httpcli_class_name(i);
		n->m.outcomes = metrics_register(
			METRIC_COUNTER, "prophet_callback_outcomes_total",
			"Callback attempts by outcome class", "class",
			HTTPCLI__CLASS_COUNT);
		metric_set_label_values(n->m.outcomes, classes);
	}
}

static void
gauges_cb(evutil_socket_t fd, short what, void *arg)
{
	struct notifier *n = arg;

	metric_set(n->m.db_up, db_pool_connected(n->db));
	flow_sweep(n);
}

static int
draining(const struct notifier *n)
{
	return n->inflight > 0 || n->busy > 0 || n->rec_n > 0 ||
	       n->rec_jobs > 0;
}

/* Graceful stop: nothing new starts; running callbacks finish (or the
 * grace runs out) and their outcomes are recorded. */
static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct notifier *n = arg;

	if (!draining(n) || clock_mono_ms() > n->stop_deadline_ms)
		event_base_loopexit(n->base, NULL);
}

static void
stop_cb(int count, void *arg)
{
	struct notifier *n = arg;
	struct timeval tick = {0, 10000};

	if (count > 1) {
		log_warn("second stop signal: exiting now", "");
		exit(1);
	}
	daemon_notify("STOPPING=1");
	log_info("stop requested", "running=%d waiting=%zu recording=%zu",
		 n->inflight, n->queued, n->rec_n);
	n->stopping = 1;
	if (n->consumer != NULL)
		consume_hold(n);
	flow_abandon(n);
	n->stop_deadline_ms =
		clock_mono_ms() + cfg_int(n->cfg, CFG_NOTIFIER_STOP_GRACE_MS);
	n->stop_ev = event_new(n->base, -1, EV_PERSIST, drain_cb, n);
	event_add(n->stop_ev, &tick);
}

static void
reload_cb(void *arg)
{
	struct notifier *n = arg;
	enum log_level lvl;
	char err[512];

	if (cfg_reload(n->cfg, err, sizeof(err)) < 0) {
		log_error("reload failed; keeping the running config",
			  "error=\"%s\"", err);
		return;
	}
	log_level_parse(cfg_str(n->cfg, CFG_LOG_LEVEL), &lvl);
	log_set_level(lvl);
	http_server_reload_tls(n->http);
	/* http.token_file read again, as the manager reads its tokens file:
	 * a token rotated (new token added to the managers, the file
	 * changed, systemctl reload) is sent from the next retry on; until
	 * then the managers' 401s only delayed the retries. */
	if (cfg_str(n->cfg, CFG_HTTP_TOKEN_FILE)[0] != '\0') {
		char *tok = cfg_http_token(n->cfg, err, sizeof(err));

		if (tok == NULL) {
			log_error("token not reloaded; keeping the running one",
				  "error=\"%s\"", err);
		} else if (strcmp(tok, n->token) != 0) {
			secret_free(n->token);
			n->token = tok;
			log_info("token reloaded", "key=http.token_file");
		} else {
			secret_free(tok);
		}
	}
	/* The signing keys too (a rotation: the new key first, the old one
	 * kept until every receiver has the new one, then dropped). */
	{
		struct whsign ks;
		int nk = cfg_signing_keys(n->cfg, &ks, err, sizeof(err));

		if (nk < 0) {
			log_error("callback signing keys not reloaded; keeping "
				  "the running ones",
				  "error=\"%s\" keys=%zu", err, n->sign.n);
		} else {
			if (nk == 0)
				memset(&ks, 0, sizeof(ks));
			if (ks.n != n->sign.n ||
			    memcmp(&ks, &n->sign, sizeof(ks)) != 0)
				log_info("callback signing keys reloaded",
					 "key=notifier.callback_signing_key_"
					 "file "
					 "keys=%zu",
					 ks.n);
			whsign_wipe(&n->sign);
			n->sign = ks;
			whsign_wipe(&ks);
		}
	}
	log_info("config reloaded", "");
}

static void
r_readyz(void *ctx, struct evhttp_request *req, const char *a, size_t len)
{
	struct notifier *n = ctx;
	int db = db_pool_ready(n->db);
	int kafka = !kafka_brokers_down(n->dlq);
	int ok = db && kafka && n->consumer != NULL && !n->stopping;

	(void)a;
	(void)len;
	http_reply_json(req, ok ? 200 : 503,
			json_pack("{s:b, s:b, s:b, s:b, s:i, s:i, s:o}",
				  "ready", ok, "db", db, "kafka", kafka,
				  "secret", n->have_key, "running", n->inflight,
				  "waiting", (int)n->queued, "id",
				  utf8_json_str(n->id)));
}

/* A few scrapers: /metrics, /healthz and /readyz, all public. */
static const struct http_route routes[] = {
	{EVHTTP_REQ_GET, "/metrics", 0, HTTP_SHAPE_NATIVE, 0,
	 http_route_metrics},
	{EVHTTP_REQ_GET, "/healthz", 0, HTTP_SHAPE_NATIVE, 0,
	 http_route_healthz},
	{EVHTTP_REQ_GET, "/readyz", 0, HTTP_SHAPE_NATIVE, 0, r_readyz},
};

/* A route's URL goes into JSON (retry tasks, dead letters) and onto the
 * request line: valid UTF-8, no spaces or control characters. */
static int
url_text(const char *v)
{
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return 0;
	return utf8_valid(v, strlen(v));
}

/* Routes must be usable URLs: fail at start, naming the key. */
static void
check_routes(const struct cfg *cfg)
{
	size_t nr = cfg_extra_count(cfg, "notifier.routes");

	for (size_t i = 0; i < nr; i++) {
		struct callback_spec cb;
		char origin[300];
		const char *k, *v;

		cfg_extra_get(cfg, "notifier.routes", i, &k, &v);
		callback_spec_route(v, &cb);
		if ((strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) ||
		    callback_url_origin(v, origin, sizeof(origin), NULL, 0) <
			    0 ||
		    !url_text(v))
			log_fatal("bad config",
				  "key=notifier.routes.%s error=\"not an "
				  "http(s) URL of UTF-8 text without spaces\"",
				  k);
		callback_spec_clear(&cb);
	}
}

/*
 * The consumer stops polling while max_pending messages are in hand (a
 * slow or dead host can keep it so for long); librdkafka would take that
 * for a hung member after max.poll.interval.ms (5 min) and leave the
 * group. Unless configured, allow the maximum, 24 h: a dead process is
 * still noticed by its missing heartbeats (session.timeout.ms).
 */
static void
default_poll_interval(struct cfg *cfg)
{
	size_t nx = cfg_extra_count(cfg, "kafka.consumer");
	char err[128];

	for (size_t i = 0; i < nx; i++) {
		const char *k, *v;

		cfg_extra_get(cfg, "kafka.consumer", i, &k, &v);
		if (!strcmp(k, "max.poll.interval.ms"))
			return;
	}
	cfg_set(cfg, "kafka.consumer", "max.poll.interval.ms", "86400000", err,
		sizeof(err));
}

/*
 * The manager takes retry tasks from us: a refused token or an untrusted
 * certificate stops the notifier at start, naming the key. An empty batch
 * asks nothing of the manager: a token it takes gets 400, one it refuses
 * 401 before the body is read. A manager that is down is waited for.
 */
static void
check_manager(struct notifier *n)
{
	static const char body[] = "{\"tasks\":[]}";
	char url[1024], auth[600];
	char *hdrs[3] = {"Content-Type: application/json", NULL, NULL};
	const char *mu = cfg_str(n->cfg, CFG_NOTIFIER_MANAGER_URL);
	struct httpcli_req rq = {
		.method = "POST",
		.url = url,
		.headers = hdrs,
		.body = body,
		.body_len = sizeof(body) - 1,
		.timeout_ms = 5000,
		.ca_file = cfg_str(n->cfg, CFG_HTTP_TLS_CA),
		.cert_file = cfg_str(n->cfg, CFG_HTTP_TLS_CLIENT_CERT),
		.key_file = cfg_str(n->cfg, CFG_HTTP_TLS_CLIENT_KEY),
		.user_agent = "prophet-notifier/" VERSION};
	struct httpcli_result r;
	char masked[512];

	snprintf(url, sizeof(url), "%s/batch", n->submit_url);
	if (n->token[0] != '\0') {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
			 n->token);
		hdrs[1] = auth;
	}
	httpcli_request_blocking(n->httpc, &rq, &r);
	explicit_bzero(auth, sizeof(auth));
	log_mask_url(mu, masked, sizeof(masked));
	if (r.cls == HTTPCLI_TLS)
		log_fatal(strstr(r.error, "certificate problem") != NULL
				  ? "the manager's TLS certificate is not "
				    "trusted"
				  : "TLS with the manager failed",
			  "manager=%s error=\"%s\" hint=\"check "
			  "http.tls_ca, and http.tls_client_cert and "
			  "tls_client_key if the manager asks for client "
			  "certificates\"",
			  masked, r.error);
	if (r.status == 401 || r.status == 403)
		log_fatal("the manager refuses the notifier's token",
			  "manager=%s status=%ld hint=\"http.token_file (or "
			  "http.token) needs a token with the submit role\"",
			  masked, r.status);
	if (r.transport || r.status >= 500)
		log_warn("manager not answering at start; retry tasks wait "
			 "for it",
			 "manager=%s error=\"%s\"%s", masked, r.error,
			 !strncmp(mu, "https:", 6) &&
					 !cfg_str(n->cfg,
						  CFG_HTTP_TLS_CLIENT_CERT)[0]
				 ? " hint=\"a manager with http.tls_client_ca "
				   "needs http.tls_client_cert here\""
				 : "");
	httpcli_result_clear(&r);
}

int
main(int argc, char **argv)
{
	struct notifier n;
	struct event *gauges;
	struct timeval one_s = {1, 0};
	enum log_level lvl;
	char err[512], masked[512];

	memset(&n, 0, sizeof(n));
	n.cfg = cfg_from_args(&argc, argv, "prophet-notifier",
			      "Prophet HTTP callbacks: consumes due tasks from "
			      "Kafka and calls their callback URL.");
	if (argc > 1) {
		fprintf(stderr, "prophet-notifier: unexpected argument '%s'\n",
			argv[1]);
		return 2;
	}
	log_level_parse(cfg_str(n.cfg, CFG_LOG_LEVEL), &lvl);
	log_init("notifier", lvl);
	check_routes(n.cfg);
	default_poll_interval(n.cfg);
	daemon_default_id(n.id, sizeof(n.id));
	n.topic_prefix = cfg_str(n.cfg, CFG_KAFKA_TOPIC_PREFIX);
	n.retry_ktopic = xasprintf("%s%s", n.topic_prefix,
				   cfg_str(n.cfg, CFG_NOTIFIER_RETRY_TOPIC));
	{
		const char *mu = cfg_str(n.cfg, CFG_NOTIFIER_MANAGER_URL);
		size_t ml = strlen(mu);

		while (ml > 0 && mu[ml - 1] == '/')
			ml--;
		n.submit_url = xasprintf("%.*s/v1/tasks", (int)ml, mu);
	}
	n.dlq_ktopic =
		xasprintf("%s%s", n.topic_prefix,
			  cfg_str(n.cfg, CFG_NOTIFIER_DEAD_LETTER_TOPIC));
	n.token = cfg_http_token(n.cfg, err, sizeof(err));
	if (n.token == NULL)
		log_fatal("bad config", "error=\"%s\"", err);
	if (cfg_signing_keys(n.cfg, &n.sign, err, sizeof(err)) < 0)
		log_fatal("bad config", "error=\"%s\"", err);
	log_info("starting", "version=%s commit=%s id=%s config=%s manager=%s",
		 PACKAGE_VERSION, prophet_commit, n.id, cfg_path(n.cfg),
		 log_mask_url(cfg_str(n.cfg, CFG_NOTIFIER_MANAGER_URL), masked,
			      sizeof(masked)));

	daemon_libevent_init();
	n.base = event_base_new();
	n.daemon = daemon_create(n.base, stop_cb, reload_cb, &n);
	register_metrics(&n);

	n.dlq = kafka_producer_create(n.base, n.cfg, outcome_dlq_dr_cb, &n, err,
				      sizeof(err));
	if (n.dlq == NULL)
		log_fatal("kafka producer", "error=\"%s\"", err);
	/* Before the subscription, which sees a topic made after it only at
	 * its next metadata refresh. */
	{
		const char *own[] = {n.retry_ktopic, n.dlq_ktopic};

		if (kafka_ensure_topics(n.dlq, n.cfg, own, 2, 10000, err,
					sizeof(err)) < 0)
			log_warn("cannot create the notifier's topics; they "
				 "must exist (or auto-creation be on)",
				 "error=\"%s\" hint=\"allow CREATE on them, or "
				 "create them\"",
				 err);
	}
	n.dsn = db_dsn_create(n.cfg, err, sizeof(err));
	if (n.dsn == NULL)
		log_fatal("bad config", "error=\"%s\"", err);
	n.db = db_pool_create(n.base, n.dsn,
			      (int)cfg_int(n.cfg, CFG_DB_POOL_SIZE),
			      "notifier");
	db_pool_watch(n.db);
	n.httpc = httpcli_create(n.base);
	check_manager(&n);
	n.guard = netguard_create(
		cfg_str(n.cfg, CFG_NOTIFIER_CALLBACK_NETWORKS_ALLOWED), err,
		sizeof(err));
	if (n.guard == NULL) /* cfg_check_cidr_list let it pass */
		log_fatal("bad config",
			  "key=notifier.callback_networks_allowed error=\"%s\"",
			  err);
	{
		struct http_limits lim = {
			.max_body = 65536,
			.timeout_s = 30,
			.max_connections = 64,
			.tls_cert = cfg_str(n.cfg, CFG_NOTIFIER_HTTP_TLS_CERT),
			.tls_key = cfg_str(n.cfg, CFG_NOTIFIER_HTTP_TLS_KEY),
			.tls_client_ca =
				cfg_str(n.cfg, CFG_NOTIFIER_HTTP_TLS_CLIENT_CA),
		};

		n.http = http_server_create(
			n.base, cfg_str(n.cfg, CFG_NOTIFIER_HTTP_LISTEN), &lim,
			err, sizeof(err));
	}
	if (n.http == NULL)
		log_fatal("http", "error=\"%s\"", err);
	http_server_set_routes(n.http, routes,
			       sizeof(routes) / sizeof(routes[0]), NULL, &n);
	flow_start(&n);
	outcome_start(&n);
	secret_start(&n); /* then consume_start */
	announce_start(&n);
	gauges = event_new(n.base, -1, EV_PERSIST, gauges_cb, &n);
	event_add(gauges, &one_s);

	log_info("ready",
		 "id=%s listen=%s dead_letter_topic=%s signing_keys=%zu", n.id,
		 cfg_str(n.cfg, CFG_NOTIFIER_HTTP_LISTEN), n.dlq_ktopic,
		 n.sign.n);
	daemon_notify("READY=1");
	event_base_dispatch(n.base);
	daemon_teardown(DAEMON_TEARDOWN_S);

	log_info("stopping", "running=%d recording=%zu pending=%zu", n.inflight,
		 n.rec_n + (size_t)n.rec_jobs, n.pending);
	http_server_free(n.http);
	httpcli_destroy(n.httpc);
	kafka_producer_destroy(n.dlq, 2000);
	n.stopping = 2; /* the pool drains: record nothing more */
	db_pool_destroy(n.db);
	db_dsn_destroy(n.dsn);
	announce_stop(&n);
	consume_stop(&n);
	flow_stop(&n);
	outcome_stop(&n);
	secret_stop(&n);
	netguard_destroy(n.guard);
	event_free(gauges);
	if (n.stop_ev != NULL)
		event_free(n.stop_ev);
	daemon_destroy(n.daemon);
	event_base_free(n.base);
	metrics_free_all();
	xfree(n.retry_ktopic);
	xfree(n.dlq_ktopic);
	xfree(n.submit_url);
	secret_free(n.token);
	whsign_wipe(&n.sign);
	cfg_destroy(n.cfg);
	log_info("stopped", "");
	return 0;
}
