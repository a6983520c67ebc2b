#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload.h"
#include "rows.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Both directions are written out by hand: building a jansson tree was
 * most of the cost of submitting and of firing a task. The bytes are
 * exactly what json_dumps(JSON_COMPACT) wrote for the same members, and
 * the decoder accepts and rejects exactly what json_loadb did.
 */

/* Encoder ------------------------------------------------------------ */

struct obuf {
	char *p;
	size_t len;
	size_t cap;
};

static void
ob_reserve(struct obuf *b, size_t n)
{
	if (b->len + n <= b->cap)
		return;
	while (b->cap < b->len + n)
		b->cap *= 2;
	b->p = xrealloc(b->p, b->cap);
}

/* 1 for the bytes a JSON string holds as they are: not '"', '\\', a
 * control character or part of a UTF-8 sequence. */
static const unsigned char str_plain[256] = {
	[0x20 ... 0x21] = 1,
	[0x23 ... 0x5b] = 1,
	[0x5d ... 0x7f] = 1,
};

/* The letter after the backslash escaping c ('u': \u00XX). */
static char
esc_letter(unsigned c)
{
	switch (c) {
	case '"': return '"';
	case '\\': return '\\';
	case '\b': return 'b';
	case '\f': return 'f';
	case '\n': return 'n';
	case '\r': return 'r';
	case '\t': return 't';
	default: return 'u';
	}
}

/* Appends s as a JSON string the way jansson dumps it (control
 * characters as \u00XX in upper case, nothing else escaped); -1 when s
 * is not UTF-8, which jansson refused to hold in a string. */
static int
ob_str(struct obuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p = (const unsigned char *)s;
	const unsigned char *end = p + n;
	char *o;

	ob_reserve(b, n + 2);
	o = b->p + b->len;
	*o++ = '"';
	for (;;) {
		unsigned c;
		size_t k;

		while (p < end && str_plain[*p])
			*o++ = (char)*p++;
		if (p == end)
			break;
		c = *p;
		if (c >= 0x80) {
			k = utf8_char_len((const char *)p, (size_t)(end - p));
			if (k == 0)
				return -1;
			memcpy(o, p, k);
			o += k;
			p += k;
			continue;
		}
		/* Room for the longest escape beside what is left. */
		b->len = (size_t)(o - b->p);
		ob_reserve(b, 6 + (size_t)(end - p) + 1);
		o = b->p + b->len;
		*o++ = '\\';
		*o++ = esc_letter(c);
		if (o[-1] == 'u') {
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
		p++;
	}
	*o++ = '"';
	b->len = (size_t)(o - b->p);
	return 0;
}

static void
ob_int(struct obuf *b, int64_t v)
{
	char tmp[24];
	char *q = tmp + sizeof(tmp);
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	do {
		*--q = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--q = '-';
	ob_reserve(b, sizeof(tmp));
	memcpy(b->p + b->len, q, (size_t)(tmp + sizeof(tmp) - q));
	b->len += (size_t)(tmp + sizeof(tmp) - q);
}

/* Opens member k ("k": after a comma unless it is the first). */
static void
ob_key(struct obuf *b, char k)
{
	ob_reserve(b, 5);
	if (b->len > 1)
		b->p[b->len++] = ',';
	b->p[b->len++] = '"';
	b->p[b->len++] = k;
	b->p[b->len++] = '"';
	b->p[b->len++] = ':';
}

/* A string member; like a json_string() that failed, a NULL or non-UTF-8
 * value leaves the member out. */
static void
ob_str_member(struct obuf *b, char k, const char *s, size_t n)
{
	size_t mark = b->len;

	if (s == NULL)
		return;
	ob_key(b, k);
	if (ob_str(b, s, n) < 0)
		b->len = mark;
}

static void
ob_int_member(struct obuf *b, char k, int64_t v)
{
	ob_key(b, k);
	ob_int(b, v);
}

/* The rare object members go through jansson, as they did nested. */
static void
ob_json_member(struct obuf *b, char k, const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n;

	if (s == NULL)
		abort();
	n = strlen(s);
	ob_key(b, k);
	ob_reserve(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	free(s);
}

char *
payload_encode(const struct task *t, size_t *lenp)
{
	struct obuf b;

	b.cap = 64 + t->body_len + t->body_len / 8 +
		(t->topic ? strlen(t->topic) : 0) +
		(t->key ? strlen(t->key) : 0);
	b.p = xmalloc(b.cap);
	b.p[0] = '{';
	b.len = 1;
	if (t->topic != NULL)
		ob_str_member(&b, 't', t->topic, strlen(t->topic));
	ob_str_member(&b, 'b', t->body, t->body_len);
	ob_int_member(&b, 'd', t->due_at);
	if (t->key != NULL)
		ob_str_member(&b, 'k', t->key, strlen(t->key));
	if (t->headers != NULL)
		ob_json_member(&b, 'h', t->headers);
	if (t->ttl_ms > 0)
		ob_int_member(&b, 'x', t->ttl_ms);
	if (t->attempt > 0)
		ob_int_member(&b, 'a', t->attempt);
	if (t->misfire != TASK_MISFIRE_NONE) {
		const char *m = task_misfire_name(t->misfire);

		ob_str_member(&b, 'm', m, strlen(m));
	}
	if (t->callback != NULL)
		ob_json_member(&b, 'c', t->callback);
	if (t->max_attempts > 0)
		ob_int_member(&b, 'n', t->max_attempts);
	ob_reserve(&b, 2);
	b.p[b.len++] = '}';
	b.p[b.len] = '\0';
	*lenp = b.len;
	return b.p;
}

/* Decoder ------------------------------------------------------------ */

/* The raw text of a string between its quotes. */
enum vtype { V_ABSENT, V_STR, V_INT, V_OBJ, V_OTHER };

/* The last value of one key (jansson kept the last of duplicates). */
struct member {
	enum vtype type;
	struct utf8_json_span s;
	int64_t i;
	json_t *j; /* V_OBJ */
};

/* The members known, in the order of enum payload_key. */
static const char member_keys[] = "tbdkhxamcn";

enum payload_key { K_T, K_B, K_D, K_K, K_H, K_X, K_A, K_M, K_C, K_N, K__N };

struct parser {
	const char *p;
	const char *end;
	int slow; /* left to jansson (payload_decode_tree) */
};

static void
skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' ||
				   *ps->p == '\r' || *ps->p == '\t'))
		ps->p++;
}

