#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "callback.h"
#include "hash.h"
#include "task.h"
#include "xmalloc.h"

char *
callback_header_encode(const json_t *callback, int max_attempts)
{
	json_t *o = json_deep_copy(callback);
	char *s;

	if (max_attempts > 0)
		json_object_set_new(o, "max_attempts",
				    json_integer(max_attempts));
	s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	if (s == NULL)
		abort();
	return s;
}

static int
method_valid(const char *m)
{
	static const char *const methods[] = {"GET",   "POST",	 "PUT",
					      "PATCH", "DELETE", NULL};

	for (int i = 0; methods[i]; i++)
		if (!strcmp(m, methods[i]))
			return 1;
	return 0;
}

int
callback_spec_parse(const char *s, size_t len, struct callback_spec *cb)
{
	json_t *o, *v;
	const char *url;

	memset(cb, 0, sizeof(*cb));
	if (len > CALLBACK_HDR_MAX)
		return -1;
	o = json_loadb(s, len, 0, NULL);
	if (!json_is_object(o))
		goto fail;
	url = json_string_value(json_object_get(o, "url"));
	if (url == NULL || strlen(url) > TASK_URL_MAX ||
	    (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8)))
		goto fail;
	cb->url = xstrdup(url);
	v = json_object_get(o, "method");
	if (v != NULL &&
	    (!json_is_string(v) || !method_valid(json_string_value(v))))
		goto fail;
	cb->method = xstrdup(v ? json_string_value(v) : "POST");
	v = json_object_get(o, "headers");
	if (json_is_object(v))
		cb->headers = json_incref(v);
	v = json_object_get(o, "timeout_ms");
	if (json_is_integer(v) && json_integer_value(v) > 0 &&
	    json_integer_value(v) <= 300000)
		cb->timeout_ms = json_integer_value(v);
	v = json_object_get(o, "max_attempts");
	if (json_is_integer(v) && json_integer_value(v) > 0 &&
	    json_integer_value(v) <= 100)
		cb->max_attempts = (int)json_integer_value(v);
	json_decref(o);
	return 0;
fail:
	json_decref(o);
	callback_spec_clear(cb);
	return -1;
}

void
callback_spec_route(const char *url, struct callback_spec *cb)
{
	memset(cb, 0, sizeof(*cb));
	cb->url = xstrdup(url);
	cb->method = xstrdup("POST");
}

json_t *
callback_spec_json(const struct callback_spec *cb)
{
	json_t *o =
		json_pack("{s:s, s:s}", "url", cb->url, "method", cb->method);

	if (cb->headers != NULL)
		json_object_set(o, "headers", cb->headers);
	if (cb->timeout_ms > 0)
		json_object_set_new(o, "timeout_ms",
				    json_integer(cb->timeout_ms));
	return o;
}

void
callback_spec_clear(struct callback_spec *cb)
{
	xfree(cb->url);
	xfree(cb->method);
	json_decref(cb->headers);
	memset(cb, 0, sizeof(*cb));
}

int
callback_url_origin(const char *url, char *buf, size_t len, char *host,
		    size_t hostlen)
{
	const char *p, *end, *at, *hs, *he, *port = NULL;
	int https;
	size_t hl;
	char h[256];

	if (!strncasecmp(url, "http://", 7)) {
		https = 0;
		p = url + 7;
	} else if (!strncasecmp(url, "https://", 8)) {
		https = 1;
		p = url + 8;
	} else {
		return -1;
	}
	end = p + strcspn(p, "/?#");
	/* userinfo: the last '@' of the authority */
	for (at = end; at > p && at[-1] != '@'; at--)
		;
	if (at > p)
		p = at;
	if (*p == '[') {
		he = memchr(p, ']', (size_t)(end - p));
		if (he == NULL)
			return -1;
		hs = p;
		he++;
		if (he < end && *he == ':')
			port = he + 1;
		else if (he != end)
			return -1;
	} else {
		hs = p;
		he = memchr(p, ':', (size_t)(end - p));
		if (he != NULL)
			port = he + 1;
		else
			he = end;
	}
	hl = (size_t)(he - hs);
	if (hl == 0 || hl >= sizeof(h))
		return -1;
	for (size_t i = 0; i < hl; i++)
		h[i] = (char)tolower((unsigned char)hs[i]);
	h[hl] = '\0';
	if (port != NULL) {
		long n = 0;

		if (port == end)
			return -1;
		for (const char *q = port; q < end; q++) {
			if (!isdigit((unsigned char)*q))
				return -1;
			n = n * 10 + (*q - '0');
			if (n > 65535)
				return -1;
		}
		if (n == 0)
			return -1;
		snprintf(buf, len, "%s:%ld", h, n);
	} else {
		snprintf(buf, len, "%s:%d", h, https ? 443 : 80);
	}
	if (host != NULL) {
		/* the bare host: no brackets around IPv6 */
		if (h[0] == '[') {
			h[hl - 1] = '\0';
			snprintf(host, hostlen, "%s", h + 1);
		} else {
			snprintf(host, hostlen, "%s", h);
		}
	}
	return 0;
}

