/*
 * A minimal HTTP/1.1 client: an incremental answer parser (Content-Length,
 * chunked, or until EOF) that needs no blocking reads, and over it one
 * kept-alive connection per struct on a blocking socket. Enough to load the
 * manager without a client library getting in the way of the measurement.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"
#include "xmalloc.h"

struct httpc {
	char host[256];
	int port;
	int fd;
	struct http_resp resp;
};

int
http_base_parse(const char *url, char *host, size_t hostlen, int *port)
{
	const char *p = url, *colon, *end;

	if (!strncmp(p, "http://", 7))
		p += 7;
	end = p + strcspn(p, "/");
	colon = memchr(p, ':', (size_t)(end - p));
	*port = 80;
	if (colon != NULL) {
		*port = atoi(colon + 1);
		end = colon;
	}
	if (end == p || (size_t)(end - p) >= hostlen || *port <= 0 ||
	    *port > 65535)
		return -1;
	memcpy(host, p, (size_t)(end - p));
	host[end - p] = '\0';
	return 0;
}

static int
conn_open(struct httpc *c, char *err, size_t errlen)
{
	struct addrinfo hints = {0}, *res = NULL;
	struct timeval tv = {120, 0};
	char port[16];
	int one = 1, rc;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(port, sizeof(port), "%d", c->port);
	rc = getaddrinfo(c->host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "%s: %s", c->host, gai_strerror(rc));
		return -1;
	}
	c->fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 || connect(c->fd, res->ai_addr, res->ai_addrlen) < 0) {
		snprintf(err, errlen, "connect %s:%d: %s", c->host, c->port,
			 strerror(errno));
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return 0;
}

static void
conn_close(struct httpc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

struct httpc *
httpc_create(const char *base_url, char *err, size_t errlen)
{
	struct httpc *c = xcalloc(1, sizeof(*c));

	c->fd = -1;
	if (http_base_parse(base_url, c->host, sizeof(c->host), &c->port) < 0) {
		snprintf(err, errlen, "bad URL '%s' (want http://host:port)",
			 base_url);
		xfree(c);
		return NULL;
	}
	if (conn_open(c, err, errlen) < 0) {
		xfree(c);
		return NULL;
	}
	return c;
}

void
httpc_destroy(struct httpc *c)
{
	if (c == NULL)
		return;
	conn_close(c);
	http_resp_free(&c->resp);
	xfree(c);
}

static int
send_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Finds a header's value in [h, end); NULL if absent. */
static const char *
header(const char *h, const char *end, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);

	while (h < end) {
		const char *eol = memchr(h, '\n', (size_t)(end - h));

		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - h) > nl && h[nl] == ':' &&
		    !strncasecmp(h, name, nl)) {
			const char *v = h + nl + 1;

			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			*vlen = (size_t)(eol - v);
			while (*vlen > 0 &&
			       (v[*vlen - 1] == '\r' || v[*vlen - 1] == ' '))
				(*vlen)--;
			return v;
		}
		h = eol + 1;
	}
	return NULL;
}

/* ------------------------------------------------------ answer parser --- */

enum {
	RESP_HEAD,
	RESP_BODY,	 /* Content-Length: left bytes to come */
	RESP_UNTIL_EOF,	 /* neither length nor chunked */
	RESP_CHUNK_SIZE, /* a chunk-size line */
	RESP_CHUNK_DATA, /* left bytes of the chunk */
	RESP_CHUNK_END,	 /* the CRLF after a chunk */
	RESP_TRAILER,	 /* lines up to the empty one after the last chunk */
	RESP_DONE,
};

void
http_resp_reset(struct http_resp *r)
{
	r->status = 0;
	r->close_after = 0;
	r->state = RESP_HEAD;
	r->left = 0;
	r->len = r->pos = 0;
	if (r->body == NULL) {
		r->body_cap = 4096;
		r->body = xmalloc(r->body_cap);
	}
	r->body_len = 0;
	r->body[0] = '\0';
}

void
http_resp_free(struct http_resp *r)
{
	xfree(r->buf);
	xfree(r->body);
	memset(r, 0, sizeof(*r));
}

char *
http_resp_space(struct http_resp *r, size_t *room)
{
	if (r->cap - r->len < 65536) {
		r->cap = r->cap ? 2 * r->cap : 131072;
		r->buf = xrealloc(r->buf, r->cap);
	}
	*room = r->cap - r->len;
	return r->buf + r->len;
}

static void
body_put(struct http_resp *r, const char *p, size_t n)
{
	if (r->body_len + n + 1 > r->body_cap) {
		r->body_cap = (r->body_len + n + 1) * 2;
		r->body = xrealloc(r->body, r->body_cap);
	}
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
}

/* Status line and headers, once the blank line is in; 0 for more, -1. */
static int
resp_head(struct http_resp *r)
{
	const char *hend, *v;
	size_t vlen;
	long long clen = -1;

	hend = memmem(r->buf + r->pos, r->len - r->pos, "\r\n\r\n", 4);
	if (hend == NULL) {
		/* Search only the new bytes next time. */
		r->pos = r->len > 3 ? r->len - 3 : 0;
		return 0;
	}
	r->pos = (size_t)(hend - r->buf) + 4;
	if (r->pos < 12 || strncmp(r->buf, "HTTP/1.", 7))
		return -1;
	r->status = atoi(r->buf + 9);
	r->close_after = !strncmp(r->buf, "HTTP/1.0", 8);
	v = header(r->buf, hend + 2, "Connection", &vlen);
	if (v != NULL && vlen == 5 && !strncasecmp(v, "close", 5))
		r->close_after = 1;
	v = header(r->buf, hend + 2, "Content-Length", &vlen);
	if (v != NULL)
		clen = strtoll(v, NULL, 10);
	v = header(r->buf, hend + 2, "Transfer-Encoding", &vlen);
	if (v != NULL && vlen == 7 && !strncasecmp(v, "chunked", 7))
		r->state = RESP_CHUNK_SIZE;
	else if (clen >= 0)
		r->state = RESP_BODY, r->left = (size_t)clen;
	else
		r->state = RESP_UNTIL_EOF;
	return 1;
}