/* Reads a string whose opening quote is just behind ps->p. */
static int
scan_string(struct parser *ps, struct utf8_json_span *sp)
{
	const char *q = utf8_json_scan(ps->p, ps->end, sp);

	if (q == NULL)
		return -1;
	ps->p = q;
	return 0;
}

/* Which member a key names, or -1. */
static int
member_index(const struct utf8_json_span *key)
{
	char buf[16];
	const char *k;

	if (!key->esc) {
		if (key->len != 1)
			return -1;
		k = key->p;
	} else {
		/* One character is at most a 12-byte surrogate pair. */
		if (key->len > 12 || utf8_json_unescape(key, buf) != 1)
			return -1;
		k = buf;
	}
	k = memchr(member_keys, *k, K__N);
	return k ? (int)(k - member_keys) : -1;
}

/* An integer as strtoll read it; a real number is left to jansson. */
static int
scan_number(struct parser *ps, int64_t *v)
{
	const char *p = ps->p;
	const char *end = ps->end;
	uint64_t u = 0;
	int neg = 0, digits = 0;

	if (*p == '-') {
		neg = 1;
		p++;
	}
	if (p == end || *p < '0' || *p > '9')
		return -1;
	if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9')
		return -1;
	while (p < end && *p >= '0' && *p <= '9') {
		if (digits++ < 19)
			u = u * 10 + (uint64_t)(*p - '0');
		p++;
	}
	if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) {
		ps->slow = 1;
		return -1;
	}
	if (digits > 19 || u > (uint64_t)INT64_MAX + (uint64_t)neg)
		return -1;
	/* -(u - 1) - 1 reaches INT64_MIN without overflowing. */
	*v = neg && u > 0 ? -(int64_t)(u - 1) - 1 : (int64_t)u;
	ps->p = p;
	return 0;
}

/* The depth jansson's parser counts for v: one per level of values,
 * scalars included. */
static size_t
json_depth(json_t *v)
{
	size_t d = 0, i;
	const char *k;
	json_t *e;

	if (json_is_object(v)) {
		json_object_foreach (v, k, e) {
			size_t n = json_depth(e);

			d = n > d ? n : d;
		}
	} else if (json_is_array(v)) {
		json_array_foreach (v, i, e) {
			size_t n = json_depth(e);

			d = n > d ? n : d;
		}
	}
	return d + 1;
}

