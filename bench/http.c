/*
 * A minimal HTTP/1.1 client: one kept-alive connection per struct, blocking
 * socket, Content-Length or chunked answers. Enough to load the manager
 * without a client library getting in the way of the measurement.
 */
#include "config.h"

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
	char *buf; /* received bytes */
	size_t len, cap;
	char *body; /* decoded answer body */
	size_t body_len, body_cap;
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
	c->len = 0;
	return 0;
}

static void
conn_close(struct httpc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
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
	xfree(c->buf);
	xfree(c->body);
	xfree(c);
}

/* Reads more bytes into buf; 0 on EOF, -1 on error. */
static ssize_t
fill(struct httpc *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		c->cap = c->cap ? 2 * c->cap : 131072;
		c->buf = xrealloc(c->buf, c->cap + 1);
	}
	do
		n = read(c->fd, c->buf + c->len, c->cap - c->len);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		c->len += (size_t)n;
	return n;
}

static void
body_put(struct httpc *c, const char *p, size_t n)
{
	if (c->body_len + n + 1 > c->body_cap) {
		c->body_cap = (c->body_len + n + 1) * 2;
		c->body = xrealloc(c->body, c->body_cap);
	}
	memcpy(c->body + c->body_len, p, n);
	c->body_len += n;
	c->body[c->body_len] = '\0';
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

/* Reads one answer: 0 ok, -1 broken connection/protocol. */
static int
read_answer(struct httpc *c, int *status, int *close_after, int *got_any)
{
	char *hend = NULL;
	size_t hlen, vlen;
	const char *v;
	long long clen = -1;
	int chunked = 0;

	c->len = 0;
	c->body_len = 0;
	if (c->body == NULL)
		body_put(c, "", 0);
	c->body[0] = '\0';
	for (;;) {
		if (c->len >= 4) {
			c->buf[c->len] = '\0';
			hend = strstr(c->buf, "\r\n\r\n");
			if (hend != NULL)
				break;
		}
		if (fill(c) <= 0)
			return -1;
		*got_any = 1;
	}
	hlen = (size_t)(hend - c->buf) + 4;
	if (c->len < 12 || strncmp(c->buf, "HTTP/1.", 7))
		return -1;
	*status = atoi(c->buf + 9);
	*close_after = !strncmp(c->buf, "HTTP/1.0", 8);
	v = header(c->buf, hend + 2, "Connection", &vlen);
	if (v != NULL && vlen == 5 && !strncasecmp(v, "close", 5))
		*close_after = 1;
	v = header(c->buf, hend + 2, "Content-Length", &vlen);
	if (v != NULL)
		clen = strtoll(v, NULL, 10);
	v = header(c->buf, hend + 2, "Transfer-Encoding", &vlen);
	if (v != NULL && vlen == 7 && !strncasecmp(v, "chunked", 7))
		chunked = 1;
	if (!chunked) {
		if (clen < 0) {
			/* Body until EOF. */
			while (fill(c) > 0)
				;
			body_put(c, c->buf + hlen, c->len - hlen);
			*close_after = 1;
			return 0;
		}
		while (c->len - hlen < (size_t)clen)
			if (fill(c) <= 0)
				return -1;
		body_put(c, c->buf + hlen, (size_t)clen);
		return 0;
	}
	for (size_t pos = hlen;;) {
		char *eol;
		size_t sz;

		c->buf[c->len] = '\0';
		while ((eol = strstr(c->buf + pos, "\r\n")) == NULL) {
			if (fill(c) <= 0)
				return -1;
			c->buf[c->len] = '\0';
		}
		sz = strtoul(c->buf + pos, NULL, 16);
		pos = (size_t)(eol - c->buf) + 2;
		while (c->len < pos + sz + 2)
			if (fill(c) <= 0)
				return -1;
		if (sz == 0)
			return 0; /* trailers are not used by our servers */
		body_put(c, c->buf + pos, sz);
		pos += sz + 2;
	}
}

int
httpc_request(struct httpc *c, const char *method, const char *path,
	      const char *body, size_t len, const char **resp, size_t *resp_len,
	      char *err, size_t errlen)
{
	char head[512];
	struct iovec iov[2];

	for (int attempt = 0; attempt < 2; attempt++) {
		int status = 0, close_after = 0, got_any = 0, fresh = 0;
		int hn;

		if (c->fd < 0) {
			if (conn_open(c, err, errlen) < 0)
				return -1;
			fresh = 1;
		}
		hn = snprintf(head, sizeof(head),
			      "%s %s HTTP/1.1\r\nHost: %s:%d\r\n"
			      "Content-Type: application/json\r\n"
			      "Content-Length: %zu\r\n\r\n",
			      method, path, c->host, c->port,
			      body ? len : (size_t)0);
		iov[0].iov_base = head;
		iov[0].iov_len = (size_t)hn;
		iov[1].iov_base = (void *)body;
		iov[1].iov_len = body ? len : 0;
		errno = 0;
		if (send_all(c->fd, iov, body && len ? 2 : 1) < 0 ||
		    read_answer(c, &status, &close_after, &got_any) < 0) {
			snprintf(err, errlen, "%s %s: %s", method, path,
				 errno ? strerror(errno) : "connection closed");
			conn_close(c);
			/* A kept-alive connection the server had closed: retry
			 * once on a fresh one. */
			if (fresh || got_any)
				return -1;
			continue;
		}
		if (close_after)
			conn_close(c);
		*resp = c->body;
		*resp_len = c->body_len;
		return status;
	}
	return -1;
}
