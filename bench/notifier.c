/*
 * The notifier scenario: tasks with a callback to an HTTP server run here,
 * due within --spread-ms; measures callbacks/s and the due -> callback
 * latency. Needs a prophet-notifier consuming the task topic
 * (scripts/bench starts one).
 */
#include "config.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "bench.h"
#include "xmalloc.h"

/* The callback server, on its own thread and event base. */
struct cbserver {
	struct event_base *base;
	struct evhttp *http;
	pthread_t thread;
	int port;
	struct ledger *ledgers[2];
	struct event *tick;
	atomic_int stopping;
	atomic_long calls;
	atomic_long foreign;
};

static void
record(struct cbserver *s, const char *id)
{
	for (int k = 0; k < 2; k++) {
		struct ledger *l = s->ledgers[k];
		size_t plen;
		char *end;
		unsigned long seq;

		if (l == NULL)
			continue;
		plen = strlen(l->prefix);
		if (strncmp(id, l->prefix, plen))
			continue;
		seq = strtoul(id + plen, &end, 10);
		if (*end != '\0' || seq >= l->n)
			break;
		if (l->recv_us[seq] == 0) {
			l->recv_us[seq] = now_us();
			atomic_fetch_add(&l->received, 1);
		} else {
			atomic_fetch_add(&l->dups, 1);
		}
		if (l->copies[seq] < UINT16_MAX)
			l->copies[seq]++;
		return;
	}
	atomic_fetch_add(&s->foreign, 1);
}

static void
request_cb(struct evhttp_request *req, void *arg)
{
	struct cbserver *s = arg;
	const char *id = evhttp_find_header(
		evhttp_request_get_input_headers(req), "X-Prophet-Id");

	atomic_fetch_add(&s->calls, 1);
	if (id != NULL)
		record(s, id);
	evhttp_send_reply(req, 200, "OK", NULL);
}

static void *
server_main(void *arg)
{
	struct cbserver *s = arg;

	event_base_dispatch(s->base);
	return NULL;
}

/* The base is not thread-safe: the main thread only sets a flag. */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct cbserver *s = arg;

	if (atomic_load(&s->stopping))
		event_base_loopbreak(s->base);
}

static int
server_start(struct cbserver *s)
{
	struct evhttp_bound_socket *bs;
	struct sockaddr_in sin;
	socklen_t slen = sizeof(sin);

	s->base = event_base_new();
	s->http = evhttp_new(s->base);
	evhttp_set_gencb(s->http, request_cb, s);
	bs = evhttp_bind_socket_with_handle(s->http, "127.0.0.1", 0);
	if (bs == NULL || getsockname(evhttp_bound_socket_get_fd(bs),
				      (struct sockaddr *)&sin, &slen) < 0) {
		note("notifier: cannot listen on 127.0.0.1");
		return -1;
	}
	s->port = ntohs(sin.sin_port);
	{
		struct timeval tv = {0, 50000};

		s->tick = event_new(s->base, -1, EV_PERSIST, tick_cb, s);
		event_add(s->tick, &tv);
	}
	return pthread_create(&s->thread, NULL, server_main, s) ? -1 : 0;
}

static void
server_stop(struct cbserver *s)
{
	atomic_store(&s->stopping, 1);
	pthread_join(s->thread, NULL);
	event_free(s->tick);
	evhttp_free(s->http);
	event_base_free(s->base);
}

/* Waits until every accepted task of l was called back, or grace
 * seconds after last_due_ms without progress. */
static void
wait_called(const struct bench_opts *o, struct ledger *l, int64_t last_due_ms)
{
	long last = -1;
	int64_t last_change = clock_mono_us();

	while (!bench_stop) {
		long got = atomic_load(&l->received);

		if (got >= atomic_load(&l->accepted) &&
		    now_us() / 1000 >= last_due_ms)
			break;
		if (got != last) {
			last = got;
			last_change = clock_mono_us();
		}
		if (now_us() / 1000 >
			    last_due_ms + (int64_t)(o->grace * 1000) &&
		    clock_mono_us() - last_change > 3000000)
			break;
		usleep(20000);
	}
	if (o->settle > 0 && !bench_stop)
		usleep((useconds_t)(o->settle * 1e6));
}

static void
progress_cb(void *arg, char *buf, size_t len)
{
	struct ledger *l = arg;

	snprintf(buf, len, "notifier: accepted %ld called back %ld dups %ld",
		 atomic_load(&l->accepted), atomic_load(&l->received),
		 atomic_load(&l->dups));
}

