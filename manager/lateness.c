#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "http.h"
#include "httpcli.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "promtext.h"
#include "url.h"
#include "utf8.h"
#include "xmalloc.h"
#include "zk.h"
#include "zknode.h"

/*
 * GET /v1/cluster/lateness: the fire lateness histogram of the whole
 * cluster, for the console's live chart. Lateness is measured where tasks
 * are published, in each worker's prophet_fire_lateness_seconds; every
 * worker writes the address of its /metrics into its ZooKeeper node
 * ("metrics"), so the manager lists /workers, scrapes each worker as
 * Prometheus would, and sums the buckets. Each worker's buckets are in the
 * answer too: the counters are cumulative, and the console charts the
 * difference between two answers worker by worker (a worker that restarts
 * starts again from zero).
 */

#define LATENESS_METRIC "prophet_fire_lateness_seconds"
#define SCRAPE_TIMEOUT_MS 2000
#define REPLY_TIMEOUT_MS 3000
#define SCRAPE_MAX_BYTES (1 << 20)
#define SCRAPE_MAX_WORKERS 256

struct late {
	struct manager *mg;
	struct evhttp_request *req;
	int outstanding;
	int replied;
	int zk_failed;
	int64_t now;
	json_t *workers; /* array of {"id","metrics","ok",...} */
	struct promtext_hist sum;
	int summed; /* workers in sum */
	struct event *timeout;
};

struct late_worker {
	struct late *l;
	json_t *entry; /* borrowed from l->workers */
	char id[ZKNODE_ID_MAX];
};

static void
late_reply(struct late *l, int code)
{
	json_t *le, *counts, *out;

	if (l->replied)
		return;
	l->replied = 1;
	if (code != 200) {
		http_reply_error(l->req, code, "unavailable", NULL,
				 "zookeeper did not answer");
		return;
	}
	le = json_array();
	counts = json_array();
	for (size_t i = 0; i < l->sum.nbuckets; i++) {
		/* JSON has no infinity: the +Inf bound is null. */
		json_array_append_new(le, isinf(l->sum.le[i])
						  ? json_null()
						  : json_real(l->sum.le[i]));
		json_array_append_new(
			counts, json_integer((json_int_t)l->sum.count[i]));
	}
	out = json_pack("{s:I, s:s, s:O, s:{s:o, s:o, s:f, s:I, s:i}}", "at",
			(json_int_t)l->now, "metric", LATENESS_METRIC,
			"workers", l->workers, "lateness", "le", le, "counts",
			counts, "sum", l->sum.sum, "count",
			(json_int_t)l->sum.total, "workers", l->summed);
	http_reply_json(l->req, 200, out);
}

static void
late_put(struct late *l)
{
	if (--l->outstanding > 0)
		return;
	late_reply(l, l->zk_failed ? 503 : 200);
	event_free(l->timeout);
	json_decref(l->workers);
	l->mg->inflight--;
	xfree(l);
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct late *l = arg;

	late_reply(l, l->zk_failed ? 503 : 200);
}

