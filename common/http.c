#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "auth.h"
#include "daemon.h"
#include "http.h"
#include "httpgate.h"
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
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 415: return "Unsupported Media Type";
	case 417: return "Expectation Failed";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

/*
 * The gate. libevent 2.1's evhttp hands the application no accepted socket,
 * but asks it for each connection's bufferevent; the gate watches that
 * bufferevent's input buffer (an evbuffer callback runs when bytes arrive,
 * before evhttp's read callback parses them). Whatever has not been
 * checked is moved out of evhttp's sight into the connection's hold
 * buffer: a request head goes back to evhttp only once it is complete and
 * checked (httpgate.c), its body only up to its Content-Length, and
 * nothing of the next request while one is in service (evhttp 2.1 serves a
 * connection's requests in order anyway). What the gate refuses it answers
 * itself, straight to the socket, then closes the connection after a short
 * linger that drops what the client still sends, so that the client reads
 * the answer rather than a reset. libevent 2.2 has evhttp_set_newreqcb and
 * evhttp_set_errorcb, which would cover part of this; Debian 12 has 2.1.
 *
 * evhttp frees a connection's bufferevent when the connection ends (and
 * closes the socket itself), which clears its callbacks. We keep a
 * reference to each, so a sweep can see which have ended and drop them:
 * every SWEEP_IDLE_MS, every SWEEP_FULL_MS at the connection limit.
 */
/* Seconds a client is told to wait after a 503 or a 429. */
#define HTTP_RETRY_AFTER_S "1"
#define HTTP_MAX_SERVERS 4
#define LINGER_MS 2000
#define SWEEP_IDLE_MS 1000
#define SWEEP_FULL_MS 20
/* A 403: the token is known, its roles do not include the call's. */
#define FORBIDDEN_FMT \
	"this token's roles do not allow this call: it needs the %s role"
#define EVICT_MIN_AGE_MS 100
/* File descriptors kept for everything but client connections (database
 * pool, Kafka clients and pull groups, ZooKeeper, Redis, files). */
#define HTTP_FD_RESERVE 512
/* Out of file descriptors: accepting pauses this long, and is logged at
 * most once per ACCEPT_LOG_MS. */
#define ACCEPT_PAUSE_MS 100
#define ACCEPT_LOG_MS 10000
#define TLS_COALESCE_MAX 16384 /* a TLS record's payload */
#define TLS_SID_CTX "prophet"

enum conn_state {
	CS_HEAD,    /* reading a head (head_len 0: idle, nothing yet) */
	CS_BODY,    /* passing a body on */
	CS_SERVICE, /* the request is evhttp's; the rest waits */
	CS_LAST,    /* the request is evhttp's, the connection closes after */
	CS_REFUSED, /* answered by the gate; dropping input until closed */
};

struct http_conn {
	struct http_server *s;
	struct bufferevent *bev;
	struct evbuffer *hold; /* received, not yet given to evhttp */
	uint64_t id;
	struct http_conn *prev, *next;
	struct http_conn *hnext; /* in its server's bufferevent map */
	enum conn_state state;
	size_t approved;  /* bytes at the front of the input evhttp may read */
	size_t head_seen; /* bytes of the current head held so far */
	size_t scan_from;
	int64_t body_left;
	size_t reserved;  /* of the server's body memory */
	int64_t since_ms; /* mono: idle since, or the request's first byte */
	enum http_shape shape; /* of the request in service */
	int in_gate;
	int closing;
	int last; /* the request in hand closes the connection */
	int closecb_set;
	int close_after_answer;	    /* a refusal: close once it is written */
	bufferevent_event_cb ev_cb; /* evhttp's, while the gate answers */
	void *ev_arg;
	struct event *timer;	/* the request's deadline, or the linger */
	struct event *close_ev; /* deferred close */
	struct event *kick;	/* deferred: on with what waited */
};

struct http_server {
	struct evhttp *evh;
	struct event_base *base;
	struct evconnlistener *listener;
	struct http_limits lim;
	SSL_CTX *tls; /* NULL: plain HTTP */
	char *tls_cert, *tls_key, *tls_client_ca;
	struct http_conn *conns;
	size_t nconns;
	struct http_conn **by_bev; /* bufferevent -> connection */
	size_t nbuckets;
	uint64_t next_id;
	int paused;
	int starved; /* accept() ran out of file descriptors */
	struct event *sweep;
	struct event *unstarve;
	struct log_every accept_log; /* "cannot accept connections" */
	size_t body_memory;
	const struct http_route *routes;
	size_t nroutes;
	http_authorize_fn *authorize;
	void *ctx;
	struct metric *m_open;
	struct metric *m_paused;
	struct metric *m_refused;
	struct metric *m_evicted;
	struct metric *m_timeouts;
	struct metric *m_requests;
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

/* A bucket of the bufferevent map: a multiplicative hash of the pointer
 * (every request looks its connection up, two or three times). */
static size_t
bev_bucket(const struct http_server *s, const struct bufferevent *bev)
{
	uint64_t h = (uint64_t)(uintptr_t)bev * 0x9e3779b97f4a7c15ULL;

	return (size_t)(h >> 32) & (s->nbuckets - 1);
}

static void
bev_map_put(struct http_server *s, struct http_conn *c)
{
	size_t b;

	if (s->nconns >= s->nbuckets) {
		size_t old = s->nbuckets;
		struct http_conn **ob = s->by_bev;

		s->nbuckets = old ? 2 * old : 64;
		s->by_bev = xcalloc(s->nbuckets, sizeof(*s->by_bev));
		for (size_t i = 0; i < old; i++) {
			struct http_conn *e = ob[i], *n;

			for (; e != NULL; e = n) {
				n = e->hnext;
				b = bev_bucket(s, e->bev);
				e->hnext = s->by_bev[b];
				s->by_bev[b] = e;
			}
		}
		xfree(ob);
	}
	b = bev_bucket(s, c->bev);
	c->hnext = s->by_bev[b];
	s->by_bev[b] = c;
}

static void
bev_map_del(struct http_server *s, struct http_conn *c)
{
	struct http_conn **p = &s->by_bev[bev_bucket(s, c->bev)];

	while (*p != NULL && *p != c)
		p = &(*p)->hnext;
	if (*p != NULL)
		*p = c->hnext;
}

/* The connection of a request still attached to one, or NULL. */
static struct http_conn *
conn_of_req(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev;

	if (evcon == NULL)
		return NULL;
	bev = evhttp_connection_get_bufferevent(evcon);
	for (size_t i = 0; i < HTTP_MAX_SERVERS; i++) {
		struct http_server *s = &servers[i];

		if (s->evh == NULL || s->nbuckets == 0)
			continue;
		for (struct http_conn *c = s->by_bev[bev_bucket(s, bev)];
		     c != NULL; c = c->hnext)
			if (c->bev == bev)
				return c;
	}
	return NULL;
}

static void
timer_in(struct event *ev, int64_t ms)
{
	struct timeval tv;

	if (ms < 0)
		ms = 0;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(ev, &tv);
}

/* evhttp has freed the connection (and cleared the callbacks). */
static int
conn_ended(struct http_conn *c)
{
	bufferevent_data_cb r, w;
	bufferevent_event_cb e;

	bufferevent_getcb(c->bev, &r, &w, &e, NULL);
	return r == NULL && w == NULL && e == NULL;
}

static void
body_release(struct http_conn *c)
{
	c->s->body_memory -= c->reserved;
	c->reserved = 0;
}

/*
 * Ends the connection as evhttp ends one whose client went away: through
 * evhttp's own event callback, from a fresh loop turn (never from inside
 * evhttp).
 */
static void
conn_close_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	bufferevent_event_cb ecb = NULL;
	void *earg = NULL;

