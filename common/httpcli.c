#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <netdb.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "daemon.h"
#include "httpcli.h"
#include "log.h"
#include "netguard.h"
#include "xmalloc.h"

#define HTTPCLI_KEEP_BODY 4096

struct httpcli {
	struct event_base *base;
	CURLM *multi;
	struct event *timer;
	size_t running;
	struct hreq *all; /* every running request, to abandon at destroy */
	struct hsock *socks;
};

struct hreq {
	struct httpcli *h;
	CURL *easy;
	struct curl_slist *hdrs;
	char *body;
	char *got; /* keep bytes of the answer's body, NUL-terminated */
	size_t got_len, got_cap, keep;
	char errbuf[CURL_ERROR_SIZE];
	const struct netguard *guard;
	size_t max, seen; /* max_response_bytes, bytes read */
	int capped;
	int blocked;	     /* the guard refused an address */
	char blocked_ip[64]; /* the last one */
	int64_t start_us;
	httpcli_done_fn done_cb;
	void *arg;
	struct hreq *prev, *next;
};

/* One per socket curl watches. */
struct hsock {
	struct event *ev;
	struct hsock *prev, *next;
};

static void
hsock_free(struct httpcli *h, struct hsock *hs)
{
	if (hs->prev != NULL)
		hs->prev->next = hs->next;
	else
		h->socks = hs->next;
	if (hs->next != NULL)
		hs->next->prev = hs->prev;
	event_free(hs->ev);
	xfree(hs);
}

static void check_done(struct httpcli *h);

static void
event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct httpcli *h = arg;
	int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) |
		    (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
	int running;

	curl_multi_socket_action(h->multi, fd, flags, &running);
	check_done(h);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct httpcli *h = arg;
	int running;

	curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(h);
}

static int
socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct httpcli *h = userp;
	struct hsock *hs = socketp;
	short kind;

	if (what == CURL_POLL_REMOVE) {
		if (hs != NULL)
			hsock_free(h, hs);
		curl_multi_assign(h->multi, s, NULL);
		return 0;
	}
	kind = EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) |
	       (what & CURL_POLL_OUT ? EV_WRITE : 0);
	if (hs == NULL) {
		hs = xcalloc(1, sizeof(*hs));
		hs->next = h->socks;
		if (h->socks != NULL)
			h->socks->prev = hs;
		h->socks = hs;
		curl_multi_assign(h->multi, s, hs);
	} else {
		event_free(hs->ev);
	}
	hs->ev = event_new(h->base, s, kind, event_cb, h);
	event_add(hs->ev, NULL);
	return 0;
}

static int
multi_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	struct httpcli *h = userp;
	struct timeval tv;

	if (timeout_ms < 0) {
		evtimer_del(h->timer);
		return 0;
	}
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	evtimer_add(h->timer, &tv);
	return 0;
}

static const char *const class_names[HTTPCLI__CLASS_COUNT] = {
	"ok",	   "http_3xx", "http_4xx", "http_5xx", "timeout",
	"refused", "dns",      "tls",	   "blocked",  "error"};

const char *
httpcli_class_name(enum httpcli_class c)
{
	return c < HTTPCLI__CLASS_COUNT ? class_names[c] : "error";
}

/* Counts n more bytes read; 1 once past the cap (curl then stops). */
static int
over_cap(struct hreq *r, size_t n)
{
	r->seen += n;
	if (r->max > 0 && r->seen > r->max) {
		r->capped = 1;
		return 1;
	}
	return 0;
}

static size_t
write_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct hreq *r = arg;
	size_t n = size * nmemb, room = r->keep - r->got_len, take;

	if (over_cap(r, n))
		return 0;
	take = n < room ? n : room;
	if (r->got_len + take + 1 > r->got_cap) {
		while (r->got_len + take + 1 > r->got_cap)
			r->got_cap = r->got_cap ? r->got_cap * 2 : 4096;
		r->got = xrealloc(r->got, r->got_cap);
	}
	memcpy(r->got + r->got_len, ptr, take);
	r->got_len += take;
	return n;
}

static size_t
header_cb(char *ptr, size_t size, size_t nmemb, void *arg)
{
	return over_cap(arg, size * nmemb) ? 0 : size * nmemb;
}

/* Every socket of a guarded request: refused unless the guard allows
 * the address, so no packet goes to a refused one (the names it came
 * from were resolved already: DNS rebinding changes nothing). */
static curl_socket_t
opensocket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct hreq *r = clientp;

	if (!netguard_allows(r->guard, &a->addr, a->addrlen)) {
		r->blocked = 1;
		if (getnameinfo(&a->addr, a->addrlen, r->blocked_ip,
				sizeof(r->blocked_ip), NULL, 0,
				NI_NUMERICHOST) != 0)
			snprintf(r->blocked_ip, sizeof(r->blocked_ip), "?");
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype, a->protocol);
}

