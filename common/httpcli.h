#ifndef PROPHET_HTTPCLI_H
#define PROPHET_HTTPCLI_H

#include <stddef.h>

struct event_base;

/*
 * Outbound HTTP, the one client of every program: libcurl's multi
 * interface on the libevent loop (its sockets and timer driven by loop
 * events; requests run concurrently, each completion calls its done_cb on
 * the loop thread), or one request at a time, blocking (prophetctl, start-up
 * checks). The notifier's callbacks and retry submissions, the manager's
 * reads of worker metrics and prophetctl's API calls all go through it.
 * HTTPS: TLS 1.2 at least, the peer's certificate and name verified.
 */
struct httpcli;
struct netguard;

struct httpcli_req {
	const char *method; /* GET, POST, PUT, PATCH, DELETE */
	const char *url;
	char *const *headers; /* "Name: value", NULL-terminated; may be NULL */
	const void *body;     /* sent for POST, PUT, PATCH */
	size_t body_len;
	long timeout_ms;
	long max_redirects;  /* 0: redirects are not followed */
	const char *ca_file; /* https peers verified by it; NULL/"": system's */
	/* PEM certificate chain and key presented to an https server that
	 * asks for one (mutual TLS); NULL/"": none. */
	const char *cert_file;
	const char *key_file;
	/*
	 * NULL: any address. Else every connection, new or reused, first
	 * or after a redirect, must be to an address it allows, and no
	 * proxy from the environment is used (it would be the address
	 * checked). Borrowed: it must outlive the request.
	 */
	const struct netguard *guard;
	/* 0: no limit. Else reading stops after this many bytes of
	 * headers and body: the status already received is the answer. */
	size_t max_response_bytes;
	/* The whole body in the result (up to max_response_bytes), not only
	 * its first 4 KiB. */
	int whole_body;
	/* No check of the peer's certificate or name (prophetctl
	 * --insecure, only where asked for). */
	int insecure;
	const char *user_agent; /* NULL: "prophet/<version>" */
};

/* What became of a request, coarsely: what a caller may show to whoever
 * chose the URL without telling them more about the network. */
enum httpcli_class {
	HTTPCLI_OK, /* 2xx */
	HTTPCLI_HTTP_3XX,
	HTTPCLI_HTTP_4XX,
	HTTPCLI_HTTP_5XX,
	HTTPCLI_TIMEOUT,
	HTTPCLI_REFUSED, /* the connection was refused or failed */
	HTTPCLI_DNS,
	HTTPCLI_TLS,
	HTTPCLI_BLOCKED, /* refused here: address or protocol not allowed */
	HTTPCLI_ERROR,	 /* anything else (connection cut, bad answer) */
	HTTPCLI__CLASS_COUNT
};

struct httpcli_result {
	long status;   /* HTTP status, 0 if no answer */
	int transport; /* 1: no complete answer (timeout, refused ...) */
	enum httpcli_class cls;
	int capped;	 /* reading stopped at max_response_bytes */
	char error[256]; /* details for the operator's log, "" on a 2xx */
	double seconds;	 /* request start to completion */
	/* The answer's first bytes (up to 4 KiB, or all of it with
	 * whole_body), NUL-terminated; borrowed from the request (done_cb),
	 * or the caller's until httpcli_result_clear (blocking). */
	const char *body;
	size_t body_len;
	char *owned; /* what httpcli_result_clear frees */
};

/* "ok", "http_3xx", ..., "error" */
const char *httpcli_class_name(enum httpcli_class c);

typedef void (*httpcli_done_fn)(const struct httpcli_result *r, void *arg);

struct httpcli *httpcli_create(struct event_base *base);
/* Abandons requests still running: their done_cb is not called. */
void httpcli_destroy(struct httpcli *h);
/* Starts a request; the request's strings are copied. */
void httpcli_request(struct httpcli *h, const struct httpcli_req *rq,
		     httpcli_done_fn done_cb, void *arg);
size_t httpcli_running(const struct httpcli *h);
/* The same request made at once, blocking; h may be NULL (a program
 * without a loop). Release res with httpcli_result_clear. */
void httpcli_request_blocking(struct httpcli *h, const struct httpcli_req *rq,
			      struct httpcli_result *res);
void httpcli_result_clear(struct httpcli_result *res);

#endif
