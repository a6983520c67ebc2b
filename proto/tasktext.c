#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "task.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * The submission hot path (task.h): the common shape of a task read
 * straight from its JSON text, without building a jansson tree and
 * walking it. It only ever says yes to a text that jansson would parse
 * (RFC 8259 with jansson's flags: duplicate names refused, U+0000 only
 * where task_from_json allows it) and that task_from_json would accept
 * with the same result; everything else, every error included, is
 * declined and takes the jansson path, which answers as before. The
 * unit test holds the two against each other on mutated documents.
 */

enum field {
	F_ID,
	F_TOPIC,
	F_BODY,
	F_DUE_AT,
	F_DELAY_MS,
	F_KEY,
	F_MAX_ATTEMPTS,
	F_TTL_MS,
	F__COUNT
};

static const struct {
	const char *name;
	size_t len;
	int is_string;
} fields[F__COUNT] = {
	{"id", 2, 1},
	{"topic", 5, 1},
	{"body", 4, 1},
	{"due_at", 6, 0},
	{"delay_ms", 8, 0},
	{"key", 3, 1},
	{"max_attempts", 12, 0},
	{"ttl_ms", 6, 0},
};

struct rd {
	const unsigned char *p, *end;
};

/* A string value: s and n point into the text, or into owned (decoded
 * escapes). */
struct str {
	const char *s;
	size_t n;
	char *owned;
};

static void
ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' ||
				 *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int
eat(struct rd *r, unsigned char c)
{
	ws(r);
	if (r->p < r->end && *r->p == c) {
		r->p++;
		return 1;
	}
	return 0;
}

/* The escapes of a string whose raw text is [p, q) (q at the closing
 * quote), decoded into s->owned; U+0000 only if allow_nul. */
static int
unescape(const unsigned char *p, const unsigned char *q, int allow_nul,
	 struct str *s)
{
	char *o = xmalloc((size_t)(q - p) + 1);
	size_t n = 0, k;
	uint32_t cp;

	while (p < q) {
		if (*p < 0x80 && *p != '\\') {
			o[n++] = (char)*p++;
			continue;
		}
		if (*p != '\\') {
			k = utf8_char_len((const char *)p, (size_t)(q - p));
			memcpy(o + n, p, k); /* k > 0: checked by the scan */
			n += k;
			p += k;
			continue;
		}
		switch (p[1]) {
		case '"':
		case '\\':
		case '/': o[n++] = (char)p[1]; break;
		case 'b': o[n++] = '\b'; break;
		case 'f': o[n++] = '\f'; break;
		case 'n': o[n++] = '\n'; break;
		case 'r': o[n++] = '\r'; break;
		case 't': o[n++] = '\t'; break;
		case 'u':
			k = utf8_json_escape((const char *)p + 1,
					     (const char *)q, &cp);
			if (k == 0 || (cp == 0 && !allow_nul))
				goto bad;
			n += utf8_encode(o + n, cp);
			p += 1 + k;
			continue;
		default: goto bad;
		}
		p += 2;
	}
	o[n] = '\0';
	s->owned = o;
	s->s = o;
	s->n = n;
	return 0;
bad:
	xfree(o);
	return -1;
}

/* Whether a byte ends a string's run of plain characters: '"', '\\', a
 * control character or the first byte of a multi-byte character. */
static int
special(unsigned char c)
{
	return c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
}

/* The first special byte in [p, end), or end: sixteen bytes a step where
 * SSE2 is there (a body is most of a task's text). */
static const unsigned char *
plain_run(const unsigned char *p, const unsigned char *end)
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
	while (p < end && !special(*p))
		p++;
	return p;
}

/*
 * A string at r->p (after white space). Escapes are decoded only when
 * escapes is set (the body); elsewhere they are declined, as are control
 * characters and bytes that are not UTF-8 (jansson refuses those).
 */