#if LIBCURL_VERSION_NUM >= 0x075000
/* Before each request, also on a connection reused from the pool (which
 * an unguarded request may have opened to anywhere). */
static int
prereq_cb(void *clientp, char *ip, char *local_ip, int port, int local_port)
{
	struct hreq *r = clientp;

	if (netguard_allows_ip(r->guard, ip))
		return CURL_PREREQFUNC_OK;
	r->blocked = 1;
	snprintf(r->blocked_ip, sizeof(r->blocked_ip), "%s", ip);
	return CURL_PREREQFUNC_ABORT;
}
#endif

static enum httpcli_class
status_class(long status)
{
	if (status >= 200 && status <= 299)
		return HTTPCLI_OK;
	if (status >= 300 && status <= 399)
		return HTTPCLI_HTTP_3XX;
	if (status >= 400 && status <= 499)
		return HTTPCLI_HTTP_4XX;
	if (status >= 500 && status <= 599)
		return HTTPCLI_HTTP_5XX;
	return HTTPCLI_ERROR;
}

static enum httpcli_class
error_class(CURLcode c, const struct hreq *r)
{
	switch (c) {
	case CURLE_OPERATION_TIMEDOUT: return HTTPCLI_TIMEOUT;
	case CURLE_COULDNT_CONNECT:
		return r->blocked ? HTTPCLI_BLOCKED : HTTPCLI_REFUSED;
	case CURLE_UNSUPPORTED_PROTOCOL: /* a redirect to another scheme */
		return HTTPCLI_BLOCKED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY: return HTTPCLI_DNS;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_USE_SSL_FAILED: return HTTPCLI_TLS;
	default: return r->blocked ? HTTPCLI_BLOCKED : HTTPCLI_ERROR;
	}
}

static void
hreq_destroy(struct hreq *r)
{
	curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->hdrs);
	xfree(r->body);
	xfree(r->got);
	xfree(r);
}

static void
hreq_free(struct hreq *r)
{
	struct httpcli *h = r->h;

	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		h->all = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	curl_multi_remove_handle(h->multi, r->easy);
	hreq_destroy(r);
	h->running--;
}

/* An HTTPS listener closes on a plain request without a word (curl:
 * "Empty reply from server"): worth a hint when the URL is http://. */
static int
plain_http(struct hreq *r)
{
	char *scheme = NULL;

	return curl_easy_getinfo(r->easy, CURLINFO_SCHEME, &scheme) ==
		       CURLE_OK &&
	       scheme != NULL && strcasecmp(scheme, "http") == 0;
}

/* What became of r, which curl finished with rc; res->body points into
 * r. */
static void
hreq_result(struct hreq *r, CURLcode rc, struct httpcli_result *res)
{
	long status = 0;

	memset(res, 0, sizeof(*res));
	res->seconds = (double)(clock_mono_us() - r->start_us) / 1e6;
	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	/* An answer whose status line arrived: complete, or cut at the
	 * cap, or the last of too many redirects. */
	if (status > 0 &&
	    (rc == CURLE_OK || r->capped || rc == CURLE_TOO_MANY_REDIRECTS)) {
		res->status = status;
		res->cls = status_class(status);
		res->capped = r->capped;
		if (res->cls != HTTPCLI_OK)
			snprintf(res->error, sizeof(res->error), "HTTP %ld",
				 status);
	} else {
		res->transport = 1;
		res->cls = rc == CURLE_OK ? HTTPCLI_ERROR : error_class(rc, r);
		if (r->blocked)
			snprintf(res->error, sizeof(res->error),
				 "address %s not allowed", r->blocked_ip);
		else if (rc == CURLE_GOT_NOTHING && plain_http(r))
			snprintf(res->error, sizeof(res->error),
				 "%.200s (an HTTPS port? this URL is http://)",
				 r->errbuf[0] ? r->errbuf
					      : curl_easy_strerror(rc));
		else
			snprintf(res->error, sizeof(res->error), "%s",
				 r->errbuf[0] ? r->errbuf
					      : curl_easy_strerror(rc));
	}
	if (r->got == NULL)
		r->got = xcalloc(1, 1);
	r->got[r->got_len] = '\0';
	res->body = r->got;
	res->body_len = r->got_len;
}

static void
check_done(struct httpcli *h)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(h->multi, &left)) != NULL) {
		struct httpcli_result res;
		struct hreq *r;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &r);
		hreq_result(r, msg->data.result, &res);
		r->done_cb(&res, r->arg);
		hreq_free(r);
	}
}

