#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "url.h"
#include "xmalloc.h"

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static char *
pct_decode(const char *s, size_t n)
{
	char *out = xmalloc(n + 1);
	size_t j = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 &&
		    hexval(s[i + 2]) >= 0) {
			out[j++] = (char)(hexval(s[i + 1]) * 16 +
					  hexval(s[i + 2]));
			i += 2;
		} else {
			out[j++] = s[i];
		}
	}
	out[j] = '\0';
	return out;
}

static int
port_parse(const char *s, size_t n, int *port)
{
	int v = 0;

	if (n == 0 || n > 5)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	*port = v;
	return 0;
}

int
url_parse(const char *s, struct url *u, char *err, size_t errlen)
{
	const char *p, *auth, *at, *hostend, *slash;

	memset(u, 0, sizeof(*u));
	p = strstr(s, "://");
	if (p == NULL || p == s) {
		snprintf(err, errlen, "not a URL: missing scheme://");
		return -1;
	}
	u->scheme = xstrndup(s, (size_t)(p - s));
	auth = p + 3;
	slash = strchr(auth, '/');
	if (slash == NULL)
		slash = auth + strlen(auth);
	at = NULL;
	for (const char *q = auth; q < slash; q++)
		if (*q == '@')
			at = q;
	if (at != NULL) {
		const char *colon = memchr(auth, ':', (size_t)(at - auth));

		if (colon != NULL) {
			u->user = pct_decode(auth, (size_t)(colon - auth));
			u->password =
				pct_decode(colon + 1, (size_t)(at - colon - 1));
		} else {
			u->user = pct_decode(auth, (size_t)(at - auth));
		}
		auth = at + 1;
	}
	if (*auth == '[') {
		const char *close = memchr(auth, ']', (size_t)(slash - auth));

		if (close == NULL) {
			snprintf(err, errlen, "unterminated [ in host");
			url_clear(u);
			return -1;
		}
		u->host = xstrndup(auth + 1, (size_t)(close - auth - 1));
		hostend = close + 1;
	} else {
		hostend = auth;
		while (hostend < slash && *hostend != ':')
			hostend++;
		u->host = xstrndup(auth, (size_t)(hostend - auth));
	}
	if (u->host[0] == '\0') {
		snprintf(err, errlen, "missing host");
		url_clear(u);
		return -1;
	}
	if (hostend < slash && *hostend == ':') {
		if (port_parse(hostend + 1, (size_t)(slash - hostend - 1),
			       &u->port) < 0) {
			/* Not quoted: a password with an unencoded '/' ends
			 * up here. */
			snprintf(err, errlen,
				 "bad port (1-65535; in a password, write '/' "
				 "as %%2F, '@' as %%40, ':' as %%3A)");
			url_clear(u);
			return -1;
		}
	} else if (hostend != slash) {
		snprintf(err, errlen, "unexpected text after host");
		url_clear(u);
		return -1;
	}
	if (*slash == '/' && slash[1] != '\0') {
		const char *q = strchr(slash + 1, '?');

		if (q == NULL) {
			u->path = xstrdup(slash + 1);
		} else {
			if (q > slash + 1)
				u->path = xstrndup(slash + 1,
						   (size_t)(q - slash - 1));
			if (q[1] != '\0')
				u->query = xstrdup(q + 1);
		}
	}
	return 0;
}

void
url_clear(struct url *u)
{
	xfree(u->scheme);
	xfree(u->user);
	xfree(u->password);
	xfree(u->host);
	xfree(u->path);
	xfree(u->query);
	memset(u, 0, sizeof(*u));
}

int
hostport_parse(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	const char *h = s;
	size_t n;

	if (colon == NULL)
		return -1;
	n = (size_t)(colon - s);
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		h = s + 1;
		n -= 2;
	}
	if (n == 0 || n >= hostlen)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	return port_parse(colon + 1, strlen(colon + 1), port);
}

int
url_host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	size_t n = strlen(host);

	if (!strcasecmp(host, "localhost") ||
	    (n > 10 && !strcasecmp(host + n - 10, ".localhost")))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) != 1)
		return 0;
	return IN6_IS_ADDR_LOOPBACK(&a6) ||
	       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
}

int
url_listen_is_loopback(const char *listen)
{
	char host[256];
	int port;

	return hostport_parse(listen, host, sizeof(host), &port) == 0 &&
	       url_host_is_loopback(host);
}

/* The next "name=value" of *q: name and value spans, *q moved past it. */
static int
query_next(const char **q, const char **name, size_t *nlen, const char **value,
	   size_t *vlen)
{
	const char *p = *q, *end, *eq;

	while (*p == '&')
		p++;
	if (*p == '\0')
		return 0;
	end = p + strcspn(p, "&");
	eq = memchr(p, '=', (size_t)(end - p));
	*name = p;
	*nlen = (size_t)((eq ? eq : end) - p);
	*value = eq ? eq + 1 : end;
	*vlen = (size_t)(end - *value);
	*q = end;
	return 1;
}

char *
url_query_get(const char *query, const char *name)
{
	const char *n, *v;
	size_t nl, vl;

	while (query != NULL && query_next(&query, &n, &nl, &v, &vl))
		if (nl == strlen(name) && !memcmp(n, name, nl))
			return pct_decode(v, vl);
	return NULL;
}

int
url_query_check(const char *query, const char *const *names, char *err,
		size_t errlen)
{
	const char *q = query, *n, *v;
	size_t nl, vl;
	unsigned seen = 0;

	while (q != NULL && query_next(&q, &n, &nl, &v, &vl)) {
		size_t i;

		for (i = 0; names[i] != NULL; i++)
			if (nl == strlen(names[i]) && !memcmp(n, names[i], nl))
				break;
		if (names[i] == NULL || nl == 0) {
			snprintf(err, errlen,
				 "unknown parameter '%.*s' after '?'",
				 (int)(nl > 64 ? 64 : nl), n);
			return -1;
		}
		if (seen & (1u << i)) {
			snprintf(err, errlen, "parameter '%s' given twice",
				 names[i]);
			return -1;
		}
		seen |= 1u << i;
	}
	return 0;
}