	(void)fd;
	(void)what;
	if (conn_ended(c))
		return;
	bufferevent_getcb(c->bev, NULL, NULL, &ecb, &earg);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (ecb != NULL)
		ecb(c->bev, BEV_EVENT_EOF | BEV_EVENT_READING, earg);
}

static void
conn_close(struct http_conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	event_active(c->close_ev, EV_TIMEOUT, 0);
}

/* A JSON body in the shape of the route (if known). */
static char *
error_text(enum http_shape shape, int status, const char *code,
	   const char *message)
{
	json_t *o = json_object();
	char *s;

	if (shape == HTTP_SHAPE_MYKIT) {
		json_object_set_new(o, "success", json_false());
		json_object_set_new(o, "message", utf8_json_str(message));
		json_object_set_new(o, "code", json_integer(status));
	} else {
		json_t *e = json_object();

		json_object_set_new(e, "code", utf8_json_str(code));
		json_object_set_new(e, "message", utf8_json_str(message));
		json_object_set_new(o, "error", e);
	}
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

/* Drops what the client sent and has not been read. */
static void
conn_drop_input(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
	evbuffer_drain(in, evbuffer_get_length(in));
	c->approved = 0;
}

/* The gate's answer is written: half-close (plain HTTP), maybe close. */
static void
refused_written_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;

	if (c->s->tls == NULL)
		shutdown(bufferevent_getfd(bev), SHUT_WR);
	if (c->close_after_answer)
		conn_close(c);
}

/* While the gate answers, evhttp still learns of errors and EOF. */
static void
refused_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;

	c->ev_cb(bev, what, c->ev_arg);
}

/*
 * The gate's own answer (the gate refuses only outside a request in
 * service, so evhttp is not writing). It goes out through the
 * connection's bufferevent (and so through TLS) with the gate's callbacks
 * in place of evhttp's, which is not told of it: it would take the end of
 * the write for the end of one of its answers. The connection closes
 * after it, at once with close_after, else after a linger that drops what
 * the client still sends, so that the client reads the answer rather than
 * a reset.
 */
static void
conn_refuse(struct http_conn *c, enum http_shape shape, int status,
	    const char *code, const char *message, int close_after)
{
	char *body = error_text(shape, status, code, message);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	int in_gate = c->in_gate;

	metric_inc(status == 408 ? c->s->m_timeouts : c->s->m_refused);
	body_release(c);
	c->state = CS_REFUSED;
	c->in_gate = 1;
	conn_drop_input(c);
	c->in_gate = in_gate;
	c->close_after_answer = close_after;
	bufferevent_getcb(c->bev, NULL, NULL, &c->ev_cb, &c->ev_arg);
	if (c->ev_cb != NULL)
		bufferevent_setcb(c->bev, NULL, refused_written_cb,
				  refused_event_cb, c);
	evbuffer_add_printf(out,
			    "HTTP/1.1 %d %s\r\n"
			    "Content-Type: application/json\r\n"
			    "Content-Length: %zu\r\n"
			    "%s"
			    "Connection: close\r\n\r\n%s\n",
			    status, http_reason(status), strlen(body) + 1,
			    status == 401   ? "WWW-Authenticate: Bearer\r\n"
			    : status == 503 ? "Retry-After: " HTTP_RETRY_AFTER_S
					      "\r\n"
					    : "",
			    body);
	free(body);
	bufferevent_enable(c->bev, EV_WRITE);
	timer_in(c->timer, LINGER_MS);
}

static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;

	(void)fd;
	(void)what;
	if (conn_ended(c))
		return;
	if (c->state == CS_REFUSED) {
		conn_close(c);
	} else if (c->state == CS_BODY ||
		   (c->state == CS_HEAD && c->head_seen > 0)) {
		char msg[96];

		snprintf(msg, sizeof(msg),
			 "the request took longer than %d s to arrive",
			 c->s->lim.timeout_s);
		conn_refuse(c, c->shape, 408, "timeout", msg, 1);
	}
}

static void server_sweep(struct http_server *s);

/* The method bit of a method name (0: not one evhttp has a bit for). */
static unsigned
method_bit(const char *m)
{
	static const struct {
		const char *name;
		unsigned bit;
	} ms[] = {{"GET", EVHTTP_REQ_GET},
		  {"HEAD", EVHTTP_REQ_HEAD},
		  {"POST", EVHTTP_REQ_POST},
		  {"PUT", EVHTTP_REQ_PUT},
		  {"DELETE", EVHTTP_REQ_DELETE},
		  {"PATCH", EVHTTP_REQ_PATCH},
		  {"OPTIONS", EVHTTP_REQ_OPTIONS},
		  {"TRACE", EVHTTP_REQ_TRACE},
		  {NULL, 0}};

	for (int i = 0; ms[i].name != NULL; i++)
		if (!strcmp(m, ms[i].name))
			return ms[i].bit;
	return 0;
}

/* The route of a request head, for the checks that come before its body. */
static const struct http_route *
head_route(struct http_server *s, const struct httpgate_head *h)
{
	const struct http_route *r, *any = NULL;

	if (s->routes == NULL)
		return NULL;
	r = http_route_find(s->routes, s->nroutes, h->path_len ? h->path : "/",
			    h->path_len ? h->path_len : 1,
			    method_bit(h->method), &any);
	return r != NULL ? r : any;
}

/*
 * A complete head: checked before evhttp may read it. Returns 0, or -1
 * when the gate answered it.
 */
