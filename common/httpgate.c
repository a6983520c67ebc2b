#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>
#include <strings.h>

#include "httpgate.h"

/* Content-Length with more digits than this is refused (413 anyway). */
#define CL_DIGITS_MAX 18

static const char *const methods[] = {"GET",	"HEAD",	 "POST",    "PUT",
				      "DELETE", "PATCH", "OPTIONS", "CONNECT",
				      "TRACE",	NULL};

size_t
httpgate_head_end(const char *buf, size_t n, size_t *from)
{
	size_t i = *from;

	for (; i < n; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < n && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < n && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
		if (i + 2 >= n)
			break; /* the blank line may still be coming */
	}
	*from = i;
	return 0;
}

static int
fail(struct httpgate_error *err, int status, const char *code,
     const char *message)
{
	err->status = status;
	err->code = code;
	err->message = message;
	return -1;
}

/* RFC 9110 tchar, as a table: every header name's bytes pass it. */
static const unsigned char tchar[256] = {
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
	['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
	['`'] = 1, ['|'] = 1, ['~'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1,
	['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
	['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,
	['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1,
	['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1,
	['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1,
	['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,
	['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
	['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1,
	['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
	['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static int
is_tchar(unsigned char c)
{
	return tchar[c];
}

/* Whether a comma-separated list value holds token tok. */
static int
list_has(const char *s, size_t len, const char *tok)
{
	size_t tl = strlen(tok), i = 0;

	while (i < len) {
		size_t b, e;

		while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == ','))
			i++;
		b = i;
		while (i < len && s[i] != ',')
			i++;
		e = i;
		while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
			e--;
		if (e - b == tl && strncasecmp(s + b, tok, tl) == 0)
			return 1;
	}
	return 0;
}

static int
name_is(const char *name, size_t len, const char *want)
{
	return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

/* The request line: METHOD SP request-target SP HTTP/1.x */
static int
parse_request_line(const char *s, size_t len, struct httpgate_head *h,
		   struct httpgate_error *err)
{
	const char *sp1 = memchr(s, ' ', len), *sp2, *ver;
	size_t mlen, vlen;
	int known = 0;

	if (sp1 == NULL)
		return fail(err, 400, "bad_request",
			    "the request line is not METHOD target HTTP/1.x");
	mlen = (size_t)(sp1 - s);
	if (mlen == 0 || mlen > HTTPGATE_METHOD_MAX)
		return fail(err, 400, "bad_request", "bad method");
	for (size_t i = 0; i < mlen; i++)
		if (!is_tchar((unsigned char)s[i]))
			return fail(err, 400, "bad_request", "bad method");
	memcpy(h->method, s, mlen);
	h->method[mlen] = '\0';
	sp2 = memchr(sp1 + 1, ' ', len - mlen - 1);
	if (sp2 == NULL || sp2 == sp1 + 1)
		return fail(err, 400, "bad_request",
			    "the request line is not METHOD target HTTP/1.x");
	h->target = sp1 + 1;
	h->target_len = (size_t)(sp2 - h->target);
	for (size_t i = 0; i < h->target_len; i++) {
		unsigned char c = (unsigned char)h->target[i];

		/* Raw spaces, controls and bytes above 0x7e have to be
		 * percent-encoded in a request-target. */
		if (c <= 0x20 || c >= 0x7f)
			return fail(err, 400, "bad_request",
				    "the request target has bytes that must be "
				    "percent-encoded");
	}
	ver = sp2 + 1;
	vlen = len - (size_t)(ver - s);
	if (vlen == 8 && !memcmp(ver, "HTTP/1.", 7) &&
	    (ver[7] == '0' || ver[7] == '1')) {
		h->minor = ver[7] - '0';
	} else if (vlen == 8 && !memcmp(ver, "HTTP/", 5) && ver[5] >= '0' &&
		   ver[5] <= '9' && ver[6] == '.' && ver[7] >= '0' &&
		   ver[7] <= '9') {
		return fail(err, 505, "http_version_not_supported",
			    "only HTTP/1.0 and HTTP/1.1 are served");
	} else {
		return fail(err, 400, "bad_request",
			    "the request line is not METHOD target HTTP/1.x");
	}
	for (int i = 0; methods[i] != NULL; i++)
		if (!strcmp(h->method, methods[i]))
			known = 1;
	if (!known)
		return fail(err, 501, "not_implemented", "unknown method");
	if (h->target[0] == '/') {
		h->path = h->target;
	} else if (h->target_len > 7 &&
		   (!strncasecmp(h->target, "http://", 7) ||
		    (h->target_len > 8 &&
		     !strncasecmp(h->target, "https://", 8)))) {
		const char *auth = strstr(h->target, "//") + 2;
		const char *end = h->target + h->target_len;

		h->path = memchr(auth, '/', (size_t)(end - auth));
		if (h->path == NULL)
			h->path = end; /* empty path: "/" */
	} else {
		return fail(err, 400, "bad_request",
			    "the request target must be a path");
	}
	h->path_len = 0;
	while (h->path + h->path_len < h->target + h->target_len &&
	       h->path[h->path_len] != '?' && h->path[h->path_len] != '#')
		h->path_len++;
	return 0;
}

static int
parse_content_length(const char *v, size_t len, struct httpgate_head *h,
		     struct httpgate_error *err)
{
	int64_t n = 0;

	if (h->content_length >= 0)
		return fail(err, 400, "bad_request",
			    "more than one Content-Length");
	if (len == 0)
		return fail(err, 400, "bad_request", "bad Content-Length");
	if (len > CL_DIGITS_MAX)
		return fail(err, 413, "too_large",
			    "the body is larger than this server takes");
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return fail(err, 400, "bad_request",
				    "bad Content-Length");
		n = n * 10 + (v[i] - '0');
	}
	h->content_length = n;
	return 0;
}

/* One header line (without its end of line). */
static int
parse_header(const char *s, size_t len, struct httpgate_head *h,
	     struct httpgate_error *err)
{
	const char *colon = memchr(s, ':', len);
	size_t nlen, vb, ve;
	const char *v;

	if (s[0] == ' ' || s[0] == '\t')
		return fail(err, 400, "bad_request",
			    "folded header lines are not accepted");
	if (colon == NULL || colon == s)
		return fail(err, 400, "bad_request",
			    "a header line has no name");
	nlen = (size_t)(colon - s);
	for (size_t i = 0; i < nlen; i++)
		if (!is_tchar((unsigned char)s[i]))
			return fail(err, 400, "bad_request", "bad header name");
	vb = nlen + 1;
	ve = len;
	for (size_t i = vb; i < ve; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return fail(err, 400, "bad_request",
				    "a header value has control characters");
	}
	while (vb < ve && (s[vb] == ' ' || s[vb] == '\t'))
		vb++;
	while (ve > vb && (s[ve - 1] == ' ' || s[ve - 1] == '\t'))
		ve--;
	v = s + vb;
	if (name_is(s, nlen, "Content-Length"))
		return parse_content_length(v, ve - vb, h, err);
	if (name_is(s, nlen, "Transfer-Encoding")) {
		if (list_has(v, ve - vb, "chunked"))
			return fail(err, 411, "length_required",
				    "send the body with a Content-Length "
				    "(chunked bodies are not accepted)");
		return fail(err, 501, "not_implemented",
			    "Transfer-Encoding is not supported");
	}
	if (name_is(s, nlen, "Expect")) {
		if (ve - vb != 12 || strncasecmp(v, "100-continue", 12))
			return fail(err, 417, "expectation_failed",
				    "only Expect: 100-continue is understood");
		return 0;
	}
	if (name_is(s, nlen, "Connection")) {
		if (list_has(v, ve - vb, "close"))
			h->close = 1;
		else if (h->minor == 0 && list_has(v, ve - vb, "keep-alive"))
			h->close = 0;
		return 0;
	}
	/* Each of these decides who may do what (the token, the
	 * cross-site and DNS rebinding checks) or how the body is read;
	 * given twice, a proxy or an audit log reading one would see
	 * another request than the one served (RFC 9110: none is a list;
	 * RFC 9112 3.2: two Hosts are a 400). */
#define ONLY_ONE(hdr, field)                                         \
	if (name_is(s, nlen, hdr)) {                                 \
		if (h->field.s != NULL)                              \
			return fail(err, 400, "bad_request",         \
				    "more than one " hdr " header"); \
		h->field.s = v;                                      \
		h->field.len = ve - vb;                              \
		return 0;                                            \
	}
	ONLY_ONE("Authorization", authorization)
	ONLY_ONE("Content-Type", content_type)
	ONLY_ONE("Origin", origin)
	ONLY_ONE("Sec-Fetch-Site", sec_fetch_site)
	ONLY_ONE("Host", host)
#undef ONLY_ONE
	return 0;
}

int
httpgate_parse(const char *buf, size_t n, struct httpgate_head *h,
	       struct httpgate_error *err)
{
	size_t i = 0;
	int first = 1;

	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	h->len = n;
	while (i < n) {
		const char *nl = memchr(buf + i, '\n', n - i);
		size_t len, end;

		if (nl == NULL)
			return fail(err, 400, "bad_request",
				    "the request head is incomplete");
		end = (size_t)(nl - buf);
		len = end - i;
		if (len > 0 && buf[end - 1] == '\r')
			len--;
		if (memchr(buf + i, '\r', len) != NULL ||
		    memchr(buf + i, '\0', len) != NULL)
			return fail(err, 400, "bad_request",
				    "stray CR or NUL in the request head");
		if (len == 0) {
			if (first)
				return fail(err, 400, "bad_request",
					    "no request line");
			break; /* the blank line */
		}
		if (first) {
			if (parse_request_line(buf + i, len, h, err) < 0)
				return -1;
			/* HTTP/1.0 closes unless it asks to keep alive. */
			h->close = h->minor == 0;
			first = 0;
		} else if (parse_header(buf + i, len, h, err) < 0) {
			return -1;
		}
		i = end + 1;
	}
	if (first)
		return fail(err, 400, "bad_request", "no request line");
	if (h->content_length > 0 && !httpgate_method_has_body(h->method))
		return fail(err, 400, "bad_request",
			    "a HEAD request cannot carry a body");
	return 0;
}

int
httpgate_method_has_body(const char *method)
{
	return strcmp(method, "HEAD") != 0 && strcmp(method, "TRACE") != 0;
}
