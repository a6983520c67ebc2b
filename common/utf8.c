#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "utf8.h"
#include "xmalloc.h"

#define REPL_LEN 3

/* RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t
utf8_char_len(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		if (s[0] == 0xe0)
			lo = 0xa0;
		else if (s[0] == 0xed)
			hi = 0x9f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		if (s[0] == 0xf0)
			lo = 0x90;
		else if (s[0] == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

int
utf8_valid(const char *s, size_t n)
{
	size_t i = 0, k;

	while (i < n) {
		if ((k = utf8_char_len(s + i, n - i)) == 0)
			return 0;
		i += k;
	}
	return 1;
}

size_t
utf8_encode(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int
hex4(const char *p, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];

		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

size_t
utf8_json_escape(const char *p, const char *end, uint32_t *cp)
{
	uint32_t lo;

	if (end - p < 5 || hex4(p + 1, cp) < 0)
		return 0;
	if (*cp >= 0xdc00 && *cp <= 0xdfff)
		return 0;
	if (*cp < 0xd800 || *cp > 0xdbff)
		return 5;
	if (end - p < 11 || p[5] != '\\' || p[6] != 'u' ||
	    hex4(p + 7, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
		return 0;
	*cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
	return 11;
}

/* The first byte in [p, end) that ends a JSON string's run of plain
 * characters ('"', '\\', a control character, the first byte of a
 * multi-byte character), or end: sixteen bytes a step where SSE2 is
 * there (a task's body is most of its text). */
static const unsigned char *
json_plain_run(const unsigned char *p, const unsigned char *end)
{
#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
		      space = _mm_set1_epi8(0x20);

	while (end - p >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		/* Signed: bytes from 0x80 up are negative, below 0x20 too. */
		__m128i m =
			_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote),
						  _mm_cmpeq_epi8(v, bslash)),
				     _mm_cmplt_epi8(v, space));
		int mask = _mm_movemask_epi8(m);

		if (mask != 0)
			return p + __builtin_ctz((unsigned)mask);
		p += 16;
	}
#endif
	while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
		p++;
	return p;
}

const char *
utf8_json_scan(const char *start, const char *end, struct utf8_json_span *sp)
{
	const unsigned char *p = (const unsigned char *)start;
	const unsigned char *e = (const unsigned char *)end;
	uint32_t cp;
	size_t k;

	sp->p = start;
	sp->esc = 0;
	sp->nul = 0;
	for (;;) {
		p = json_plain_run(p, e);
		if (p == e)
			return NULL;
		if (*p == '"')
			break;
		if (*p >= 0x80) {
			k = utf8_char_len((const char *)p, (size_t)(e - p));
			if (k == 0)
				return NULL;
			p += k;
			continue;
		}
		if (*p != '\\' || e - p < 2)
			return NULL; /* a control character */
		sp->esc = 1;
		p++;
		switch (*p) {
		case '"':
		case '\\':
		case '/':
		case 'b':
		case 'f':
		case 'n':
		case 'r':
		case 't': p++; break;
		case 'u':
			k = utf8_json_escape((const char *)p, end, &cp);
			if (k == 0)
				return NULL;
			if (cp == 0)
				sp->nul = 1;
			p += k;
			break;
		default: return NULL;
		}
	}
	sp->len = (size_t)((const char *)p - start);
	return (const char *)p + 1;
}

size_t
utf8_json_unescape(const struct utf8_json_span *sp, char *o)
{
	const char *p = sp->p;
	const char *end = p + sp->len;
	char *start = o;
	uint32_t cp;

	if (!sp->esc) {
		memcpy(o, p, sp->len);
		o[sp->len] = '\0';
		return sp->len;
	}
	while (p < end) {
		const char *q = memchr(p, '\\', (size_t)(end - p));
		size_t n = q ? (size_t)(q - p) : (size_t)(end - p);

		memcpy(o, p, n);
		o += n;
		p += n;
		if (p == end)
			break;
		p++;
		switch (*p) {
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u':
			p += utf8_json_escape(p, end, &cp) - 1;
			o += utf8_encode(o, cp);
			break;
		default: *o++ = *p; break; /* '"', '\\', '/' */
		}
		p++;
	}
	*o = '\0';
	return (size_t)(o - start);
}

char *
utf8_json_dup(const struct utf8_json_span *sp, size_t *lenp)
{
	char *s = xmalloc(sp->len + 1);
	size_t n = utf8_json_unescape(sp, s);

	if (lenp != NULL)
		*lenp = n;
	return s;
}

size_t
utf8_copy(char *dst, size_t cap, const char *s, size_t n)
{
	size_t i = 0, o = 0, k;

	if (cap == 0)
		return 0;
	while (i < n) {
		const char *from = s + i;

		k = utf8_char_len(s + i, n - i);
		if (k == 0 || (k == 1 && s[i] == '\0')) {
			from = UTF8_REPLACEMENT;
			i++;
			k = REPL_LEN;
		} else {
			i += k;
		}
		if (o + k >= cap)
			break;
		memcpy(dst + o, from, k);
		o += k;
	}
	dst[o] = '\0';
	return o;
}

void
utf8_vformat(char *dst, size_t cap, const char *fmt, va_list ap)
{
	char tmp[1024], *buf = tmp;
	va_list aq;
	int len;

	va_copy(aq, ap);
	len = vsnprintf(tmp, sizeof(tmp), fmt, aq);
	va_end(aq);
	if (len < 0)
		len = 0;
	if ((size_t)len >= sizeof(tmp)) {
		/* Only what can reach dst is worth formatting. */
		size_t room = cap < (size_t)len + 1 ? cap : (size_t)len + 1;

		buf = xmalloc(room);
		vsnprintf(buf, room, fmt, ap);
		len = (int)strlen(buf);
	}
	utf8_copy(dst, cap, buf, (size_t)len);
	if (buf != tmp)
		xfree(buf);
}

void
utf8_format(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	utf8_vformat(dst, cap, fmt, ap);
	va_end(ap);
}

json_t *
utf8_json(const char *s, size_t n)
{
	json_t *j;
	char *buf;
	size_t i = 0, o = 0, k;

	if (s == NULL)
		return json_string("");
	if (utf8_valid(s, n) && (j = json_stringn(s, n)) != NULL)
		return j;
	buf = xmalloc(n * REPL_LEN + 1);
	while (i < n) {
		k = utf8_char_len(s + i, n - i);
		if (k == 0) {
			memcpy(buf + o, UTF8_REPLACEMENT, REPL_LEN);
			o += REPL_LEN;
			i++;
		} else {
			memcpy(buf + o, s + i, k);
			o += k;
			i += k;
		}
	}
	j = json_stringn(buf, o);
	xfree(buf);
	return j != NULL ? j : json_string("");
}

json_t *
utf8_json_str(const char *s)
{
	return utf8_json(s, s != NULL ? strlen(s) : 0);
}
