#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "daemon.h"
#include "hmap.h"
#include "httpcli.h"
#include "log.h"
#include "metrics.h"
#include "notifier.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Flow control: a queue per host:port, a global and a per-host limit of
 * running callbacks and a per-host token bucket. Hosts with work wait in
 * an active list served round-robin, one start per host per round, so a
 * slow or rate-limited host never holds up the others. Nothing is dropped:
 * messages wait, and the consumer pauses when too many are in hand.
 */

static void pump(struct notifier *n);

static void
pump_cb(evutil_socket_t fd, short what, void *arg)
{
	pump(arg);
}

static struct nhost *
host_get(struct notifier *n, const char *origin)
{
	struct nhost *h = hmap_get(n->hosts, origin);

	if (h == NULL) {
		h = xcalloc(1, sizeof(*h));
		snprintf(h->origin, sizeof(h->origin), "%s", origin);
		tbucket_init(&h->tb,
			     (double)cfg_int(n->cfg, CFG_NOTIFIER_HOST_RATE),
			     (double)cfg_int(n->cfg, CFG_NOTIFIER_HOST_BURST),
			     clock_mono_ms());
		hmap_put(n->hosts, h->origin, h);
	}
	return h;
}

static void
request_done_cb(const struct httpcli_result *r, void *arg)
{
	struct nmsg *m = arg;
	struct notifier *n = m->n;

	m->host->inflight--;
	n->inflight--;
	metric_set(n->m.inflight, n->inflight);
	metric_observe(n->m.latency, r->seconds);
	metric_vec_inc(n->m.outcomes, r->cls);
	if (r->cls == HTTPCLI_BLOCKED)
		metric_inc(n->m.cb_blocked);
	else if (r->transport)
		metric_inc(n->m.cb_transport_error);
	else if (r->cls == HTTPCLI_OK)
		metric_inc(n->m.cb_ok);
	else
		metric_inc(n->m.cb_http_error);
	if (r->capped)
		metric_inc(n->m.cb_capped);
	/* for the log only, and its quotes kept balanced */
	utf8_copy(m->detail, sizeof(m->detail), r->error, strlen(r->error));
	for (char *p = m->detail; *p; p++)
		if (*p == '"' || *p == '\\')
			*p = '\'';
	log_debug(
		"callback done",
		"id=%s%s attempt=%d class=%s status=%ld capped=%d seconds=%.3f",
		m->id, m->trace, m->attempt, httpcli_class_name(r->cls),
		r->status, r->capped, r->seconds);
	if (r->cls == HTTPCLI_BLOCKED)
		log_warn("callback blocked: an address not in "
			 "notifier.callback_networks_allowed, or a redirect to "
			 "another scheme",
			 "id=%s%s attempt=%d detail=\"%s\"", m->id, m->trace,
			 m->attempt, m->detail);
	/* blocked is final: a retry would be refused the same way */
	outcome_handle(m, r->cls, r->status, NULL, r->cls == HTTPCLI_BLOCKED);
	if (!n->stopping)
		pump(n);
}

static void
start(struct notifier *n, struct nmsg *m)
{
	struct callback_signing sign = {
		.keys = &n->sign,
		.timestamp = clock_now_ms() / 1000,
		.body = m->body,
		.body_len = m->body_len,
	};
	char **hdrs = callback_headers_build(
		&m->cb, m->id, m->attempt, m->due_at, m->occurrence,
		m->traceparent, m->tracestate, &sign);
	int64_t tmax = cfg_int(n->cfg, CFG_NOTIFIER_MAX_TIMEOUT_MS);
	int64_t timeout = m->cb.timeout_ms > 0
				  ? m->cb.timeout_ms
				  : cfg_int(n->cfg, CFG_NOTIFIER_TIMEOUT_MS);
	struct httpcli_req rq = {
		.method = m->cb.method,
		.url = m->cb.url,
		.headers = hdrs,
		.body = m->body,
		.body_len = m->body_len,
		.timeout_ms = (long)(timeout < tmax ? timeout : tmax),
		.max_redirects =
			(long)cfg_int(n->cfg, CFG_NOTIFIER_MAX_REDIRECTS),
		.guard = n->guard,
		.max_response_bytes = (size_t)cfg_int(
			n->cfg, CFG_NOTIFIER_MAX_RESPONSE_BYTES),
		.user_agent = "prophet-notifier/" VERSION,
	};

	m->host->inflight++;
	n->inflight++;
	metric_set(n->m.inflight, n->inflight);
	httpcli_request(n->httpc, &rq, request_done_cb, m);
	callback_headers_free(hdrs);
}