/* The next CRLF-ended line at pos (its length without CRLF), or NULL. */
static const char *
resp_line(struct http_resp *r, size_t *n)
{
	const char *p = r->buf + r->pos;
	const char *eol = memmem(p, r->len - r->pos, "\r\n", 2);

	if (eol == NULL)
		return NULL;
	*n = (size_t)(eol - p);
	r->pos += *n + 2;
	return p;
}

/* Takes up to left bytes of body at pos. */
static void
resp_take(struct http_resp *r)
{
	size_t n = r->len - r->pos < r->left ? r->len - r->pos : r->left;

	body_put(r, r->buf + r->pos, n);
	r->pos += n;
	r->left -= n;
}

int
http_resp_feed(struct http_resp *r, size_t n)
{
	const char *line;
	size_t ll;
	int rc;

	r->len += n;
	for (;;) {
		switch (r->state) {
		case RESP_HEAD:
			if ((rc = resp_head(r)) <= 0)
				return rc;
			break;
		case RESP_BODY:
			resp_take(r);
			if (r->left > 0)
				return 0;
			r->state = RESP_DONE;
			break;
		case RESP_UNTIL_EOF:
			r->left = r->len - r->pos;
			resp_take(r);
			return 0;
		case RESP_CHUNK_SIZE:
			if ((line = resp_line(r, &ll)) == NULL)
				return 0;
			if (ll == 0 || !isxdigit((unsigned char)line[0]))
				return -1;
			r->left = strtoul(line, NULL, 16);
			r->state = r->left ? RESP_CHUNK_DATA : RESP_TRAILER;
			break;
		case RESP_CHUNK_DATA:
			resp_take(r);
			if (r->left > 0)
				return 0;
			r->state = RESP_CHUNK_END;
			break;
		case RESP_CHUNK_END:
			if (r->len - r->pos < 2)
				return 0;
			if (memcmp(r->buf + r->pos, "\r\n", 2))
				return -1;
			r->pos += 2;
			r->state = RESP_CHUNK_SIZE;
			break;
		case RESP_TRAILER:
			if ((line = resp_line(r, &ll)) == NULL)
				return 0;
			if (ll == 0)
				r->state = RESP_DONE;
			break;
		default: return 1;
		}
	}
}

int
http_resp_eof(struct http_resp *r)
{
	if (r->state != RESP_UNTIL_EOF)
		return -1;
	r->close_after = 1;
	r->state = RESP_DONE;
	return 1;
}

/* Reads one answer: 0 ok, -1 broken connection/protocol. */
static int
read_answer(struct httpc *c, int *got_any)
{
	http_resp_reset(&c->resp);
	for (;;) {
		size_t room;
		char *p = http_resp_space(&c->resp, &room);
		ssize_t n;
		int rc;

		do
			n = read(c->fd, p, room);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -1;
		rc = n == 0 ? http_resp_eof(&c->resp)
			    : http_resp_feed(&c->resp, (size_t)n);
		if (n > 0)
			*got_any = 1;
		if (rc != 0)
			return rc > 0 ? 0 : -1;
	}
}

static char auth_header[600];

const char *
httpc_auth_header(void)
{
	return auth_header;
}

void
httpc_token_set(const char *token)
{
	if (token != NULL && token[0] != '\0')
		snprintf(auth_header, sizeof(auth_header),
			 "Authorization: Bearer %s\r\n", token);
	else
		auth_header[0] = '\0';
}

int
httpc_request(struct httpc *c, const char *method, const char *path,
	      const char *body, size_t len, const char **resp, size_t *resp_len,
	      char *err, size_t errlen)
{
	char head[1280];
	struct iovec iov[2];

	for (int attempt = 0; attempt < 2; attempt++) {
		int got_any = 0, fresh = 0;
		int hn;

		if (c->fd < 0) {
			if (conn_open(c, err, errlen) < 0)
				return -1;
			fresh = 1;
		}
		hn = snprintf(head, sizeof(head),
			      "%s %s HTTP/1.1\r\nHost: %s:%d\r\n%s"
			      "Content-Type: application/json\r\n"
			      "Content-Length: %zu\r\n\r\n",
			      method, path, c->host, c->port, auth_header,
			      body ? len : (size_t)0);
		iov[0].iov_base = head;
		iov[0].iov_len = (size_t)hn;
		iov[1].iov_base = (void *)body;
		iov[1].iov_len = body ? len : 0;
		errno = 0;
		if (send_all(c->fd, iov, body && len ? 2 : 1) < 0 ||
		    read_answer(c, &got_any) < 0) {
			snprintf(err, errlen, "%s %s: %s", method, path,
				 errno ? strerror(errno) : "connection closed");
			conn_close(c);
			/* A kept-alive connection the server had closed: retry
			 * once on a fresh one. */
			if (fresh || got_any)
				return -1;
			continue;
		}
		if (c->resp.close_after)
			conn_close(c);
		*resp = c->resp.body;
		*resp_len = c->resp.body_len;
		return c->resp.status;
	}
	return -1;
}