static int
string(struct rd *r, int escapes, struct str *s)
{
	const unsigned char *p, *start;
	int escaped = 0;
	size_t k;

	if (!eat(r, '"'))
		return -1;
	start = p = r->p;
	for (;;) {
		p = plain_run(p, r->end);
		if (p >= r->end || *p < 0x20)
			return -1;
		if (*p == '"')
			break;
		if (*p == '\\') {
			if (!escapes || r->end - p < 2)
				return -1;
			escaped = 1;
			p += 2;
		} else {
			k = utf8_char_len((const char *)p,
					  (size_t)(r->end - p));
			if (k == 0)
				return -1;
			p += k;
		}
	}
	r->p = p + 1;
	s->owned = NULL;
	if (escaped)
		return unescape(start, p, 1, s);
	s->s = (const char *)start;
	s->n = (size_t)(p - start);
	return 0;
}

/* An integer in int64 range without fraction or exponent (those, and 19
 * digits or more, are declined). */
static int
integer(struct rd *r, int64_t *out)
{
	const unsigned char *p;
	int neg = 0, digits = 0;
	int64_t v = 0;

	ws(r);
	p = r->p;
	if (p < r->end && *p == '-') {
		neg = 1;
		p++;
	}
	if (p < r->end && *p == '0' && p + 1 < r->end && p[1] >= '0' &&
	    p[1] <= '9')
		return -1;
	while (p < r->end && *p >= '0' && *p <= '9') {
		if (++digits > 18)
			return -1;
		v = v * 10 + (*p - '0');
		p++;
	}
	if (digits == 0 ||
	    (p < r->end && (*p == '.' || *p == 'e' || *p == 'E')))
		return -1;
	r->p = p;
	*out = neg ? -v : v;
	return 0;
}

static enum field
field_of(const struct str *k)
{
	for (int i = 0; i < F__COUNT; i++)
		if (k->n == fields[i].len &&
		    !memcmp(k->s, fields[i].name, k->n))
			return (enum field)i;
	return F__COUNT;
}

/* One task object at r->p; 0 with t filled, -1 declined (t cleared). */
static int
object(struct rd *r, const struct task_limits *lim, int64_t now_ms,
       const char *default_id, struct task *t)
{
	struct str sv[F__COUNT];
	int64_t iv[F__COUNT];
	unsigned seen = 0;
	struct str k;
	enum field f;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	memset(sv, 0, sizeof(sv));
	if (!eat(r, '{'))
		return -1;
	if (!eat(r, '}')) {
		do {
			if (string(r, 0, &k) < 0 ||
			    (f = field_of(&k)) == F__COUNT ||
			    (seen & (1u << f)) || !eat(r, ':'))
				goto out;
			seen |= 1u << f;
			if (fields[f].is_string) {
				ws(r);
				if (string(r, f == F_BODY, &sv[f]) < 0)
					goto out;
			} else if (integer(r, &iv[f]) < 0) {
				goto out;
			}
		} while (eat(r, ','));
		if (!eat(r, '}'))
			goto out;
	}

	/* What task_from_json accepts, in its order; anything else is
	 * declined for it to answer. */
	if (seen & (1u << F_ID)) {
		if (!task_id_valid(sv[F_ID].s, sv[F_ID].n))
			goto out;
		memcpy(t->id, sv[F_ID].s, sv[F_ID].n);
		t->id[sv[F_ID].n] = '\0';
		t->id_given = 1;
	} else if (default_id != NULL) {
		if (!task_id_valid(default_id, strlen(default_id)))
			goto out;
		memcpy(t->id, default_id, strlen(default_id) + 1);
		t->id_given = 1;
	} else {
		task_id_generate(t->id, now_ms);
	}
	if (!(seen & (1u << F_TOPIC)) ||
	    !task_topic_valid(sv[F_TOPIC].s, sv[F_TOPIC].n))
		goto out;
	if (!(seen & (1u << F_BODY)) || sv[F_BODY].n > lim->max_body)
		goto out;
	if (seen & (1u << F_DUE_AT)) {
		if ((seen & (1u << F_DELAY_MS)) || iv[F_DUE_AT] < 0 ||
		    iv[F_DUE_AT] > INT64_MAX / 2 ||
		    iv[F_DUE_AT] > now_ms + lim->max_delay_ms)
			goto out;
		t->due_at = iv[F_DUE_AT];
		t->delay_ms = -1;
	} else if (seen & (1u << F_DELAY_MS)) {
		if (iv[F_DELAY_MS] < 0 || iv[F_DELAY_MS] > lim->max_delay_ms)
			goto out;
		t->delay_ms = iv[F_DELAY_MS];
		t->due_at = now_ms + iv[F_DELAY_MS];
	} else {
		goto out;
	}
	if ((seen & (1u << F_KEY)) &&
	    (sv[F_KEY].n < 1 || sv[F_KEY].n > TASK_KEY_MAX))
		goto out;
	if ((seen & (1u << F_MAX_ATTEMPTS)) &&
	    (iv[F_MAX_ATTEMPTS] < 1 || iv[F_MAX_ATTEMPTS] > 100))
		goto out;
	if ((seen & (1u << F_TTL_MS)) &&
	    (iv[F_TTL_MS] < 0 || iv[F_TTL_MS] > lim->max_delay_ms))
		goto out;

	t->topic = xmalloc(sv[F_TOPIC].n + 1);
	memcpy(t->topic, sv[F_TOPIC].s, sv[F_TOPIC].n);
	t->topic[sv[F_TOPIC].n] = '\0';
	t->body_len = sv[F_BODY].n;
	if (sv[F_BODY].owned != NULL) {
		t->body = sv[F_BODY].owned;
		sv[F_BODY].owned = NULL;
	} else {
		t->body = xmalloc(t->body_len + 1);
		memcpy(t->body, sv[F_BODY].s, t->body_len);
		t->body[t->body_len] = '\0';
	}
	if (seen & (1u << F_KEY)) {
		t->key = xmalloc(sv[F_KEY].n + 1);
		memcpy(t->key, sv[F_KEY].s, sv[F_KEY].n);
		t->key[sv[F_KEY].n] = '\0';
	}
	t->max_attempts =
		(seen & (1u << F_MAX_ATTEMPTS)) ? (int)iv[F_MAX_ATTEMPTS] : 0;
	t->ttl_ms = (seen & (1u << F_TTL_MS)) ? iv[F_TTL_MS] : 0;
	t->content_hash = task_content_hash(t);
	t->status = TASK_SCHEDULED;
	t->created_at = t->updated_at = now_ms;
	rc = 0;
out:
	xfree(sv[F_BODY].owned);
	if (rc < 0)
		task_clear(t);
	return rc;
}

