#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "callback.h"
#include "crypto.h"
#include "hash.h"
#include "task.h"
#include "trace.h"
#include "whsign.h"
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
	CURLU *u = curl_url();
	char *scheme = NULL, *h = NULL, *port = NULL;
	size_t hl;
	int rc = -1;

	/* libcurl's parser, the one that connects (notifier/flow.c hands the
	 * same text to libcurl): what is checked is where the request goes. */
	if (u == NULL || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) ||
	    curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) !=
		    CURLUE_OK ||
	    !strcmp(port, "0"))
		goto out;
	hl = strlen(h);
	if (hl == 0 || hl >= 256)
		goto out;
	for (size_t i = 0; i < hl; i++)
		h[i] = (char)tolower((unsigned char)h[i]);
	snprintf(buf, len, "%s:%s", h, port);
	if (host != NULL) {
		/* the bare host: no brackets around IPv6 */
		if (h[0] == '[') {
			h[hl - 1] = '\0';
			snprintf(host, hostlen, "%s", h + 1);
		} else {
			snprintf(host, hostlen, "%s", h);
		}
	}
	rc = 0;
out:
	curl_free(scheme);
	curl_free(h);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
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

/* RFC 7230 tchar */
static int
token_char(unsigned char c)
{
	return isalnum(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

const char *
callback_header_refused(const char *name, const char *value, size_t vlen)
{
	static const char *const framing[] = {"host",
					      "content-length",
					      "transfer-encoding",
					      "connection",
					      "keep-alive",
					      "upgrade",
					      "te",
					      "trailer",
					      "expect",
					      "http2-settings",
					      NULL};

	if (*name == '\0')
		return "is not a header name (an RFC 7230 token)";
	for (const char *p = name; *p; p++)
		if (!token_char((unsigned char)*p))
			return "is not a header name (an RFC 7230 token)";
	for (int i = 0; framing[i]; i++)
		if (!strcasecmp(name, framing[i]))
			return "is set by the notifier's HTTP client (framing "
			       "and hop-by-hop headers are refused)";
	if (!strncasecmp(name, "proxy-", 6))
		return "is set by the notifier's HTTP client (framing "
		       "and hop-by-hop headers are refused)";
	for (size_t i = 0; i < vlen; i++) {
		unsigned char c = (unsigned char)value[i];

		if ((c < ' ' && c != '\t') || c == 0x7f)
			return "has a control character in its value (CR, LF "
			       "and NUL are refused)";
	}
	return NULL;
}

int
callback_spec_sanitize(struct callback_spec *cb, char *first, size_t firstlen)
{
	json_t *keep, *v;
	const char *k;
	int dropped = 0;

	if (firstlen > 0)
		first[0] = '\0';
	if (cb->headers == NULL)
		return 0;
	keep = json_object();
	json_object_foreach (cb->headers, k, v) {
		if (json_is_string(v) &&
		    callback_header_refused(k, json_string_value(v),
					    json_string_length(v)) == NULL) {
			json_object_set(keep, k, v);
			continue;
		}
		if (dropped++ == 0)
			snprintf(first, firstlen, "%s", k);
	}
	json_decref(cb->headers);
	cb->headers = keep;
	return dropped;
}

char **
callback_headers_build(const struct callback_spec *cb, const char *id,
		       int attempt, int64_t due_at, int64_t occurrence,
		       const char *traceparent, const char *tracestate,
		       const struct callback_signing *sign)
{
	size_t n = cb->headers ? json_object_size(cb->headers) : 0, i = 0;
	char **h = xcalloc(n + 11, sizeof(char *));
	int has_ctype = 0, has_idem = 0;
	int body = !strcmp(cb->method, "POST") || !strcmp(cb->method, "PUT") ||
		   !strcmp(cb->method, "PATCH");
	char msg_id[TASK_ID_MAX + 32];
	const char *k;
	json_t *v;

	if (sign != NULL && (sign->keys == NULL || sign->keys->n == 0))
		sign = NULL;
	snprintf(msg_id, sizeof(msg_id), "%s:%lld", id,
		 (long long)(occurrence > 0 ? occurrence : due_at));

	if (cb->headers != NULL) {
		json_object_foreach (cb->headers, k, v) {
			const char *s = json_string_value(v);

			if (s == NULL || !strncasecmp(k, "x-prophet-", 10) ||
			    callback_header_refused(k, s,
						    json_string_length(v)))
				continue;
			if (traceparent != NULL &&
			    (!strcasecmp(k, TRACE_PARENT) ||
			     !strcasecmp(k, TRACE_STATE)))
				continue;
			if (sign != NULL &&
			    (!strcasecmp(k, "webhook-id") ||
			     !strcasecmp(k, "webhook-timestamp") ||
			     !strcasecmp(k, "webhook-signature")))
				continue;
			if (!strcasecmp(k, "content-type"))
				has_ctype = 1;
			if (!strcasecmp(k, "idempotency-key"))
				has_idem = 1;
			h[i++] = xasprintf("%s: %s", k, s);
		}
	}
	if (!has_ctype && strcmp(cb->method, "GET") &&
	    strcmp(cb->method, "DELETE"))
		h[i++] = xstrdup("Content-Type: application/octet-stream");
	h[i++] = xasprintf("X-Prophet-Id: %s", id);
	h[i++] = xasprintf("X-Prophet-Attempt: %d", attempt);
	h[i++] = xasprintf("X-Prophet-Due-At: %lld", (long long)due_at);
	if (!has_idem)
		h[i++] = xasprintf("Idempotency-Key: %s", msg_id);
	if (traceparent != NULL)
		h[i++] = xasprintf("%s: %s", TRACE_PARENT, traceparent);
	if (traceparent != NULL && tracestate != NULL)
		h[i++] = xasprintf("%s: %s", TRACE_STATE, tracestate);
	if (sign != NULL) {
		char *sig = whsign_header(sign->keys, msg_id, sign->timestamp,
					  body ? sign->body : NULL,
					  body ? sign->body_len : 0);

		h[i++] = xasprintf("webhook-id: %s", msg_id);
		h[i++] = xasprintf("webhook-timestamp: %lld",
				   (long long)sign->timestamp);
		h[i++] = xasprintf("webhook-signature: %s", sig);
		xfree(sig);
	}
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

struct canon {
	char *p;
	size_t len, cap;
};

static void
canon_raw(struct canon *c, const void *data, size_t n)
{
	if (c->len + n > c->cap) {
		c->cap = (c->len + n) * 2;
		c->p = xrealloc(c->p, c->cap);
	}
	if (n > 0)
		memcpy(c->p + c->len, data, n);
	c->len += n;
}

/* One field: its length in decimal, ':', its bytes, '\n'. */
static void
canon_add(struct canon *c, const void *data, size_t n)
{
	char num[24];
	int k = snprintf(num, sizeof(num), "%zu:", n);

	canon_raw(c, num, (size_t)k);
	canon_raw(c, data, n);
	canon_raw(c, "\n", 1);
}

static void
canon_str(struct canon *c, const char *s)
{
	canon_add(c, s ? s : "", s ? strlen(s) : 0);
}

static void
canon_int(struct canon *c, long long v)
{
	char num[24];

	snprintf(num, sizeof(num), "%lld", v);
	canon_str(c, num);
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *
callback_retry_canon(const struct callback_retry *r, size_t *len)
{
	struct canon c = {NULL, 0, 0};
	const struct callback_spec *cb = r->cb;
	size_t nh = cb->headers ? json_object_size(cb->headers) : 0, i = 0;
	const char **names = xcalloc(nh + 1, sizeof(*names));
	const char *k;
	json_t *v;

	canon_str(&c, "prophet-retry-v1");
	canon_str(&c, r->id);
	canon_str(&c, r->of);
	canon_str(&c, r->attempt);
	canon_str(&c, r->due_at);
	canon_str(&c, r->topic);
	canon_str(&c, r->occurrence);
	canon_str(&c, cb->url);
	canon_str(&c, cb->method);
	canon_int(&c, cb->timeout_ms);
	canon_int(&c, cb->max_attempts);
	if (cb->headers != NULL)
		json_object_foreach (cb->headers, k, v)
			names[i++] = k;
	qsort(names, nh, sizeof(*names), by_name);
	canon_int(&c, (long long)nh);
	for (i = 0; i < nh; i++) {
		v = json_object_get(cb->headers, names[i]);
		canon_str(&c, names[i]);
		/* a value that is not a string (never signed) is "-", which
		 * no length-prefixed string can be */
		if (json_is_string(v))
			canon_add(&c, json_string_value(v),
				  json_string_length(v));
		else
			canon_raw(&c, "-\n", 2);
	}
	canon_add(&c, r->body, r->body_len);
	xfree(names);
	*len = c.len;
	return c.p;
}

void
callback_retry_sign(const void *key, size_t keylen,
		    const struct callback_retry *r, char *sig, size_t siglen)
{
	unsigned char mac[CRYPTO_SHA256_LEN];
	char hex[2 * CRYPTO_SHA256_LEN + 1];
	size_t len;
	char *canon = callback_retry_canon(r, &len);

	crypto_hmac_sha256(key, keylen, canon, len, mac);
	xfree(canon);
	for (size_t i = 0; i < sizeof(mac); i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	snprintf(sig, siglen, "v1:%s", hex);
}

int
callback_retry_verify(const void *key, size_t keylen,
		      const struct callback_retry *r, const char *sig)
{
	char want[CALLBACK_SIG_LEN + 1];

	if (sig == NULL || strlen(sig) != CALLBACK_SIG_LEN)
		return 0;
	callback_retry_sign(key, keylen, r, want, sizeof(want));
	return crypto_equal(want, sig, CALLBACK_SIG_LEN);
}