/* An object or array, read by jansson where it starts; one level deeper
 * than jansson counts it alone, which matters only at its depth limit. */
static int
scan_compound(struct parser *ps, json_t **out)
{
	size_t n = (size_t)(ps->end - ps->p);
	json_error_t jerr;
	json_t *v;

	v = json_loadb(ps->p, n, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL,
		       &jerr);
	if (v == NULL)
		return -1;
	/* Every level takes a byte: only long text can be that deep. */
	if (jerr.position <= 0 || (size_t)jerr.position > n ||
	    ((size_t)jerr.position >= JSON_PARSER_MAX_DEPTH &&
	     json_depth(v) >= JSON_PARSER_MAX_DEPTH)) {
		json_decref(v);
		return -1;
	}
	ps->p += jerr.position;
	*out = v;
	return 0;
}

static int
literal(struct parser *ps, const char *word, size_t n)
{
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return -1;
	ps->p += n;
	return 0;
}

/* Reads a value into m, replacing what m held. */
static int
scan_value(struct parser *ps, struct member *m)
{
	json_t *j = NULL;

	json_decref(m->j);
	m->j = NULL;
	m->type = V_OTHER;
	if (ps->p == ps->end)
		return -1;
	switch (*ps->p) {
	case '"':
		ps->p++;
		m->type = V_STR;
		return scan_string(ps, &m->s);
	case '{':
	case '[':
		if (scan_compound(ps, &j) < 0)
			return -1;
		if (json_is_object(j)) {
			m->type = V_OBJ;
			m->j = j;
		} else {
			json_decref(j);
		}
		return 0;
	case 't': return literal(ps, "true", 4);
	case 'f': return literal(ps, "false", 5);
	case 'n': return literal(ps, "null", 4);
	default: m->type = V_INT; return scan_number(ps, &m->i);
	}
}

static int
scan_object(struct parser *ps, struct member *m)
{
	struct member other = {0};
	struct utf8_json_span key;
	int k, rc = -1;

	skip_ws(ps);
	if (ps->p == ps->end || *ps->p != '{')
		return -1;
	ps->p++;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '}')
		goto close;
	for (;;) {
		if (ps->p == ps->end || *ps->p != '"')
			goto out;
		ps->p++;
		if (scan_string(ps, &key) < 0 || key.nul)
			goto out;
		k = member_index(&key);
		skip_ws(ps);
		if (ps->p == ps->end || *ps->p != ':')
			goto out;
		ps->p++;
		skip_ws(ps);
		if (scan_value(ps, k >= 0 ? &m[k] : &other) < 0)
			goto out;
		skip_ws(ps);
		if (ps->p == ps->end)
			goto out;
		if (*ps->p == '}')
			break;
		if (*ps->p != ',')
			goto out;
		ps->p++;
		skip_ws(ps);
	}
close:
	ps->p++;
	skip_ws(ps);
	if (ps->p == ps->end)
		rc = 0;
out:
	json_decref(other.j);
	return rc;
}

/* jansson's own reading, for what scan_object leaves to it: real numbers,
 * and raw NUL bytes (jansson skips one after a number or a literal). */
int
payload_decode_tree(const char *s, size_t len, struct task *t)
{
	json_t *o, *v;
	json_error_t jerr;

	o = json_loadb(s, len, JSON_ALLOW_NUL, &jerr);
	if (o == NULL)
		return -1;
	v = json_object_get(o, "t");
	if (!json_is_string(v) || !json_is_string(json_object_get(o, "b")) ||
	    !json_is_integer(json_object_get(o, "d"))) {
		json_decref(o);
		return -1;
	}
	t->topic = xstrdup(json_string_value(v));
	v = json_object_get(o, "b");
	t->body_len = json_string_length(v);
	t->body = xmemdup(json_string_value(v), t->body_len + 1);
	t->due_at = json_integer_value(json_object_get(o, "d"));
	v = json_object_get(o, "k");
	if (json_is_string(v))
		t->key = xstrdup(json_string_value(v));
	v = json_object_get(o, "h");
	if (json_is_object(v))
		t->headers = json_incref(v);
	v = json_object_get(o, "x");
	if (json_is_integer(v))
		t->ttl_ms = json_integer_value(v);
	v = json_object_get(o, "a");
	if (json_is_integer(v))
		t->attempt = (int)json_integer_value(v);
	v = json_object_get(o, "m");
	if (json_is_string(v) &&
	    task_misfire_parse(json_string_value(v), &t->misfire) < 0) {
		task_clear(t);
		json_decref(o);
		return -1;
	}
	v = json_object_get(o, "c");
	if (json_is_object(v))
		t->callback = json_incref(v);
	v = json_object_get(o, "n");
	if (json_is_integer(v))
		t->max_attempts = (int)json_integer_value(v);
	json_decref(o);
	return 0;
}