int
scen_notifier(struct bench_opts *o)
{
	struct cbserver srv;
	struct ledger *warm, *l;
	struct submit_stats st;
	struct progress *prog;
	struct report *r;
	struct submitter *s;
	long count = o->count ? o->count : 20000;
	char topic[200], prefix[96], url[64];
	int64_t t0_ms, min_us = INT64_MAX, max_us = 0;
	double *lat;
	size_t n = 0;
	long lost = 0;

	memset(&srv, 0, sizeof(srv));
	if (o->conns == 0)
		o->conns = 4;
	if (o->batch == 0)
		o->batch = 1000;
	if (o->lead_ms < 0)
		o->lead_ms = 3000 + count / 10;
	if (o->topic != NULL)
		snprintf(topic, sizeof(topic), "%s", o->topic);
	else
		snprintf(topic, sizeof(topic), "bench-notifier-%s", o->tag);
	if (server_start(&srv) < 0)
		return -1;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/cb", srv.port);
	o->callback_url = url;

	/* One task first: the notifier's group assignment takes seconds. */
	snprintf(prefix, sizeof(prefix), "%s-%s-warm-", o->tag, o->label);
	warm = ledger_create(prefix, 1);
	warm->due_ms[0] = now_us() / 1000;
	srv.ledgers[0] = warm;
	s = submitter_start(o, warm, topic, 1, NULL, 0);
	submitter_join(s, &st);
	xfree(st.req_ms);
	for (int i = 0;
	     i < 600 && atomic_load(&warm->received) == 0 && !bench_stop; i++)
		usleep(100000);
	if (atomic_load(&warm->received) == 0) {
		note("notifier: no callback within 60 s: is a prophet-notifier "
		     "consuming topic %s%s?",
		     o->topic_prefix, topic);
		server_stop(&srv);
		ledger_destroy(warm);
		return -1;
	}

	snprintf(prefix, sizeof(prefix), "%s-%s-", o->tag, o->label);
	l = ledger_create(prefix, (size_t)count);
	srv.ledgers[1] = l;
	t0_ms = now_us() / 1000 + o->lead_ms;
	for (long i = 0; i < count; i++)
		l->due_ms[i] =
			t0_ms + (int64_t)((double)i * (double)o->spread_ms /
					  (double)count);
	note("%s: %ld tasks with a callback to %s, due within %ld ms, %.1f s "
	     "from now, topic %s",
	     o->label, count, url, o->spread_ms, (double)o->lead_ms / 1e3,
	     topic);
	prog = progress_start(o, progress_cb, l);
	s = submitter_start(o, l, topic, o->batch, NULL, 0);
	submitter_join(s, &st);
	wait_called(o, l, t0_ms + o->spread_ms);
	progress_stop(prog);
	server_stop(&srv);

	lat = xcalloc((size_t)count, sizeof(double));
	for (long i = 0; i < count; i++) {
		if (l->accept_us[i] == 0)
			continue;
		if (l->recv_us[i] == 0) {
			lost++;
			continue;
		}
		lat[n++] = (double)l->recv_us[i] / 1e3 - (double)l->due_ms[i];
		if (l->recv_us[i] < min_us)
			min_us = l->recv_us[i];
		if (l->recv_us[i] > max_us)
			max_us = l->recv_us[i];
	}
	r = report_create(o->label);
	report_int(r, "count", "tasks", count);
	report_int(r, "spread_ms", "due within (ms)", o->spread_ms);
	report_int(r, "accepted", "accepted", atomic_load(&l->accepted));
	report_int(r, "called", "called back (distinct ids)",
		   atomic_load(&l->received));
	report_int(r, "lost", "never called back", lost);
	report_int(r, "dups", "duplicate callbacks", atomic_load(&l->dups));
	report_num(r, "callback_rate", "callbacks/s (first to last callback)",
		   max_us > min_us
			   ? (double)(n - 1) * 1e6 / (double)(max_us - min_us)
			   : NAN,
		   "%.0f");
	report_num(r, "drain_s", "first due -> last callback (s)",
		   max_us ? (double)max_us / 1e6 - (double)t0_ms / 1e3 : NAN,
		   "%.2f");
	if (n > 0)
		report_latency(r, "latency", "due -> callback", lat, n);
	report_print(r);
	report_destroy(r);
	xfree(lat);
	xfree(st.req_ms);
	ledger_destroy(l);
	ledger_destroy(warm);
	return lost > 0 ? -1 : 0;
}