static int
conn_head(struct http_conn *c, const char *buf, size_t len)
{
	struct http_server *s = c->s;
	struct httpgate_head h;
	struct httpgate_error e;
	const struct http_route *r;
	struct evhttp_uri *uri;
	char *target;

	if (httpgate_parse(buf, len, &h, &e) < 0) {
		conn_refuse(c, HTTP_SHAPE_NATIVE, e.status, e.code, e.message,
			    0);
		return -1;
	}
	/* What evhttp would refuse with its own page is refused here. A
	 * plain path (not "//...", which evhttp reads as an authority) of
	 * the bytes httpgate_parse let through always parses. */
	if (h.target[0] != '/' || (h.target_len > 1 && h.target[1] == '/')) {
		target = xstrndup(h.target, h.target_len);
		uri = evhttp_uri_parse_with_flags(target,
						  EVHTTP_URI_NONCONFORMANT);
		xfree(target);
		if (uri == NULL) {
			conn_refuse(c, HTTP_SHAPE_NATIVE, 400, "bad_request",
				    "the request target is not a valid URI", 0);
			return -1;
		}
		evhttp_uri_free(uri);
	}
	r = head_route(s, &h);
	c->shape = r != NULL ? r->shape : HTTP_SHAPE_NATIVE;
	if (h.content_length > 0 &&
	    (uint64_t)h.content_length > (uint64_t)s->lim.max_body) {
		char msg[96];

		snprintf(msg, sizeof(msg), "the body is larger than %zu bytes",
			 s->lim.max_body);
		conn_refuse(c, c->shape, 413, "too_large", msg, 0);
		return -1;
	}
	/* A body is read only for a caller the route would take. */
	if (h.content_length > 0 && r != NULL && r->role != 0 &&
	    s->authorize != NULL) {
		char authz[512];
		int rc;

		utf8_copy(authz, sizeof(authz), h.authorization.s,
			  h.authorization.len);
		rc = s->authorize(s->ctx, h.authorization.s ? authz : NULL,
				  r->role);
		if (rc != 0) {
			char msg[128];

			snprintf(msg, sizeof(msg), FORBIDDEN_FMT,
				 auth_role_name(r->role));
			conn_refuse(c, c->shape, rc,
				    rc == 401 ? "unauthorized" : "forbidden",
				    rc == 401
					    ? "a valid bearer token is required"
					    : msg,
				    0);
			return -1;
		}
	}
	if (h.content_length > 0 && s->lim.max_body_memory > 0 &&
	    s->body_memory + (size_t)h.content_length > s->lim.max_body_memory)
		server_sweep(s); /* the ended connections give theirs back */
	if (h.content_length > 0 && s->lim.max_body_memory > 0 &&
	    s->body_memory + (size_t)h.content_length >
		    s->lim.max_body_memory) {
		conn_refuse(c, c->shape, 503, "busy",
			    "too many request bodies are arriving at once; "
			    "try again",
			    0);
		return -1;
	}
	if (h.content_length > 0) {
		c->reserved = (size_t)h.content_length;
		s->body_memory += c->reserved;
	}
	c->body_left = h.content_length > 0 ? h.content_length : 0;
	c->last = h.close;
	c->state = c->body_left > 0 ? CS_BODY : c->last ? CS_LAST : CS_SERVICE;
	return 0;
}

/* Moves n bytes from the hold to the input, for evhttp to read. */
static void
conn_approve(struct http_conn *c, size_t n)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	evbuffer_unfreeze(in, 0);
	evbuffer_remove_buffer(c->hold, in, n);
	evbuffer_freeze(in, 0);
	c->approved += n;
}

/* A body's bytes counted through; the request complete at the end. */
static size_t
body_take(struct http_conn *c, size_t have)
{
	size_t n = (int64_t)have > c->body_left ? (size_t)c->body_left : have;

	c->body_left -= (int64_t)n;
	if (c->body_left == 0) {
		c->state = c->last ? CS_LAST : CS_SERVICE;
		evtimer_del(c->timer);
	}
	return n;
}

/*
 * The common case, checked where it arrived: nothing is held and requests
 * come whole. Returns how many bytes at the front of the input evhttp may
 * now read (what follows goes to the hold), or -1 if the gate refused.
 */
static ssize_t
gate_in_place(struct http_conn *c, struct evbuffer *in, size_t len)
{
	size_t pos = c->approved;

	while (pos < len) {
		size_t n, from = 0, end;
		const char *p;

		if (c->state == CS_BODY) {
			pos += body_take(c, len - pos);
			continue;
		}
		if (c->state != CS_HEAD || c->head_seen > 0)
			break;
		n = len - pos < c->s->lim.max_headers ? len - pos
						      : c->s->lim.max_headers;
		p = (const char *)evbuffer_pullup(in, (ev_ssize_t)(pos + n)) +
		    pos;
		if (p[0] == '\r' || p[0] == '\n')
			break; /* stray line ends: the hold skips them */
		if ((end = httpgate_head_end(p, n, &from)) == 0)
			break; /* an incomplete head waits in the hold */
		c->since_ms = clock_mono_ms();
		if (conn_head(c, p, end) < 0)
			return -1;
		pos += end;
		if (c->state == CS_BODY)
			timer_in(c->timer, (int64_t)c->s->lim.timeout_s * 1000);
	}
	return (ssize_t)pos;
}

/* What arrived beyond what evhttp may read goes to the hold, then as much
 * of the hold as may be read goes back. */
static void
gate_run(struct http_conn *c)
{
	struct http_server *s = c->s;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t len = evbuffer_get_length(in);

	if (c->state == CS_REFUSED) {
		conn_drop_input(c);
		return;
	}
	if (len > c->approved) {
		size_t pos = c->approved;
		struct evbuffer *keep = NULL;

		if (evbuffer_get_length(c->hold) == 0) {
			ssize_t r = gate_in_place(c, in, len);

			if (r < 0)
				return;
			pos = (size_t)r;
		}
		c->approved = pos;
		if (len > pos) {
			/* in = [approved][new]: the new bytes join the hold. */
			if (pos > 0) {
				keep = evbuffer_new();
				evbuffer_remove_buffer(in, keep, pos);
			}
			evbuffer_add_buffer(c->hold, in);
			if (keep != NULL) {
				evbuffer_unfreeze(in, 0);
				evbuffer_add_buffer(in, keep);
				evbuffer_freeze(in, 0);
				evbuffer_free(keep);
			}
		}
	}
	while (evbuffer_get_length(c->hold) > 0) {
		size_t have = evbuffer_get_length(c->hold), n, end;
		const char *p;

		if (c->state == CS_SERVICE || c->state == CS_REFUSED)
			break;
		if (c->state == CS_LAST) {
			/* Nothing after a request that closes the connection
			 * is read (evhttp ignores it too). */
			evbuffer_drain(c->hold, evbuffer_get_length(c->hold));
			break;
		}
		if (c->state == CS_BODY) {
			conn_approve(c, body_take(c, have));
			continue;
		}
		/* CS_HEAD */
		if (c->head_seen == 0) {
			unsigned char ch;

			/* Stray line ends between requests are skipped. */
			evbuffer_copyout(c->hold, &ch, 1);
			if (ch == '\r' || ch == '\n') {
				evbuffer_drain(c->hold, 1);
				continue;
			}
			c->since_ms = clock_mono_ms();
			timer_in(c->timer, (int64_t)s->lim.timeout_s * 1000);
		}
		n = have < s->lim.max_headers ? have : s->lim.max_headers;
		p = (const char *)evbuffer_pullup(c->hold, (ev_ssize_t)n);
		end = httpgate_head_end(p, n, &c->scan_from);
		c->head_seen = n;
		if (end == 0) {
			if (n >= s->lim.max_headers)
				conn_refuse(c, HTTP_SHAPE_NATIVE, 431,
					    "headers_too_large",
					    "the request line and headers are "
					    "too large",
					    0);
			break;
		}
		if (conn_head(c, p, end) < 0)
			break;
		conn_approve(c, end);
		c->head_seen = 0;
		c->scan_from = 0;
		if (c->state == CS_SERVICE || c->state == CS_LAST)
			evtimer_del(c->timer);
	}
}

