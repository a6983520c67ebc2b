#ifndef PROPHET_HTTP_H
#define PROPHET_HTTP_H

#include <stddef.h>

#include <event2/http.h>
#include <jansson.h>

/* evhttp with the limits and JSON helpers every daemon shares. */
struct evhttp *http_server_create(struct event_base *base, const char *listen,
				  size_t max_body, int timeout_s, char *err,
				  size_t errlen);
/* At most max open connections (0: no limit); more wait in the backlog. */
void http_server_set_max_connections(struct evhttp *h, long max);
/* Instead of evhttp_free for servers made by http_server_create. */
void http_server_free(struct evhttp *h);
/*
 * Requests of the mykit-delay compatible endpoints are marked (an internal
 * input header, replacing any a client sent) so that every answer, success
 * or error, is rendered in mykit-delay's shape by http_reply_json.
 */
#define HTTP_MYKIT_HEADER "X-Prophet-Internal-Mykit"
void http_mark_mykit(struct evhttp_request *req);
/* Takes over body. */
void http_reply_json(struct evhttp_request *req, int code, json_t *body);
void http_reply_error(struct evhttp_request *req, int code, const char *ecode,
		      const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* The request body as a new NUL-terminated buffer. */
char *http_body(struct evhttp_request *req, size_t *lenp);
/* GET /metrics for any daemon. */
void http_metrics_cb(struct evhttp_request *req, void *arg);
const char *http_reason(int code);

#endif
