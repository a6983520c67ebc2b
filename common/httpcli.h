#ifndef PROPHET_HTTPCLI_H
#define PROPHET_HTTPCLI_H

#include <stddef.h>

struct event_base;

/*
 * Outbound HTTP on the libevent loop: libcurl's multi interface, its
 * sockets and timer driven by loop events. Requests run concurrently;
 * each completion calls its done_cb on the loop thread.
 */
struct httpcli;

struct httpcli_req {
	const char *method; /* GET, POST, PUT, PATCH, DELETE */
	const char *url;
	char *const *headers; /* "Name: value", NULL-terminated; may be NULL */
	const void *body;     /* sent for POST, PUT, PATCH */
	size_t body_len;
	long timeout_ms;
	long max_redirects; /* 0: redirects are not followed */
};

struct httpcli_result {
	long status;	  /* HTTP status, 0 if no answer */
	int transport;	  /* 1: no complete answer (timeout, refused ...) */
	char error[256];  /* what went wrong, "" on a 2xx */
	double seconds;	  /* request start to completion */
	const char *body; /* the answer's first bytes (up to 4 KiB), borrowed */
	size_t body_len;
};

typedef void (*httpcli_done_fn)(const struct httpcli_result *r, void *arg);

struct httpcli *httpcli_create(struct event_base *base);
/* Abandons requests still running: their done_cb is not called. */
void httpcli_destroy(struct httpcli *h);
/* Starts a request; the request's strings are copied. */
void httpcli_request(struct httpcli *h, const struct httpcli_req *rq,
		     httpcli_done_fn done_cb, void *arg);
size_t httpcli_running(const struct httpcli *h);

#endif