int
callback_host_allowed(const char *list, const char *host)
{
	const char *p = list;
	size_t hl = strlen(host);
	int any = 0;

	while (*p) {
		const char *e;
		size_t n;

		while (*p == ',' || *p == ' ')
			p++;
		e = p + strcspn(p, ", ");
		n = (size_t)(e - p);
		if (n == 0)
			break;
		any = 1;
		if (n == hl && !strncasecmp(p, host, n))
			return 1;
		if (p[0] == '.') {
			/* ".example.com": the domain itself or a subdomain */
			if (n - 1 == hl && !strncasecmp(p + 1, host, n - 1))
				return 1;
			if (hl > n && !strncasecmp(host + hl - n, p, n))
				return 1;
		}
		p = e;
	}
	return !any;
}

int64_t
callback_backoff_ms(const char *id, int next, int64_t base_ms, int64_t max_ms,
		    int jitter_pct)
{
	int64_t d = base_ms;
	uint64_t h;

	for (int i = 2; i < next && d < max_ms; i++)
		d *= 2;
	if (d > max_ms)
		d = max_ms;
	if (jitter_pct <= 0 || d <= 0)
		return d;
	h = fnv64(FNV64_OFFSET, id, strlen(id));
	h = fnv64(h, &next, sizeof(next));
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return d - (int64_t)(h % (uint64_t)(d * jitter_pct / 100 + 1));
}

void
callback_retry_id(const char *id, int next, char *buf, size_t len)
{
	int n = snprintf(buf, len, "cbr:%s:%d", id, next);

	if (n < 0 || n > TASK_ID_MAX || (size_t)n >= len)
		snprintf(
			buf, len, "cbr:h%016llx:%d",
			(unsigned long long)fnv64(FNV64_OFFSET, id, strlen(id)),
			next);
}

static int
header_ok(const char *k, const char *v)
{
	if (*k == '\0' || !strncasecmp(k, "x-prophet-", 10))
		return 0;
	for (const char *p = k; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == ':' || *p == 0x7f)
			return 0;
	for (const char *p = v; *p; p++)
		if (*p == '\r' || *p == '\n')
			return 0;
	return 1;
}

char **
callback_headers_build(const struct callback_spec *cb, const char *id,
		       int attempt, int64_t due_at)
{
	size_t n = cb->headers ? json_object_size(cb->headers) : 0, i = 0;
	char **h = xcalloc(n + 5, sizeof(char *));
	int has_ctype = 0;
	const char *k;
	json_t *v;

	if (cb->headers != NULL) {
		json_object_foreach (cb->headers, k, v) {
			const char *s = json_string_value(v);

			if (s == NULL || strlen(s) != json_string_length(v) ||
			    !header_ok(k, s))
				continue;
			if (!strcasecmp(k, "content-type"))
				has_ctype = 1;
			h[i++] = xasprintf("%s: %s", k, s);
		}
	}
	if (!has_ctype && strcmp(cb->method, "GET") &&
	    strcmp(cb->method, "DELETE"))
		h[i++] = xstrdup("Content-Type: application/octet-stream");
	h[i++] = xasprintf("X-Prophet-Id: %s", id);
	h[i++] = xasprintf("X-Prophet-Attempt: %d", attempt);
	h[i++] = xasprintf("X-Prophet-Due-At: %lld", (long long)due_at);
	h[i] = NULL;
	return h;
}

void
callback_headers_free(char **h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; h[i] != NULL; i++)
		xfree(h[i]);
	xfree(h);
}