static void
input_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct http_conn *c = arg;

	(void)buf;
	if (c->in_gate)
		return;
	/* evhttp read approved bytes */
	c->approved -=
		info->n_deleted < c->approved ? info->n_deleted : c->approved;
	if (info->n_added == 0)
		return;
	c->in_gate = 1;
	gate_run(c);
	c->in_gate = 0;
}

static void
conn_free(struct http_conn *c)
{
	struct http_server *s = c->s;

	body_release(c);
	bev_map_del(s, c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	s->nconns--;
	evbuffer_remove_cb(bufferevent_get_input(c->bev), input_cb, c);
	if (s->tls != NULL) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->bev);

		bufferevent_decref(c->bev);
		SSL_free(ssl);
	} else {
		bufferevent_decref(c->bev);
	}
	evbuffer_free(c->hold);
	event_free(c->timer);
	event_free(c->close_ev);
	event_free(c->kick);
	xfree(c);
}

/* The oldest connection that is idle or slow to send its request. */
static struct http_conn *
server_victim(struct http_server *s)
{
	struct http_conn *best = NULL;
	int64_t now = clock_mono_ms();

	for (struct http_conn *c = s->conns; c != NULL; c = c->next) {
		if (c->closing || c->state == CS_SERVICE ||
		    c->state == CS_LAST || now - c->since_ms < EVICT_MIN_AGE_MS)
			continue;
		if (best == NULL || c->since_ms < best->since_ms)
			best = c;
	}
	return best;
}

/* Makes room: closes the oldest idle connection, or answers the slowest
 * request 408 (why: what ran out). */
static void
server_evict(struct http_server *s, const char *why)
{
	struct http_conn *v = server_victim(s);
	char msg[128];

	if (v == NULL)
		return;
	metric_inc(s->m_evicted);
	if (v->state == CS_HEAD && v->head_seen == 0) {
		conn_close(v); /* idle keep-alive: nothing to say */
	} else if (v->state != CS_REFUSED) {
		snprintf(msg, sizeof(msg),
			 "the server is %s and this request was the slowest",
			 why);
		conn_refuse(v, v->shape, 408, "timeout", msg, 1);
	} else {
		conn_close(v);
	}
}

/* Drops the connections evhttp has freed; at the limit, makes room. */
static void
server_sweep(struct http_server *s)
{
	struct http_conn *c = s->conns, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		if (conn_ended(c))
			conn_free(c);
	}
	if (s->lim.max_connections > 0 &&
	    (long)s->nconns >= s->lim.max_connections)
		server_evict(s, "at its connection limit");
}

/*
 * Pauses accepting at the limit, resumes below it, and keeps the sweep
 * armed (an armed sweep is not pushed back: with connections opening more
 * often than once a second it would never run).
 */
static void
server_update(struct http_server *s)
{
	int full = s->lim.max_connections > 0 &&
		   (long)s->nconns >= s->lim.max_connections;
	int changed = 0;

	metric_set(s->m_open, (double)s->nconns);
	if ((full || s->starved) && !s->paused) {
		evconnlistener_disable(s->listener);
		s->paused = 1;
		changed = 1;
		metric_inc(s->m_paused);
	} else if (!full && !s->starved && s->paused) {
		evconnlistener_enable(s->listener);
		s->paused = 0;
		changed = 1;
	}
	if (!changed && evtimer_pending(s->sweep, NULL))
		return;
	timer_in(s->sweep, s->paused ? SWEEP_FULL_MS : SWEEP_IDLE_MS);
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

static void
unstarve_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_server *s = arg;

	(void)fd;
	(void)what;
	s->starved = 0;
	server_update(s);
}

/*
 * accept() failed. Out of file descriptors (EMFILE, ENFILE), the pending
 * connection stays in the backlog and the listener would be woken at
 * once, again and again: libevent's default logs a line each time, which
 * spun a core and wrote hundreds of MB of log a minute. Accepting pauses
 * instead, the oldest idle or slow connection makes room as at the
 * connection limit, and a line is logged now and then.
 */
static void
accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct http_server *s = NULL;
	int err = EVUTIL_SOCKET_ERROR();
	long skipped;

	(void)arg;
	for (size_t i = 0; i < HTTP_MAX_SERVERS && s == NULL; i++)
		if (servers[i].evh != NULL && servers[i].listener == lev)
			s = &servers[i];
	if (s == NULL)
		return;
	if (log_every(&s->accept_log, clock_mono_ms(), ACCEPT_LOG_MS, &skipped))
		log_warn("cannot accept connections",
			 "error=\"%s\" times=%ld "
			 "open=%zu hint=\"raise the open-file limit "
			 "(LimitNOFILE) or lower http.max_connections\"",
			 evutil_socket_error_to_string(err), skipped + 1,
			 s->nconns);
	s->starved = 1;
	server_evict(s, "out of connections");
	server_update(s);
	timer_in(s->unstarve, ACCEPT_PAUSE_MS);
}

/*
 * Connections need file descriptors: with fewer than max_connections plus
 * the daemon's own, the connection limit (which makes room for honest
 * clients) would never be reached before accept() fails. The soft limit is
 * raised toward the hard one; if that is not enough, the connection limit
 * is lowered to fit, with a warning.
 */
static void
fit_fd_limit(struct http_server *s, const char *listen)
{
	struct rlimit rl;
	rlim_t want;
	long fit;

	if (s->lim.max_connections <= 0 || getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	want = (rlim_t)s->lim.max_connections + HTTP_FD_RESERVE;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;

		up.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
				      ? want
				      : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return;
	fit = (long)rl.rlim_cur > 2 * HTTP_FD_RESERVE
		      ? (long)rl.rlim_cur - HTTP_FD_RESERVE
		      : (long)rl.rlim_cur / 2;
	if (fit < 1)
		fit = 1;
	log_warn("connection limit lowered to fit the open-file limit",
		 "listen=%s max_connections=%ld configured=%ld nofile=%llu "
		 "hint=\"raise LimitNOFILE to %llu\"",
		 listen, fit, s->lim.max_connections,
		 (unsigned long long)rl.rlim_cur, (unsigned long long)want);
	s->lim.max_connections = fit;
}

long
http_server_max_connections(struct evhttp *h)
{
	struct http_server *s = server_of(h);

	return s != NULL ? s->lim.max_connections : 0;
}

static void conn_kick_cb(evutil_socket_t fd, short what, void *arg);

/*
 * TLS 1.2 and 1.3 only; for 1.2, forward-secret AEAD suites only (Mozilla's
 * "intermediate" list); 1.3's suites are all fine. No renegotiation, no
 * compression, the server's order of preference.
 */
#define TLS12_CIPHERS                                                \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:" \
	"DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384"

static void
tls_error(char *err, size_t errlen, const char *what, const char *path)
{
	char ssl[256] = "";
	unsigned long e = ERR_get_error();

	if (e != 0)
		ERR_error_string_n(e, ssl, sizeof(ssl));
	ERR_clear_error();
	snprintf(err, errlen, "%s %s: %s", what, path, ssl[0] ? ssl : "failed");
}

static SSL_CTX *
tls_context(const SSL_METHOD *method, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(method);

	if (ctx == NULL) {
		tls_error(err, errlen, "TLS", "context");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION |
					 SSL_OP_NO_RENEGOTIATION |
					 SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS);
	return ctx;
}

/* A certificate outside its validity would be served all the same, and
 * every client refuse it: refused where it is loaded (at start, and on
 * SIGHUP, which keeps the running one), not found by the clients. */
static int
tls_cert_current(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
	X509 *x = SSL_CTX_get0_certificate(ctx);
	const ASN1_TIME *t;
	const char *what;
	char when[32] = "?";
	struct tm tm;

	if (x == NULL)
		return 0;
	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) {
		t = X509_get0_notAfter(x);
		what = "expired on";
	} else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) {
		t = X509_get0_notBefore(x);
		what = "is not valid before";
	} else {
		return 0;
	}
	if (ASN1_TIME_to_tm(t, &tm) == 1)
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	snprintf(err, errlen, "the certificate %s %s %s", path, what, when);
	return -1;
}