int
task_from_text(const char *text, size_t len, const struct task_limits *lim,
	       int64_t now_ms, const char *default_id, struct task *t)
{
	struct rd r = {(const unsigned char *)text,
		       (const unsigned char *)text + len};

	if (object(&r, lim, now_ms, default_id, t) < 0)
		return 0;
	ws(&r);
	if (r.p != r.end) {
		task_clear(t);
		return 0;
	}
	return 1;
}

size_t
task_batch_from_text(const char *text, size_t len,
		     const struct task_limits *lim, int64_t now_ms,
		     size_t max_tasks, struct task **out)
{
	struct rd r = {(const unsigned char *)text,
		       (const unsigned char *)text + len};
	struct task *ts = NULL;
	size_t n = 0, cap = 0;
	struct str k;

	*out = NULL;
	if (!eat(&r, '{') || string(&r, 0, &k) < 0 || k.n != 5 ||
	    memcmp(k.s, "tasks", 5) || !eat(&r, ':') || !eat(&r, '['))
		return 0;
	do {
		if (n == max_tasks)
			goto decline;
		if (n == cap) {
			cap = cap ? cap * 2 : 128;
			if (cap > max_tasks)
				cap = max_tasks;
			ts = xrealloc(ts, cap * sizeof(*ts));
		}
		if (object(&r, lim, now_ms, NULL, &ts[n]) < 0)
			goto decline;
		n++;
	} while (eat(&r, ','));
	if (!eat(&r, ']') || !eat(&r, '}'))
		goto decline;
	ws(&r);
	if (r.p != r.end)
		goto decline;
	*out = ts;
	return n;
decline:
	for (size_t i = 0; i < n; i++)
		task_clear(&ts[i]);
	xfree(ts);
	return 0;
}