static void
pump(struct notifier *n)
{
	int64_t max = cfg_int(n->cfg, CFG_NOTIFIER_MAX_INFLIGHT);
	int64_t host_max = cfg_int(n->cfg, CFG_NOTIFIER_HOST_MAX_INFLIGHT);
	int64_t now = clock_mono_ms(), wait = -1;
	struct nhost *h, **hp;
	int progress = 1;

	while (progress && n->inflight < max) {
		progress = 0;
		for (h = n->active; h != NULL && n->inflight < max;
		     h = h->anext) {
			struct nmsg *m = h->qh;

			if (m == NULL || h->inflight >= host_max)
				continue;
			if (!tbucket_take(&h->tb, now)) {
				int64_t w = tbucket_wait_ms(&h->tb, now);

				if (wait < 0 || w < wait)
					wait = w;
				continue;
			}
			h->qh = m->qnext;
			if (h->qh == NULL)
				h->qt = NULL;
			n->queued--;
			start(n, m);
			progress = 1;
		}
	}
	/* hosts without waiting work leave the active list */
	for (hp = &n->active; (h = *hp) != NULL;) {
		if (h->qh == NULL) {
			*hp = h->anext;
			h->active = 0;
			h->anext = NULL;
		} else {
			hp = &h->anext;
		}
	}
	metric_set(n->m.waiting, (double)n->queued);
	if (wait >= 0) {
		struct timeval tv = {wait / 1000, (wait % 1000) * 1000 + 1000};

		evtimer_add(n->pump_ev, &tv);
	}
}

void
flow_enqueue(struct notifier *n, struct nmsg *m)
{
	struct nhost *h = host_get(n, m->origin);

	m->host = h;
	m->qnext = NULL;
	m->queued_us = clock_mono_us();
	if (h->qt != NULL)
		h->qt->qnext = m;
	else
		h->qh = m;
	h->qt = m;
	n->queued++;
	if (!h->active) {
		h->active = 1;
		h->anext = n->active;
		n->active = h;
	}
	if (!n->stopping)
		pump(n);
}

void
flow_abandon(struct notifier *n)
{
	struct nhost *h;

	for (h = n->active; h != NULL; h = h->anext) {
		h->qh = h->qt = NULL;
		h->active = 0;
	}
	n->active = NULL;
	if (n->queued > 0)
		log_info("callbacks not started are left to the next run",
			 "count=%zu", n->queued);
	n->queued = 0;
	metric_set(n->m.waiting, 0);
	evtimer_del(n->pump_ev);
}

struct sweep {
	struct nhost **idle;
	size_t n, cap;
	int64_t now;
};

static void
sweep_one(const char *key, void *value, void *arg)
{
	struct nhost *h = value;
	struct sweep *s = arg;

	if (h->inflight > 0 || h->active || h->qh != NULL)
		return;
	/* a full bucket is the state a new host starts in */
	if (h->tb.rate > 0 &&
	    (tbucket_wait_ms(&h->tb, s->now) > 0 || h->tb.tokens < h->tb.burst))
		return;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->idle = xrealloc(s->idle, s->cap * sizeof(*s->idle));
	}
	s->idle[s->n++] = h;
}

/* Forgets idle hosts, so that many distinct hosts do not pile up. */
void
flow_sweep(struct notifier *n)
{
	struct sweep s = {NULL, 0, 0, clock_mono_ms()};

	hmap_foreach(n->hosts, sweep_one, &s);
	for (size_t i = 0; i < s.n; i++) {
		hmap_del(n->hosts, s.idle[i]->origin);
		xfree(s.idle[i]);
	}
	xfree(s.idle);
}

void
flow_start(struct notifier *n)
{
	n->hosts = hmap_create();
	n->pump_ev = evtimer_new(n->base, pump_cb, n);
}

static void
free_host(const char *key, void *value, void *arg)
{
	xfree(value);
}

void
flow_stop(struct notifier *n)
{
	if (n->hosts != NULL) {
		hmap_foreach(n->hosts, free_host, NULL);
		hmap_destroy(n->hosts);
	}
	if (n->pump_ev != NULL)
		event_free(n->pump_ev);
}