/* The server context of cert, key and client CA; NULL with err filled. */
static SSL_CTX *
tls_server_context(const char *cert, const char *key, const char *ca, char *err,
		   size_t errlen)
{
	SSL_CTX *ctx = tls_context(TLS_server_method(), err, errlen);

	if (ctx == NULL)
		return NULL;
	/* Without a session id context a server that verifies client
	 * certificates fails every handshake that offers to resume. */
	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)TLS_SID_CTX,
				       sizeof(TLS_SID_CTX) - 1);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		tls_error(err, errlen, "cannot load the certificate", cert);
		goto fail;
	}
	/* As the secret files: a key others may read is no secret (a group
	 * may: Debian's ssl-cert convention is 0640). */
	{
		struct stat st;

		if (key != NULL && stat(key, &st) == 0 && (st.st_mode & 007)) {
			snprintf(err, errlen,
				 "%s: mode %04o lets others read or write the "
				 "private key: chmod 600 it (640 to share it "
				 "with a group)",
				 key, (unsigned)(st.st_mode & 07777));
			goto fail;
		}
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		tls_error(err, errlen, "cannot load the private key", key);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		tls_error(err, errlen, "the private key does not match", cert);
		goto fail;
	}
	if (tls_cert_current(ctx, cert, err, errlen) < 0)
		goto fail;
	if (ca != NULL && ca[0] != '\0') {
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);

		if (names == NULL ||
		    SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
			if (names != NULL)
				sk_X509_NAME_pop_free(names, X509_NAME_free);
			tls_error(err, errlen, "cannot load the client CA", ca);
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify(
			ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			NULL);
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

SSL_CTX *
http_tls_client_context(const char *ca_file, const char *cert_file,
			const char *key_file, char *err, size_t errlen)
{
	SSL_CTX *ctx = tls_context(TLS_client_method(), err, errlen);

	if (ctx == NULL)
		return NULL;
	if (ca_file != NULL && ca_file[0] != '\0'
		    ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1
		    : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		tls_error(err, errlen, "cannot load the CA",
			  ca_file && ca_file[0] ? ca_file : "(system)");
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (cert_file == NULL || cert_file[0] == '\0')
		return ctx;
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		tls_error(err, errlen, "cannot load the client certificate",
			  cert_file);
	} else if (SSL_CTX_use_PrivateKey_file(ctx, key_file ? key_file : "",
					       SSL_FILETYPE_PEM) != 1) {
		tls_error(err, errlen, "cannot load the client key",
			  key_file ? key_file : "");
	} else if (SSL_CTX_check_private_key(ctx) != 1) {
		tls_error(err, errlen, "the client key does not match",
			  cert_file);
	} else {
		return ctx;
	}
	SSL_CTX_free(ctx);
	return NULL;
}

void
http_reply_unknown(struct evhttp_request *req, const char *what,
		   const char *name, const char *const *known)
{
	char list[256] = "";

	for (int i = 0; known[i] != NULL; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list),
			 "%s%s", i ? ", " : "", known[i]);
	http_reply_error(req, 400, "unknown_field", name,
			 "unknown %s '%s' (%s)", what, name,
			 known[0] != NULL ? list : "this call takes none");
}

int
http_tls_check(const char *cert, const char *key, const char *client_ca,
	       char *err, size_t errlen)
{
	SSL_CTX *ctx = tls_server_context(cert, key, client_ca, err, errlen);

	if (ctx == NULL)
		return -1;
	SSL_CTX_free(ctx);
	return 0;
}

void
http_server_reload_tls(struct evhttp *h)
{
	struct http_server *s = server_of(h);
	SSL_CTX *ctx;
	char err[512];

	if (s == NULL || s->tls == NULL)
		return;
	ctx = tls_server_context(s->tls_cert, s->tls_key, s->tls_client_ca, err,
				 sizeof(err));
	if (ctx == NULL) {
		log_error("TLS reload failed; keeping the running certificate",
			  "error=\"%s\"", err);
		return;
	}
	/* Open connections hold references to the old one. */
	SSL_CTX_free(s->tls);
	s->tls = ctx;
	log_info("TLS certificate reloaded", "cert=%s", s->tls_cert);
}

/*
 * An answer is written as one TLS record, not one a buffer chunk (its head
 * and its body would be two records and two packets).
 */
static void
tls_coalesce_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
		void *arg)
{
	(void)arg;
	if (info->n_added > 0 && evbuffer_get_length(buf) <= TLS_COALESCE_MAX)
		evbuffer_pullup(buf, -1);
}

static struct bufferevent *
conn_bev(struct event_base *base, void *arg)
{
	struct http_server *s = arg;
	struct http_conn *c;
	struct bufferevent *bev;

	/* No BEV_OPT_CLOSE_ON_FREE: evhttp then closes the socket itself
	 * when the connection ends, not when we drop our reference (which
	 * frees the SSL too). */
	if (s->tls != NULL) {
		SSL *ssl = SSL_new(s->tls);

		if (ssl == NULL)
			return NULL;
		bev = bufferevent_openssl_socket_new(
			base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, 0);
		if (bev == NULL) {
			SSL_free(ssl);
			return NULL;
		}
		/* A client closing without close_notify is EOF for HTTP. */
		bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
		evbuffer_add_cb(bufferevent_get_output(bev), tls_coalesce_cb,
				NULL);
	} else {
		bev = bufferevent_socket_new(base, -1, 0);
	}
	if (bev == NULL)
		return NULL;
	bufferevent_incref(bev);
	if (s->lim.max_connections > 0 &&
	    (long)s->nconns + 1 >= s->lim.max_connections)
		server_sweep(s);
	c = xcalloc(1, sizeof(*c));
	c->s = s;
	c->bev = bev;
	c->hold = evbuffer_new();
	c->id = ++s->next_id;
	c->since_ms = clock_mono_ms();
	c->timer = evtimer_new(base, conn_timer_cb, c);
	c->close_ev = event_new(base, -1, 0, conn_close_cb, c);
	c->kick = event_new(base, -1, 0, conn_kick_cb, c);
	bev_map_put(s, c);
	c->next = s->conns;
	if (s->conns != NULL)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	evbuffer_add_cb(bufferevent_get_input(bev), input_cb, c);
	server_update(s);
	return bev;
}

