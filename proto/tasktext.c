#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

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

/*
 * A string at r->p (after white space), read as jansson would. Escapes
 * are decoded only when escapes is set (the body, where \u0000 is
 * allowed too); elsewhere a string with escapes is declined.
 */
static int
string(struct rd *r, int escapes, struct str *s)
{
	struct utf8_json_span sp;
	const char *q;

	if (!eat(r, '"'))
		return -1;
	q = utf8_json_scan((const char *)r->p, (const char *)r->end, &sp);
	if (q == NULL || (sp.esc && !escapes))
		return -1;
	r->p = (const unsigned char *)q;
	s->owned = NULL;
	if (sp.esc) {
		s->owned = utf8_json_dup(&sp, &s->n);
		s->s = s->owned;
	} else {
		s->s = sp.p;
		s->n = sp.len;
	}
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