struct httpcli *
httpcli_create(struct event_base *base)
{
	struct httpcli *h = xcalloc(1, sizeof(*h));

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		log_fatal("curl_global_init failed", "");
	h->base = base;
	h->multi = curl_multi_init();
	if (h->multi == NULL)
		log_fatal("curl_multi_init failed", "");
	h->timer = evtimer_new(base, timer_cb, h);
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, multi_timer_cb);
	curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
	return h;
}

void
httpcli_destroy(struct httpcli *h)
{
	if (h == NULL)
		return;
	while (h->all != NULL)
		hreq_free(h->all);
	curl_multi_cleanup(h->multi);
	while (h->socks != NULL)
		hsock_free(h, h->socks);
	event_free(h->timer);
	xfree(h);
	curl_global_cleanup();
}

/* A request made ready for curl, not started. */
static struct hreq *
hreq_new(struct httpcli *h, const struct httpcli_req *rq)
{
	struct hreq *r = xcalloc(1, sizeof(*r));
	CURL *e = curl_easy_init();

	if (e == NULL)
		log_fatal("curl_easy_init failed", "");
	r->h = h;
	r->easy = e;
	r->start_us = clock_mono_us();
	r->guard = rq->guard;
	r->max = rq->max_response_bytes;
	r->keep = !rq->whole_body ? HTTPCLI_KEEP_BODY
		  : r->max > 0	  ? r->max
				  : (size_t)-1 / 2;
	for (size_t i = 0; rq->headers != NULL && rq->headers[i] != NULL; i++)
		r->hdrs = curl_slist_append(r->hdrs, rq->headers[i]);
	/* no "Expect: 100-continue" round trip before a body */
	r->hdrs = curl_slist_append(r->hdrs, "Expect:");
	curl_easy_setopt(e, CURLOPT_URL, rq->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(e, CURLOPT_PROTOCOLS,
			 (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
	curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS,
			 (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			 rq->timeout_ms < 10000 ? rq->timeout_ms : 10000L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION,
			 rq->max_redirects > 0 ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_MAXREDIRS, rq->max_redirects);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
	curl_easy_setopt(e, CURLOPT_USERAGENT,
			 rq->user_agent ? rq->user_agent : "prophet/" VERSION);
	curl_easy_setopt(e, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	if (rq->cert_file != NULL && rq->cert_file[0] != '\0') {
		curl_easy_setopt(e, CURLOPT_SSLCERT, rq->cert_file);
		curl_easy_setopt(e, CURLOPT_SSLKEY, rq->key_file);
	}
	if (rq->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	if (rq->guard != NULL) {
		curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
		curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, r);
#if LIBCURL_VERSION_NUM >= 0x075000
		curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, prereq_cb);
		curl_easy_setopt(e, CURLOPT_PREREQDATA, r);
#else
		/* no pre-request check: a pooled connection, which may lead
		 * anywhere, is never taken */
		curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
		curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
#endif
		curl_easy_setopt(e, CURLOPT_PROXY, "");
	}
	if (rq->ca_file != NULL && rq->ca_file[0] != '\0')
		curl_easy_setopt(e, CURLOPT_CAINFO, rq->ca_file);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	if (!strcmp(rq->method, "POST") || !strcmp(rq->method, "PUT") ||
	    !strcmp(rq->method, "PATCH")) {
		r->body = xmalloc(rq->body_len + 1);
		if (rq->body_len > 0)
			memcpy(r->body, rq->body, rq->body_len);
		r->body[rq->body_len] = '\0';
		curl_easy_setopt(e, CURLOPT_POST, 1L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)rq->body_len);
		if (strcmp(rq->method, "POST"))
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
	} else if (!strcmp(rq->method, "DELETE")) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	return r;
}

void
httpcli_request(struct httpcli *h, const struct httpcli_req *rq,
		httpcli_done_fn done_cb, void *arg)
{
	struct hreq *r = hreq_new(h, rq);

	r->done_cb = done_cb;
	r->arg = arg;
	r->next = h->all;
	if (h->all != NULL)
		h->all->prev = r;
	h->all = r;
	h->running++;
	curl_multi_add_handle(h->multi, r->easy);
}

void
httpcli_request_blocking(struct httpcli *h, const struct httpcli_req *rq,
			 struct httpcli_result *res)
{
	struct hreq *r = hreq_new(h, rq);

	hreq_result(r, curl_easy_perform(r->easy), res);
	res->owned = r->got; /* res->body */
	r->got = NULL;
	hreq_destroy(r);
}

void
httpcli_result_clear(struct httpcli_result *res)
{
	xfree(res->owned);
	memset(res, 0, sizeof(*res));
}

size_t
httpcli_running(const struct httpcli *h)
{
	return h->running;
}