/*
 * evhttp is about to free the connection: its bufferevent stops reading
 * now. Our reference keeps the bufferevent (until the sweep drops it), and
 * an enabled read event of a closed socket would stay registered for its
 * descriptor number, which the next connection gets.
 */
static void
conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct http_conn *c = arg;

	(void)evcon;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
}

/*
 * The next request, held while the last one was served, goes on: from a
 * fresh loop turn, once evhttp has finished with the last one (it resets
 * the connection's callbacks and starts reading after on_complete).
 */
static void
conn_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	bufferevent_data_cb rcb = NULL;

	(void)fd;
	(void)what;
	if (conn_ended(c) || c->closing || c->state != CS_HEAD)
		return;
	c->in_gate = 1;
	gate_run(c);
	c->in_gate = 0;
	bufferevent_getcb(c->bev, &rcb, NULL, NULL, NULL);
	if (c->state != CS_REFUSED && rcb != NULL &&
	    (bufferevent_get_enabled(c->bev) & EV_READ) &&
	    evbuffer_get_length(bufferevent_get_input(c->bev)) > 0)
		bufferevent_trigger(c->bev, EV_READ, 0);
}

/* The answer was written: the next request may come. */
static void
request_done_cb(struct evhttp_request *req, void *arg)
{
	struct http_conn *c = conn_of_req(req);

	if (c == NULL || c->id != (uint64_t)(uintptr_t)arg)
		return;
	body_release(c);
	if (c->state == CS_LAST)
		return; /* evhttp closes the connection now */
	c->state = CS_HEAD;
	c->since_ms = clock_mono_ms();
	if (evbuffer_get_length(c->hold) > 0)
		event_active(c->kick, EV_TIMEOUT, 0);
}

/* Whether pattern (with {} segments) matches path[0..len). */
static int
route_match(const char *p, const char *path, size_t len)
{
	size_t j = 0;

	while (*p) {
		if (p[0] == '{' && p[1] == '}') {
			size_t k = j;

			while (k < len && path[k] != '/')
				k++;
			if (k == j)
				return 0;
			j = k;
			p += 2;
		} else {
			if (j >= len || path[j] != *p)
				return 0;
			j++;
			p++;
		}
	}
	return j == len;
}

/* Literal paths come first: /v1/tasks/batch is not a task id. */
const struct http_route *
http_route_find(const struct http_route *routes, size_t n, const char *path,
		size_t len, unsigned method, const struct http_route **path_row)
{
	const struct http_route *any = NULL;

	if (method == EVHTTP_REQ_HEAD)
		method = EVHTTP_REQ_GET;
	for (int literal = 1; literal >= 0 && any == NULL; literal--) {
		for (size_t i = 0; i < n; i++) {
			if ((strstr(routes[i].path, "{}") == NULL) != literal ||
			    !route_match(routes[i].path, path, len))
				continue;
			if (routes[i].methods & method) {
				if (path_row != NULL)
					*path_row = NULL;
				return &routes[i];
			}
			if (any == NULL)
				any = &routes[i];
		}
	}
	if (path_row != NULL)
		*path_row = any;
	return NULL;
}

/* The {} segment of a matched path, decoded. */
static char *
route_arg(const char *pattern, const char *path, size_t *lenp)
{
	const char *hole = strstr(pattern, "{}"), *end;
	size_t at;
	char *seg, *out;

	*lenp = 0;
	if (hole == NULL)
		return NULL;
	at = (size_t)(hole - pattern);
	end = strchr(path + at, '/');
	seg = end ? xstrndup(path + at, (size_t)(end - path - at))
		  : xstrdup(path + at);
	out = evhttp_uridecode(seg, 0, lenp);
	xfree(seg);
	return out;
}

/* The request headers dispatch looks at, each the first of its name
 * (as evhttp_find_header finds it), gathered in one pass over them. */
struct req_heads {
	const char *authorization, *site, *origin, *host, *content_type;
};

static void
req_heads(struct evhttp_request *req, struct req_heads *h)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	const char **slot;

	memset(h, 0, sizeof(*h));
	TAILQ_FOREACH (kv, in, next) {
		switch (kv->key[0] | 0x20) {
		case 'a':
			slot = !strcasecmp(kv->key, "Authorization")
				       ? &h->authorization
				       : NULL;
			break;
		case 's':
			slot = !strcasecmp(kv->key, "Sec-Fetch-Site") ? &h->site
								      : NULL;
			break;
		case 'o':
			slot = !strcasecmp(kv->key, "Origin") ? &h->origin
							      : NULL;
			break;
		case 'h':
			slot = !strcasecmp(kv->key, "Host") ? &h->host : NULL;
			break;
		case 'c':
			slot = !strcasecmp(kv->key, "Content-Type")
				       ? &h->content_type
				       : NULL;
			break;
		default: slot = NULL;
		}
		if (slot != NULL && *slot == NULL)
			*slot = kv->value;
	}
}

/*
 * A Host header a browser would send for a page of another site whose
 * name resolves to this loopback server (DNS rebinding): a DNS name with
 * a dot that is not localhost's. Address literals name no site that could
 * rebind, and single-label names would need the victim's own DNS.
 */
static int
host_rebound(const char *v)
{
	char name[256];
	const char *b = v, *e;
	struct in6_addr a6;

	if (v[0] == '[') {
		b = v + 1;
		e = strchr(b, ']');
		if (e == NULL)
			return 1;
	} else {
		e = b + strcspn(b, ":");
	}
	if ((size_t)(e - b) >= sizeof(name))
		return 1;
	memcpy(name, b, (size_t)(e - b));
	name[e - b] = '\0';
	if (v[0] == '[')
		return inet_pton(AF_INET6, name, &a6) != 1;
	if (url_host_is_loopback(name) || strchr(name, '.') == NULL)
		return 0;
	return strspn(name, "0123456789.") != strlen(name);
}

/* A state-changing call from a browser page of another origin. */
static int
cross_site(const struct req_heads *h)
{
	const char *site = h->site, *origin = h->origin, *host = h->host;
	const char *rest;

	if (site != NULL && strcasecmp(site, "same-origin") != 0 &&
	    strcasecmp(site, "none") != 0)
		return 1;
	if (origin == NULL)
		return 0;
	if (host == NULL)
		return 1;
	if (!strncasecmp(origin, "http://", 7))
		rest = origin + 7;
	else if (!strncasecmp(origin, "https://", 8))
		rest = origin + 8;
	else
		return 1; /* "null" and the like */
	return strcasecmp(rest, host) != 0;
}