/* Fills t from the members read; -1 as payload_decode_tree would. */
static int
members_task(struct member *m, struct task *t)
{
	if (m[K_T].type != V_STR || m[K_B].type != V_STR ||
	    m[K_D].type != V_INT)
		return -1;
	if (m[K_M].type == V_STR) {
		char *s = utf8_json_dup(&m[K_M].s, NULL);
		int rc = task_misfire_parse(s, &t->misfire);

		xfree(s);
		if (rc < 0)
			return -1;
	}
	t->topic = utf8_json_dup(&m[K_T].s, NULL);
	t->body = utf8_json_dup(&m[K_B].s, &t->body_len);
	t->due_at = m[K_D].i;
	if (m[K_K].type == V_STR)
		t->key = utf8_json_dup(&m[K_K].s, NULL);
	if (m[K_H].type == V_OBJ) {
		t->headers = m[K_H].j;
		m[K_H].j = NULL;
	}
	if (m[K_X].type == V_INT)
		t->ttl_ms = m[K_X].i;
	if (m[K_A].type == V_INT)
		t->attempt = (int)m[K_A].i;
	if (m[K_C].type == V_OBJ) {
		t->callback = m[K_C].j;
		m[K_C].j = NULL;
	}
	if (m[K_N].type == V_INT)
		t->max_attempts = (int)m[K_N].i;
	return 0;
}

int
payload_decode(const char *s, size_t len, struct task *t)
{
	struct member m[K__N];
	struct parser ps = {s, s + len, 0};
	int rc;

	memset(t, 0, sizeof(*t));
	if (memchr(s, '\0', len) != NULL)
		return payload_decode_tree(s, len, t);
	memset(m, 0, sizeof(m));
	rc = scan_object(&ps, m);
	if (rc == 0)
		rc = members_task(m, t);
	for (int i = 0; i < K__N; i++)
		json_decref(m[i].j);
	if (ps.slow)
		return payload_decode_tree(s, len, t);
	return rc;
}

void
payload_row_task(const struct db_rows *rows, size_t i, struct task *t)
{
	unsigned long blen;
	const char *h;

	memset(t, 0, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "%s", db_rows_get(rows, i, PC_ID, NULL));
	t->topic = (char *)db_rows_get(rows, i, PC_TOPIC, NULL);
	t->key = (char *)db_rows_get(rows, i, PC_KEY, NULL);
	t->body = (char *)db_rows_get(rows, i, PC_BODY, &blen);
	t->body_len = blen;
	h = db_rows_get(rows, i, PC_HEADERS, NULL);
	/* As the Redis copy reads them (scan_compound): rows stored before
	 * NUL was refused outside body read the same on every path. */
	t->headers = h ? json_loads(h, JSON_ALLOW_NUL, NULL) : NULL;
	t->due_at = db_rows_int(rows, i, PC_DUE_AT);
	t->ttl_ms = db_rows_int(rows, i, PC_TTL_MS);
	t->attempt = (int)db_rows_int(rows, i, PC_ATTEMPT);
	h = db_rows_get(rows, i, PC_MISFIRE, NULL);
	if (h != NULL)
		task_misfire_parse(h, &t->misfire);
	h = db_rows_get(rows, i, PC_CALLBACK, NULL);
	t->callback = h ? json_loads(h, JSON_ALLOW_NUL, NULL) : NULL;
	t->max_attempts = (int)db_rows_int(rows, i, PC_MAX_ATTEMPTS);
}

void
payload_row_clear(struct task *t)
{
	json_decref(t->headers);
	json_decref(t->callback);
	memset(t, 0, sizeof(*t));
}

char *
payload_from_row(const struct db_rows *rows, size_t i, size_t *lenp)
{
	struct task t;
	char *s;

	payload_row_task(rows, i, &t);
	t.attempt = 0; /* attempts are counted in Redis */
	s = payload_encode(&t, lenp);
	payload_row_clear(&t);
	return s;
}
