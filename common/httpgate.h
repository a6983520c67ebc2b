#ifndef PROPHET_HTTPGATE_H
#define PROPHET_HTTPGATE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The request head as the HTTP servers' gate reads it (common/http.c),
 * before libevent's evhttp sees a byte: the request line and header block
 * are checked here, strictly, so that evhttp never meets a request it would
 * refuse with its own HTML page, and so that the limits, the token and the
 * body size are known before the body is read. No I/O.
 */

#define HTTPGATE_METHOD_MAX 16

/* One header value, pointing into the parsed buffer (not NUL-terminated). */
struct httpgate_value {
	const char *s;
	size_t len; /* 0 and s NULL: absent */
};

struct httpgate_head {
	size_t len; /* bytes of the head, with the blank line */
	char method[HTTPGATE_METHOD_MAX + 1];
	const char *target; /* request-target as sent */
	size_t target_len;
	const char *path; /* the target's path (absolute-form: after host) */
	size_t path_len;
	int minor;		/* HTTP/1.minor */
	int64_t content_length; /* -1: none */
	int close; /* Connection: close (or HTTP/1.0 without keep-alive) */
	struct httpgate_value authorization, content_type, origin,
		sec_fetch_site, host;
};

/* Why a head is refused: the answer the gate gives. */
struct httpgate_error {
	int status;
	const char *code;    /* contract error code */
	const char *message; /* static text: nothing of the request */
};

/*
 * Where the head in buf[0..n) ends: the offset just past its blank line, 0
 * if it has not arrived yet. from: where an earlier call stopped looking
 * (0 the first time), so a head trickled byte by byte is scanned once.
 */
size_t httpgate_head_end(const char *buf, size_t n, size_t *from);
/*
 * Parses a complete head (buf[0..n), n from httpgate_head_end). Returns 0,
 * or -1 with err filled. Pointers in h point into buf.
 */
int httpgate_parse(const char *buf, size_t n, struct httpgate_head *h,
		   struct httpgate_error *err);
/* Whether a method may carry a body as evhttp reads it (GET and DELETE
 * do; HEAD does not). */
int httpgate_method_has_body(const char *method);

#endif