/* Content-Type application/json (parameters allowed). */
static int
json_content_type(const char *ct)
{
	while (*ct == ' ')
		ct++;
	return strncasecmp(ct, "application/json", 16) == 0 &&
	       (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ');
}

static void
dispatch_cb(struct evhttp_request *req, void *arg)
{
	struct http_server *s = arg;
	struct http_conn *c = conn_of_req(req);
	const char *path =
		evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	unsigned m = (unsigned)evhttp_request_get_command(req);
	const struct http_route *r, *any;
	struct req_heads h;
	size_t body = evbuffer_get_length(evhttp_request_get_input_buffer(req));
	char *a;
	size_t alen;

	metric_inc(s->m_requests);
	if (c != NULL) {
		evhttp_request_set_on_complete_cb(req, request_done_cb,
						  (void *)(uintptr_t)c->id);
		if (!c->closecb_set) {
			evhttp_connection_set_closecb(
				evhttp_request_get_connection(req),
				conn_closed_cb, c);
			c->closecb_set = 1;
		}
	}
	if (path == NULL || path[0] == '\0')
		path = "/";
	r = http_route_find(s->routes, s->nroutes, path, strlen(path), m, &any);
	if (c != NULL)
		c->shape = r ? r->shape : any ? any->shape : HTTP_SHAPE_NATIVE;
	req_heads(req, &h);
	if (s->lim.loopback_hosts_only && h.host != NULL &&
	    host_rebound(h.host)) {
		http_reply_error(req, 403, "host_not_allowed", NULL,
				 "this server listens on loopback: the Host "
				 "header must be localhost or an address");
		return;
	}
	if (r == NULL && any == NULL) {
		http_reply_error(req, 404, "not_found", NULL, "no route %s",
				 path);
		return;
	}
	if (r == NULL) {
		http_reply_error(req, 405, "method_not_allowed", NULL,
				 "this method is not served at %s", path);
		return;
	}
	if (r->role != 0 && s->authorize != NULL) {
		int rc = s->authorize(s->ctx, h.authorization, r->role);

		if (rc == 401) {
			evhttp_add_header(
				evhttp_request_get_output_headers(req),
				"WWW-Authenticate", "Bearer");
			http_reply_error(req, 401, "unauthorized", NULL,
					 "a valid bearer token is required");
			return;
		}
		if (rc != 0) {
			http_reply_error(req, 403, "forbidden", NULL,
					 FORBIDDEN_FMT,
					 auth_role_name(r->role));
			return;
		}
	}
	if ((r->flags & HTTP_ROUTE_STATE) && cross_site(&h)) {
		http_reply_error(req, 403, "cross_site", NULL,
				 "state-changing calls from another site's "
				 "page are refused");
		return;
	}
	if ((r->flags & HTTP_ROUTE_JSON) && body > 0) {
		const char *ct = h.content_type;

		/* mykit-delay's clients may leave the type out. */
		if (ct == NULL ? r->shape != HTTP_SHAPE_MYKIT
			       : !json_content_type(ct)) {
			http_reply_error(req, 415, "unsupported_media_type",
					 NULL,
					 "send the body as application/json");
			return;
		}
	}
	a = route_arg(r->path, path, &alen);
	r->fn(s->ctx, req, a, alen);
	free(a);
}

void
http_server_set_routes(struct evhttp *h, const struct http_route *routes,
		       size_t n, http_authorize_fn *authorize, void *ctx)
{
	struct http_server *s = server_of(h);

	s->routes = routes;
	s->nroutes = n;
	s->authorize = authorize;
	s->ctx = ctx;
	evhttp_set_gencb(h, dispatch_cb, s);
}

struct evhttp *
http_server_create(struct event_base *base, const char *listen,
		   const struct http_limits *lim, char *err, size_t errlen)
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
	if (lim->tls_cert != NULL && lim->tls_cert[0] != '\0') {
		s->tls = tls_server_context(lim->tls_cert, lim->tls_key,
					    lim->tls_client_ca, err, errlen);
		if (s->tls == NULL) {
			evhttp_free(h);
			return NULL;
		}
		s->tls_cert = xstrdup(lim->tls_cert);
		s->tls_key = xstrdup(lim->tls_key);
		s->tls_client_ca =
			xstrdup(lim->tls_client_ca ? lim->tls_client_ca : "");
	}
	s->evh = h;
	s->base = base;
	s->lim = *lim;
	s->lim.tls_cert = s->lim.tls_key = s->lim.tls_client_ca = NULL;
	s->lim.loopback_hosts_only =
		lim->loopback_hosts_only && url_host_is_loopback(host);
	if (s->lim.max_headers == 0)
		s->lim.max_headers = 16384;
	s->listener = evhttp_bound_socket_get_listener(bound);
	evconnlistener_set_error_cb(s->listener, accept_error_cb);
	fit_fd_limit(s, listen);
	/* Accepted sockets inherit it: an answer's TLS records (one per
	 * buffer chunk) must not wait for the client's delayed ACK. */
	{
		int one = 1;

		setsockopt(evhttp_bound_socket_get_fd(bound), IPPROTO_TCP,
			   TCP_NODELAY, &one, sizeof(one));
	}
	s->sweep = evtimer_new(base, sweep_cb, s);
	s->unstarve = evtimer_new(base, unstarve_cb, s);
	s->m_open = metrics_register(METRIC_GAUGE, "prophet_http_connections",
				     "open HTTP connections", NULL, 0);
	s->m_paused = metrics_register(
		METRIC_COUNTER, "prophet_http_accept_paused_total",
		"times the connection limit stopped accepting", NULL, 0);
	s->m_refused = metrics_register(
		METRIC_COUNTER, "prophet_http_refused_total",
		"requests refused before their body was read (bad request "
		"line or headers, too large, no token, too many bodies)",
		NULL, 0);
	s->m_evicted = metrics_register(
		METRIC_COUNTER, "prophet_http_evicted_total",
		"connections closed at the connection limit to make room "
		"(idle, or the slowest to send their request)",
		NULL, 0);
	s->m_requests =
		metrics_register(METRIC_COUNTER, "prophet_http_requests_total",
				 "HTTP requests served", NULL, 0);
	s->m_timeouts = metrics_register(
		METRIC_COUNTER, "prophet_http_request_timeouts_total",
		"requests cut because they took longer than http.timeout_s "
		"to arrive",
		NULL, 0);
	evhttp_set_bevcb(h, conn_bev, s);
	/* The gate enforces the limits first; these are evhttp's own
	 * backstops, above ours. */
	evhttp_set_max_body_size(h, (ev_ssize_t)s->lim.max_body + 1);
	evhttp_set_max_headers_size(h, (ev_ssize_t)s->lim.max_headers * 2);
	evhttp_set_timeout(h, lim->timeout_s);
	evhttp_set_allowed_methods(
		h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
			   EVHTTP_REQ_PATCH | EVHTTP_REQ_PUT | EVHTTP_REQ_HEAD |
			   EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
			   EVHTTP_REQ_CONNECT);
	evhttp_set_default_content_type(h, "application/json");
	server_update(s);
	return h;
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
	while (s->conns != NULL)
		conn_free(s->conns);
	event_free(s->sweep);
	event_free(s->unstarve);
	SSL_CTX_free(s->tls);
	xfree(s->tls_cert);
	xfree(s->tls_key);
	xfree(s->tls_client_ca);
	xfree(s->by_bev);
	memset(s, 0, sizeof(*s));
}

/*
 * mykit-delay answers: {"success":true,"data":"<id>","code":200} and
 * {"success":false,"message":"...","code":500}, always HTTP 200 for what
 * the service decided; what the HTTP layer refuses (token, media type,
 * sizes, time) keeps its status, with that status as the code.
 */
