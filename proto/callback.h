#ifndef PROPHET_CALLBACK_H
#define PROPHET_CALLBACK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/*
 * HTTP callbacks, the formats only (no I/O): the prophet-callback Kafka
 * header a worker adds to a task that has a callback, the request a
 * notifier makes from it, the retry schedule, and the host allow-list.
 */

/* Kafka header carrying the callback of a task (compact JSON). */
#define KHDR_CALLBACK "prophet-callback"

/* Task headers of a retry task (the notifier's own submissions): the
 * original task's id, the callback attempt it carries, the original due
 * time and topic. Not prophet- prefixed: the API reserves that prefix. */
#define RHDR_OF "callback-of"
#define RHDR_ATTEMPT "callback-attempt"
#define RHDR_DUE_AT "callback-due-at"
#define RHDR_TOPIC "callback-topic"
#define RHDR_OCCURRENCE "callback-occurrence" /* recurring tasks only */
/* The notifier's signature over all of the above (callback_retry_sign):
 * the manager and the notifier take a retry task only with it. */
#define RHDR_SIG "callback-sig"

#define CALLBACK_HDR_MAX 16384
#define CALLBACK_ERROR_MAX 255

struct callback_spec {
	char *url;
	char *method;	    /* GET, POST, PUT, PATCH or DELETE */
	json_t *headers;    /* object of strings, or NULL */
	int64_t timeout_ms; /* 0: the notifier's default */
	int max_attempts;   /* 0: the notifier's default */
};

/* The prophet-callback header value of a task's callback; caller frees. */
char *callback_header_encode(const json_t *callback, int max_attempts);
/* Parses a prophet-callback header (or a callback object as JSON text);
 * returns -1 if it is not a valid callback. */
int callback_spec_parse(const char *s, size_t len, struct callback_spec *cb);
/* A spec calling url with POST (a topic route of the config). */
void callback_spec_route(const char *url, struct callback_spec *cb);
/* The callback object (task field) of a spec, for a retry submission. */
json_t *callback_spec_json(const struct callback_spec *cb);
void callback_spec_clear(struct callback_spec *cb);

/*
 * "host:port" of an http(s) URL (lowercased, default port filled in,
 * IPv6 in brackets) into buf, and the bare host into host (may be NULL),
 * as libcurl parses the URL (its URL API: the host checked is the host
 * libcurl connects to, percent-decoded and with numeric IPv4 forms
 * normalised). Returns -1 if libcurl refuses the URL or it has no usable
 * authority (no host, port 0, a host of 256 bytes or more).
 */
int callback_url_origin(const char *url, char *buf, size_t len, char *host,
			size_t hostlen);
/*
 * Whether host is allowed by a comma-separated list: an entry matches the
 * host exactly (case-insensitive), an entry ".example.com" matches
 * example.com and any subdomain. An empty list allows every host.
 */
int callback_host_allowed(const char *list, const char *host);

/*
 * The delay before callback attempt `next` (2, 3, ...): base * 2^(next-2)
 * capped at max, then lowered by a jitter of up to jitter_pct percent.
 * The jitter is a hash of (id, next), so a replayed retry asks for the
 * same delay (an identical, idempotent submission).
 */
int64_t callback_backoff_ms(const char *id, int next, int64_t base_ms,
			    int64_t max_ms, int jitter_pct);
/*
 * The id of the retry task carrying attempt `next` of task id's callback:
 * "cbr:<id>:<next>", or "cbr:h<16 hex of FNV-1a-64(id)>:<next>" when that
 * would not fit in 128 characters. buf >= 129 bytes.
 */
void callback_retry_id(const char *id, int next, char *buf, size_t len);

/*
 * Whether a callback header may be sent: NULL if so, else why not (a
 * constant phrase). Refused: names that are not RFC 7230 tokens; the
 * framing and hop-by-hop headers the HTTP client sets itself (Host,
 * Content-Length, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE,
 * Trailer, Expect, HTTP2-Settings, Proxy-*); values with a control
 * character other than tab (CR, LF and NUL inject headers).
 */
const char *callback_header_refused(const char *name, const char *value,
				    size_t vlen);
/*
 * Drops the headers callback_header_refused refuses (and those that are
 * not strings) from cb->headers. Returns how many, the first one's name
 * copied into first (firstlen bytes).
 */
int callback_spec_sanitize(struct callback_spec *cb, char *first,
			   size_t firstlen);

/*
 * The request headers ("Name: value", NULL-terminated array, caller frees
 * with callback_headers_free): the spec's headers, then X-Prophet-Id,
 * X-Prophet-Attempt, X-Prophet-Due-At, Idempotency-Key "<id>:<occurrence>"
 * (the occurrence of a recurring task, else its due time: the same for
 * every retry and every duplicate of one publish; left out when the spec
 * has one), then the task's W3C trace context (traceparent, tracestate;
 * NULL: none), which replaces spec headers of those names. Refused spec
 * headers (above) and those naming X-Prophet-* are left out. With sign
 * (and keys in it), the request is signed (common/whsign.h): webhook-id
 * (the Idempotency-Key value Prophet makes), webhook-timestamp and
 * webhook-signature over the body sent (none for GET and DELETE), which
 * replace spec headers of those names.
 */
struct whsign;
struct callback_signing {
	const struct whsign *keys;
	int64_t timestamp; /* Unix seconds */
	const void *body;
	size_t body_len;
};
char **callback_headers_build(const struct callback_spec *cb, const char *id,
			      int attempt, int64_t due_at, int64_t occurrence,
			      const char *traceparent, const char *tracestate,
			      const struct callback_signing *sign);
void callback_headers_free(char **h);

/*
 * What a retry task's signature covers: its id, the RHDR_* header values
 * (NULL counts as ""), the callback spec with the max_attempts the task
 * carries, and the body.
 */
struct callback_retry {
	const char *id;
	const char *of;
	const char *attempt;
	const char *due_at;
	const char *topic;
	const char *occurrence;
	const struct callback_spec *cb;
	const void *body;
	size_t body_len;
};

/* The cluster's signing key (a row of cluster_secret, SQL_SECRET_*). */
#define CALLBACK_KEY_LEN 32
#define CALLBACK_KEY_NAME "callback-retry"

/* "v1:" and 64 hex digits */
#define CALLBACK_SIG_LEN 67

/* The bytes signed: each field length-prefixed, headers sorted by name
 * (docs/security.md). Caller frees. */
char *callback_retry_canon(const struct callback_retry *r, size_t *len);
/* "v1:<HMAC-SHA256 in hex>" of r under key into sig (>= CALLBACK_SIG_LEN
 * + 1 bytes). */
void callback_retry_sign(const void *key, size_t keylen,
			 const struct callback_retry *r, char *sig,
			 size_t siglen);
/* 1 if sig is r's signature under key (compared in constant time). */
int callback_retry_verify(const void *key, size_t keylen,
			  const struct callback_retry *r, const char *sig);

#endif
