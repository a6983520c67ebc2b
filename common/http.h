#ifndef PROPHET_HTTP_H
#define PROPHET_HTTP_H

#include <stddef.h>

#include <event2/http.h>
#include <jansson.h>
#include <openssl/ssl.h>

/*
 * HTTP servers (libevent's evhttp) behind a gate of our own: every byte a
 * client sends passes a per-connection filter that checks the request head
 * strictly and bounds its time, its size and the body before evhttp reads
 * them, so that every refusal is the contract's JSON error (never
 * libevent's HTML page), a client trickling bytes is cut when its request
 * takes longer than timeout_s, and at the connection limit the connections
 * that are idle or slowest to send their request make room for new ones.
 * Requests are then dispatched by a route table.
 */

struct http_limits {
	size_t max_body;	/* Content-Length above: 413 */
	size_t max_headers;	/* request line + headers above: 431 */
	int timeout_s;		/* to receive a request; idle keep-alive */
	long max_connections;	/* 0: no limit */
	size_t max_body_memory; /* bodies being received at once; 0: no limit */
	const char *tls_cert;	/* PEM chain: HTTPS; NULL or "": plain HTTP */
	const char *tls_key;	/* its PEM private key */
	const char *tls_client_ca; /* clients must show a cert it signed */
	/* Listening on loopback, refuse a Host that is a DNS name other than
	 * localhost (DNS rebinding: a web page whose name resolves to
	 * 127.0.0.1 is same-origin with this server for the browser). */
	int loopback_hosts_only;
};

struct evhttp *http_server_create(struct event_base *base, const char *listen,
				  const struct http_limits *lim, char *err,
				  size_t errlen);
/* The connection limit in force: max_connections, or less when the
 * open-file limit could not be raised to hold that many. */
long http_server_max_connections(struct evhttp *h);
/* Instead of evhttp_free for servers made by http_server_create. */
void http_server_free(struct evhttp *h);
/*
 * Reads the certificate, key and client CA files again (SIGHUP): new
 * connections use them, open ones keep theirs; on an error (logged) the
 * old ones stay. Nothing for a plain server.
 */
void http_server_reload_tls(struct evhttp *h);
/* --check-config: 0 when a server would load cert, key and client CA
 * (a current certificate, its key), else -1 with err. */
int http_tls_check(const char *cert, const char *key, const char *client_ca,
		   char *err, size_t errlen);
/*
 * A client context for Prophet's own HTTPS calls: TLS 1.2 or newer, peers
 * verified against ca_file (NULL or "": the system's store), presenting
 * cert_file with key_file where a server asks (NULL or "": none). NULL
 * with err filled if a file cannot be read or the key is not the
 * certificate's.
 */
SSL_CTX *http_tls_client_context(const char *ca_file, const char *cert_file,
				 const char *key_file, char *err,
				 size_t errlen);

/* The shape of a route's answers: the contract's JSON, or mykit-delay's
 * {"success","data"|"message","code"}. */
enum http_shape { HTTP_SHAPE_NATIVE, HTTP_SHAPE_MYKIT };

/* Route flags. */
#define HTTP_ROUTE_STATE 1u /* changes state: refused cross-site (403) */
#define HTTP_ROUTE_JSON 2u  /* takes a JSON body (415 for another type) */

typedef void http_handler_fn(void *ctx, struct evhttp_request *req,
			     const char *arg, size_t arglen);
/*
 * One row per method and path. A path segment "{}" matches one segment;
 * the handler gets it percent-decoded as arg (may hold NUL bytes: use
 * arglen). HEAD is served by GET rows. role 0: public; otherwise passed to
 * the authorize function.
 */
struct http_route {
	unsigned methods; /* EVHTTP_REQ_* */
	const char *path;
	int role;
	enum http_shape shape;
	unsigned flags;
	http_handler_fn *fn;
};

/* 0 allowed, 401 no or unknown token, 403 token lacks the role. */
typedef int http_authorize_fn(void *ctx, const char *authorization, int role);

/* The routes (kept, not copied) and the role check (NULL: all public). */
void http_server_set_routes(struct evhttp *h, const struct http_route *routes,
			    size_t n, http_authorize_fn *authorize, void *ctx);
/*
 * The row serving method at path[0..len), or NULL; *path_row (may be NULL)
 * gets a row with this path and another method, for a 405.
 */
const struct http_route *http_route_find(const struct http_route *routes,
					 size_t n, const char *path, size_t len,
					 unsigned method,
					 const struct http_route **path_row);

/* evhttp_send_reply, right for HEAD too (the length, no body). */
void http_send(struct evhttp_request *req, int code, struct evbuffer *body);
/* Takes over body; a NULL body answers a 500 error, never crashes. */
void http_reply_json(struct evhttp_request *req, int code, json_t *body);
/* The same answer from JSON text already rendered (compact, one value),
 * taken over; a connection of the mykit shape gets it parsed and rendered
 * as http_reply_json would. */
void http_reply_json_buffer(struct evhttp_request *req, int code,
			    struct evbuffer *json);
void http_reply_error(struct evhttp_request *req, int code, const char *ecode,
		      const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* The request body as a new NUL-terminated buffer. */
char *http_body(struct evhttp_request *req, size_t *lenp);
/*
 * A query parameter, percent-decoded, as a new string with its length
 * (NUL bytes kept); NULL if absent.
 */
char *http_query_get(struct evhttp_request *req, const char *name,
		     size_t *lenp);
/*
 * 0 if the name of every query parameter is in known (NULL-terminated);
 * else answers 400 unknown_field naming the first other one and returns
 * -1: a misspelt filter or option must not be dropped silently.
 */
int http_query_known(struct evhttp_request *req, const char *const *known);
/* 400 unknown_field naming name, a what ("query parameter", "field") the
 * call does not take, and those it takes (known, NULL-terminated; none:
 * "this call takes none"). */
void http_reply_unknown(struct evhttp_request *req, const char *what,
			const char *name, const char *const *known);
/* Route handlers every daemon has: GET /metrics and GET /healthz. */
void http_route_metrics(void *ctx, struct evhttp_request *req, const char *a,
			size_t n);
void http_route_healthz(void *ctx, struct evhttp_request *req, const char *a,
			size_t n);
/* GET /metrics for any daemon. */
void http_metrics_cb(struct evhttp_request *req, void *arg);
const char *http_reason(int code);

#endif