static json_t *
to_mykit(int *code, json_t *body)
{
	const json_t *e = json_object_get(body, "error");
	json_t *out = json_object();

	if (*code >= 200 && *code < 300 && !json_is_object(e)) {
		const json_t *d = json_object_get(body, "id");

		if (d == NULL)
			d = json_object_get(body, "job");
		json_object_set_new(out, "success", json_true());
		json_object_set_new(out, "data",
				    d ? json_deep_copy(d) : json_null());
		json_object_set_new(out, "code", json_integer(200));
		*code = 200;
	} else {
		const char *msg =
			json_string_value(json_object_get(e, "message"));
		int keep = *code == 401 || *code == 403 || *code == 405 ||
			   *code == 408 || *code == 413 || *code == 415 ||
			   *code == 429 || *code == 431;

		json_object_set_new(out, "success", json_false());
		json_object_set_new(out, "message",
				    utf8_json_str(msg ? msg : "failed"));
		json_object_set_new(out, "code",
				    json_integer(keep ? *code : 500));
		if (!keep)
			*code = 200;
	}
	json_decref(body);
	return out;
}

/*
 * The Date header's value, formatted once a second (evhttp would format
 * it for every answer: a twentieth of a single submission's
 * instructions). Per thread: every loop answers on its own.
 */
static const char *
http_date(void)
{
	static __thread time_t at = -1;
	static __thread char date[64];
	time_t now = time(NULL);
	struct tm tm;

	if (now != at && gmtime_r(&now, &tm) != NULL &&
	    evutil_date_rfc1123(date, sizeof(date), &tm) > 0)
		at = now;
	return date;
}

void
http_send(struct evhttp_request *req, int code, struct evbuffer *body)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const char *date = http_date();

	if (*date != '\0' && evhttp_find_header(out, "Date") == NULL)
		evhttp_add_header(out, "Date", date);
	/* evhttp 2.1 would send a HEAD answer's body, without its length. */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
		char len[32];

		snprintf(len, sizeof(len), "%zu",
			 body ? evbuffer_get_length(body) : 0);
		evhttp_add_header(out, "Content-Length", len);
		body = NULL;
	}
	evhttp_send_reply(req, code, http_reason(code), body);
}

/* The answer when a reply could not be built: never a NULL dereference. */
#define HTTP_INTERNAL_ERROR                                                 \
	"{\"error\":{\"code\":\"internal\",\"message\":\"the answer could " \
	"not be built\"}}\n"

/* Sends b (a JSON answer and its newline) and frees it. A 503 (a server
 * Prophet needs is away, the daemon is stopping) and a 429 tell the client
 * when to try again, as HTTP has it (RFC 9110, 10.2.3). */
static void
send_json(struct evhttp_request *req, int code, struct evbuffer *b)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", "application/json");
	if ((code == 503 || code == 429) &&
	    evhttp_find_header(h, "Retry-After") == NULL)
		evhttp_add_header(h, "Retry-After", HTTP_RETRY_AFTER_S);
	http_send(req, code, b);
	evbuffer_free(b);
}

void
http_reply_json(struct evhttp_request *req, int code, json_t *body)
{
	struct http_conn *c = conn_of_req(req);
	struct evbuffer *b;
	char *s = NULL;

	if (body != NULL && c != NULL && c->shape == HTTP_SHAPE_MYKIT)
		body = to_mykit(&code, body);
	if (body != NULL)
		/* Reals with 15 significant digits: 0.0025, not the
		 * 0.0025000000000000001 of jansson's 17. */
		s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY |
					     JSON_REAL_PRECISION(15));
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
	send_json(req, code, b);
}

void
http_reply_json_buffer(struct evhttp_request *req, int code,
		       struct evbuffer *json)
{
	struct http_conn *c = conn_of_req(req);

	if (c != NULL && c->shape == HTTP_SHAPE_MYKIT) {
		size_t len = evbuffer_get_length(json);
		json_t *body = json_loadb(
			(const char *)evbuffer_pullup(json, (ev_ssize_t)len),
			len, JSON_DECODE_ANY, NULL);

		evbuffer_free(json);
		http_reply_json(req, code, body);
		return;
	}
	evbuffer_add(json, "\n", 1);
	send_json(req, code, json);
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

char *
http_query_get(struct evhttp_request *req, const char *name, size_t *lenp)
{
	const char *q =
		evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	size_t nl = strlen(name);

	*lenp = 0;
	while (q != NULL && *q != '\0') {
		const char *amp = strchr(q, '&');
		size_t len = amp ? (size_t)(amp - q) : strlen(q);

		if (len >= nl && !strncmp(q, name, nl) &&
		    (len == nl || q[nl] == '=')) {
			char *raw = len > nl
					    ? xstrndup(q + nl + 1, len - nl - 1)
					    : xstrdup("");
			char *out = evhttp_uridecode(raw, 1, lenp);

			xfree(raw);
			return out;
		}
		q = amp ? amp + 1 : NULL;
	}
	return NULL;
}

/* Every parameter is one of known, once: each call takes one value of a
 * name, and reading the first of two (?from=X&from=5) would serve another
 * call than a proxy or a log reading the last one sees. */
int
http_query_known(struct evhttp_request *req, const char *const *known)
{
	const char *q =
		evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	uint64_t seen = 0;

	while (q != NULL && *q != '\0') {
		const char *amp = strchr(q, '&');
		size_t len = amp ? (size_t)(amp - q) : strlen(q);
		size_t nl = strcspn(q, "=&");
		int found = nl == 0, i;

		for (i = 0; !found && known[i] != NULL; i++)
			found = strlen(known[i]) == nl &&
				!strncmp(q, known[i], nl);
		if (found && nl > 0 && i <= 64) {
			uint64_t bit = (uint64_t)1 << (i - 1);

			if (seen & bit) {
				http_reply_error(req, 400, "invalid_value",
						 known[i - 1],
						 "query parameter '%s' given "
						 "twice",
						 known[i - 1]);
				return -1;
			}
			seen |= bit;
		}
		if (!found) {
			char name[65];

			snprintf(name, sizeof(name), "%.*s",
				 (int)(nl < 64 ? nl : 64), q);
			http_reply_unknown(req, "query parameter", name, known);
			return -1;
		}
		q = amp ? amp + 1 : q + len;
	}
	return 0;
}

void
http_route_metrics(void *ctx, struct evhttp_request *req, const char *a,
		   size_t n)
{
	(void)a;
	(void)n;
	http_metrics_cb(req, ctx);
}

void
http_route_healthz(void *ctx, struct evhttp_request *req, const char *a,
		   size_t n)
{
	(void)ctx;
	(void)a;
	(void)n;
	http_reply_json(req, 200, json_pack("{s:b}", "ok", 1));
}

void
http_metrics_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer *b = evbuffer_new();

	(void)arg;
	metrics_render(b);
	evhttp_add_header(evhttp_request_get_output_headers(req),
			  "Content-Type", "text/plain; version=0.0.4");
	http_send(req, 200, b);
	evbuffer_free(b);
}
