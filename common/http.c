#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "http.h"
#include "log.h"
#include "metrics.h"
#include "url.h"
#include "utf8.h"
#include "xmalloc.h"

const char *
http_reason(int code)
{
	switch (code) {
	case 200: return "OK";
	case 201: return "Created";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Unknown";
	}
}

/*
 * Connection limit. libevent 2.1's evhttp has none and hands no accepted
 * socket to the application, but it asks us for each connection's
 * bufferevent. We keep a reference to each: evhttp frees a connection's
 * bufferevent when the connection ends (and closes the socket itself), which
 * clears its callbacks; a sweep then drops our reference and the count. At
 * the limit the listener stops accepting: further clients wait in the
 * kernel's backlog (nothing is refused) until a connection ends; idle and
 * slow clients are cut by the request timeout, so a slowloris cannot hold
 * the slots for long.
 */
#define HTTP_MAX_SERVERS 4
#define SWEEP_IDLE_MS 1000
#define SWEEP_FULL_MS 20

struct http_server {
	struct evhttp *evh;
	struct evconnlistener *listener;
	struct event *sweep;
	struct bufferevent **conns;
	size_t nconns, cap;
	long max; /* 0: no limit */
	int paused;
	struct metric *m_open;
	struct metric *m_paused;
};

static struct http_server servers[HTTP_MAX_SERVERS];

static struct http_server *
server_of(struct evhttp *h)
{
	for (size_t i = 0; i < HTTP_MAX_SERVERS; i++)
		if (servers[i].evh == h)
			return &servers[i];
	return NULL;
}

/* Drops the connections evhttp has freed. */
static void
server_sweep(struct http_server *s)
{
	size_t i = 0;

	while (i < s->nconns) {
		bufferevent_data_cb w;
		bufferevent_event_cb e;

		bufferevent_getcb(s->conns[i], NULL, &w, &e, NULL);
		if (w == NULL && e == NULL) {
			bufferevent_decref(s->conns[i]);
			s->conns[i] = s->conns[--s->nconns];
		} else {
			i++;
		}
	}
}

/*
 * Pauses or resumes accepting at the limit, and keeps the sweep armed: every
 * SWEEP_IDLE_MS, every SWEEP_FULL_MS while paused. An armed sweep is not
 * pushed back (with connections opening more often than once a second it
 * would never run).
 */
static void
server_update(struct http_server *s)
{
	int full = s->max > 0 && (long)s->nconns >= s->max;
	int changed = 0;
	int ms;
	struct timeval tv;

	metric_set(s->m_open, (double)s->nconns);
	if (full && !s->paused) {
		evconnlistener_disable(s->listener);
		s->paused = 1;
		changed = 1;
		metric_inc(s->m_paused);
	} else if (!full && s->paused) {
		evconnlistener_enable(s->listener);
		s->paused = 0;
		changed = 1;
	}
	if (!changed && evtimer_pending(s->sweep, NULL))
		return;
	ms = s->paused ? SWEEP_FULL_MS : SWEEP_IDLE_MS;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(s->sweep, &tv);
}

static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_server *s = arg;

	(void)fd;
	(void)what;
	server_sweep(s);
	server_update(s);
}

static struct bufferevent *
conn_bev(struct event_base *base, void *arg)
{
	struct http_server *s = arg;
	struct bufferevent *bev;

	/* No BEV_OPT_CLOSE_ON_FREE: evhttp then closes the socket itself
	 * when the connection ends, not when we drop our reference. */
	bev = bufferevent_socket_new(base, -1, 0);
	if (bev == NULL)
		return NULL;
	bufferevent_incref(bev);
	if (s->max > 0 && (long)s->nconns + 1 >= s->max)
		server_sweep(s);
	if (s->nconns == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->conns = xrealloc(s->conns, s->cap * sizeof(*s->conns));
	}
	s->conns[s->nconns++] = bev;
	server_update(s);
	return bev;
}