static void worker_failed(struct late_worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
worker_failed(struct late_worker *w, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_object_set_new(w->entry, "ok", json_false());
	json_object_set_new(w->entry, "error", utf8_json_str(msg));
}

static void
scrape_cb(const struct httpcli_result *r, void *arg)
{
	struct late_worker *w = arg;
	struct late *l = w->l;
	struct promtext_hist h;

	if (r->transport) {
		worker_failed(w, "%s", "no answer from its /metrics");
	} else if (r->status != 200) {
		worker_failed(w, "/metrics answered %ld", r->status);
	} else if (r->capped) {
		worker_failed(w, "its /metrics is larger than %d bytes",
			      SCRAPE_MAX_BYTES);
	} else if (promtext_histogram(r->body, r->body_len, LATENESS_METRIC,
				      &h) < 0) {
		worker_failed(w, "%s", "no " LATENESS_METRIC);
	} else if (!promtext_hist_counts(&h)) {
		worker_failed(w, "%s",
			      LATENESS_METRIC " has values that are "
					      "not counts");
	} else if (l->summed > 0 && promtext_hist_add(&l->sum, &h) < 0) {
		worker_failed(w, "%s", "its buckets differ");
	} else {
		json_t *counts = json_array();

		if (l->summed++ == 0)
			l->sum = h;
		for (size_t i = 0; i < h.nbuckets; i++)
			json_array_append_new(
				counts, json_integer((json_int_t)h.count[i]));
		json_object_set_new(w->entry, "ok", json_true());
		json_object_set_new(w->entry, "counts", counts);
		json_object_set_new(w->entry, "count",
				    json_integer((json_int_t)h.total));
		json_object_set_new(w->entry, "sum", json_real(h.sum));
	}
	xfree(w);
	late_put(l);
}

/*
 * GET http(s)://<addr>/metrics through the manager's HTTP client; over
 * HTTPS the worker's certificate is verified against http.tls_ca for its
 * host name or address.
 */
static int
scrape(struct late_worker *w, const char *addr, int tls)
{
	struct manager *mg = w->l->mg;
	char host[256], url[320];
	int port;
	struct httpcli_req rq = {
		.method = "GET",
		.url = url,
		.timeout_ms = SCRAPE_TIMEOUT_MS,
		.max_response_bytes = SCRAPE_MAX_BYTES,
		.whole_body = 1,
		.ca_file = cfg_str(mg->cfg, CFG_HTTP_TLS_CA),
		.cert_file = cfg_str(mg->cfg, CFG_HTTP_TLS_CLIENT_CERT),
		.key_file = cfg_str(mg->cfg, CFG_HTTP_TLS_CLIENT_KEY),
		.user_agent = "prophet-manager/" VERSION,
	};

	if (hostport_parse(addr, host, sizeof(host), &port) < 0) {
		worker_failed(w, "bad metrics address '%s'", addr);
		return -1;
	}
	snprintf(url, sizeof(url), "%s://%s%s%s:%d/metrics",
		 tls ? "https" : "http", strchr(host, ':') ? "[" : "", host,
		 strchr(host, ':') ? "]" : "", port);
	httpcli_request(mg->httpc, &rq, scrape_cb, w);
	return 0;
}

/* A loopback address named by a worker on another host would reach
 * whatever listens on that port here. */
static int
elsewhere_loopback(const char *addr, const char *worker_host)
{
	char host[256], self[256];
	int port;

	if (hostport_parse(addr, host, sizeof(host), &port) < 0)
		return 0;
	if (!url_host_is_loopback(host))
		return 0;
	if (gethostname(self, sizeof(self)) != 0)
		return 0;
	self[sizeof(self) - 1] = '\0';
	return worker_host != NULL && strcmp(worker_host, self) != 0;
}

static void
node_cb(struct zk *z, int rc, const char *data, int len, const struct Stat *st,
	void *arg)
{
	struct late_worker *w = arg;
	struct late *l = w->l;
	struct worker_node n;

	if (rc != ZOK || worker_node_decode(data, len, &n) < 0 ||
	    n.metrics[0] == '\0') {
		worker_failed(w, "%s",
			      rc == ZOK ? "its node has no metrics address"
					: "its node is gone");
	} else if (elsewhere_loopback(n.metrics, n.host[0] ? n.host : NULL)) {
		json_object_set_new(w->entry, "metrics",
				    utf8_json_str(n.metrics));
		worker_failed(w, "%s",
			      "its metrics listen on the loopback of another "
			      "host (worker.http_listen)");
	} else {
		json_object_set_new(w->entry, "metrics",
				    utf8_json_str(n.metrics));
		if (!l->replied && scrape(w, n.metrics, n.metrics_tls) == 0)
			return; /* scrape_cb frees w and drops the reference */
	}
	xfree(w);
	late_put(l);
}

static void
children_cb(struct zk *z, int rc, const struct String_vector *names, void *arg)
{
	struct late *l = arg;
	char path[512];

	if (rc != ZOK) {
		l->zk_failed = 1;
		late_put(l);
		return;
	}
	for (int i = 0; i < names->count && i < SCRAPE_MAX_WORKERS; i++) {
		struct late_worker *w = xcalloc(1, sizeof(*w));

		w->l = l;
		snprintf(w->id, sizeof(w->id), "%s", names->data[i]);
		/* Node names and data are anybody's who can write to
		 * ZooKeeper: valid UTF-8 or replaced. */
		w->entry = json_pack("{s:o, s:n, s:b}", "id",
				     utf8_json_str(w->id), "metrics", "ok", 0);
		json_array_append_new(l->workers, w->entry);
		zpath_child(path, sizeof(path),
			    cfg_str(l->mg->cfg, CFG_CLUSTER_ROOT),
			    ZPATH_WORKERS, names->data[i]);
		l->outstanding++;
		if (zk_aget(z, path, 0, node_cb, w) < 0) {
			l->outstanding--;
			worker_failed(w, "%s", "zookeeper refused the read");
			xfree(w);
		}
	}
	late_put(l);
}

void
lateness_get(struct manager *mg, struct evhttp_request *req)
{
	struct late *l = xcalloc(1, sizeof(*l));
	struct timeval tv = {REPLY_TIMEOUT_MS / 1000,
			     (REPLY_TIMEOUT_MS % 1000) * 1000};
	char path[512];

	l->mg = mg;
	l->req = req;
	l->now = clock_now_ms();
	l->workers = json_array();
	l->outstanding = 1; /* ours, dropped at the end */
	l->timeout = evtimer_new(mg->base, timeout_cb, l);
	evtimer_add(l->timeout, &tv);
	mg->inflight++;
	zpath(path, sizeof(path), cfg_str(mg->cfg, CFG_CLUSTER_ROOT),
	      ZPATH_WORKERS);
	l->outstanding++;
	if (zk_aget_children(mg->zk, path, 0, children_cb, l) < 0) {
		l->outstanding--;
		l->zk_failed = 1;
	}
	late_put(l);
}

void
lateness_start(struct manager *mg)
{
	char err[512];
	/* The CA and the client certificate must load now, not at the
	 * first read of a worker's metrics. */
	SSL_CTX *ca = http_tls_client_context(cfg_str(mg->cfg, CFG_HTTP_TLS_CA),
					      NULL, NULL, err, sizeof(err));

	if (ca == NULL)
		log_fatal("bad config", "key=http.tls_ca error=\"%s\"", err);
	SSL_CTX_free(ca);
	ca = http_tls_client_context(cfg_str(mg->cfg, CFG_HTTP_TLS_CA),
				     cfg_str(mg->cfg, CFG_HTTP_TLS_CLIENT_CERT),
				     cfg_str(mg->cfg, CFG_HTTP_TLS_CLIENT_KEY),
				     err, sizeof(err));
	if (ca == NULL)
		log_fatal("bad config", "key=http.tls_client_cert error=\"%s\"",
			  err);
	SSL_CTX_free(ca);
	mg->httpc = httpcli_create(mg->base);
}

void
lateness_shutdown(struct manager *mg)
{
	/* Scrapes still running are abandoned. */
	httpcli_destroy(mg->httpc);
	mg->httpc = NULL;
}