struct evhttp *
http_server_create(struct event_base *base, const char *listen, size_t max_body,
		   int timeout_s, char *err, size_t errlen)
{
	struct evhttp *h;
	struct evhttp_bound_socket *bound;
	struct http_server *s = server_of(NULL);
	char host[256];
	int port;

	if (s == NULL) {
		snprintf(err, errlen, "too many HTTP servers in one process");
		return NULL;
	}
	if (hostport_parse(listen, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "'%s' is not host:port", listen);
		return NULL;
	}
	h = evhttp_new(base);
	bound = evhttp_bind_socket_with_handle(h, host, (ev_uint16_t)port);
	if (bound == NULL) {
		snprintf(err, errlen, "cannot listen on %s (in use?)", listen);
		evhttp_free(h);
		return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->evh = h;
	s->listener = evhttp_bound_socket_get_listener(bound);
	s->sweep = evtimer_new(base, sweep_cb, s);
	s->m_open = metrics_register(METRIC_GAUGE, "prophet_http_connections",
				     "open HTTP connections", NULL, 0);
	s->m_paused = metrics_register(
		METRIC_COUNTER, "prophet_http_accept_paused_total",
		"times the connection limit stopped accepting", NULL, 0);
	evhttp_set_bevcb(h, conn_bev, s);
	evhttp_set_max_body_size(h, (ev_ssize_t)max_body);
	evhttp_set_max_headers_size(h, 16384);
	evhttp_set_timeout(h, timeout_s);
	evhttp_set_allowed_methods(
		h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
			   EVHTTP_REQ_PATCH | EVHTTP_REQ_PUT | EVHTTP_REQ_HEAD);
	evhttp_set_default_content_type(h, "application/json");
	return h;
}

void
http_server_set_max_connections(struct evhttp *h, long max)
{
	struct http_server *s = server_of(h);

	if (s == NULL || h == NULL)
		return;
	s->max = max;
	server_update(s);
}

void
http_server_free(struct evhttp *h)
{
	struct http_server *s = server_of(h);

	if (h == NULL)
		return;
	evhttp_free(h); /* frees every connection's bufferevent */
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->nconns; i++)
		bufferevent_decref(s->conns[i]);
	free(s->conns);
	event_free(s->sweep);
	memset(s, 0, sizeof(*s));
}

void
http_mark_mykit(struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);

	evhttp_remove_header(in, HTTP_MYKIT_HEADER);
	evhttp_add_header(in, HTTP_MYKIT_HEADER, "1");
}

/* mykit-delay answers: {"success":true,"data":"<id>","code":200} and
 * {"success":false,"message":"...","code":500}, always HTTP 200. */
static json_t *
to_mykit(int code, json_t *body)
{
	const json_t *e = json_object_get(body, "error");
	json_t *out;

	if (code >= 200 && code < 300 && !json_is_object(e)) {
		const json_t *d = json_object_get(body, "id");

		if (d == NULL)
			d = json_object_get(body, "job");
		out = json_pack("{s:b, s:O, s:i}", "success", 1, "data",
				d ? d : json_null(), "code", 200);
	} else {
		const char *msg =
			json_string_value(json_object_get(e, "message"));

		out = json_pack("{s:b, s:s, s:i}", "success", 0, "message",
				msg ? msg : "failed", "code", 500);
	}
	json_decref(body);
	return out;
}

/* The answer when a reply could not be built: never a NULL dereference. */
#define HTTP_INTERNAL_ERROR                                                 \
	"{\"error\":{\"code\":\"internal\",\"message\":\"the answer could " \
	"not be built\"}}\n"

void
http_reply_json(struct evhttp_request *req, int code, json_t *body)
{
	struct evbuffer *b;
	char *s = NULL;

	if (body != NULL &&
	    evhttp_find_header(evhttp_request_get_input_headers(req),
			       HTTP_MYKIT_HEADER) != NULL) {
		body = to_mykit(code, body);
		code = 200;
	}
	if (body != NULL)
		s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(body);
	b = evbuffer_new();
	if (s != NULL) {
		evbuffer_add(b, s, strlen(s));
		evbuffer_add(b, "\n", 1);
		free(s);
	} else {
		log_error("an HTTP answer could not be built", "code=%d", code);
		code = 500;
		evbuffer_add(b, HTTP_INTERNAL_ERROR,
			     strlen(HTTP_INTERNAL_ERROR));
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "application/json");
	evhttp_send_reply(req, code, http_reason(code), b);
	evbuffer_free(b);
}

void
http_reply_error(struct evhttp_request *req, int code, const char *ecode,
		 const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	json_t *e = json_object(), *out = json_object();

	/* Messages quote paths, names and values from the request. */
	va_start(ap, fmt);
	utf8_vformat(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_object_set_new(e, "code", utf8_json_str(ecode));
	json_object_set_new(e, "message", utf8_json_str(msg));
	if (field != NULL && field[0] != '\0')
		json_object_set_new(e, "field", utf8_json_str(field));
	json_object_set_new(out, "error", e);
	http_reply_json(req, code, out);
}

char *
http_body(struct evhttp_request *req, size_t *lenp)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);
	char *s = xmalloc(len + 1);

	evbuffer_copyout(in, s, len);
	s[len] = '\0';
	*lenp = len;
	return s;
}

void
http_metrics_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *b = evbuffer_new();

	metrics_render(b);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "text/plain; version=0.0.4");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}
