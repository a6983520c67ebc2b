#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "payload.h"
#include "payload_ref.h"
#include "task.h"
#include "xmalloc.h"

static const char tricky_body[] = "say \"hi\"\n\ttab \\ back\0nul \xc3\xa9 "
				  "\xe2\x82\xac \xf0\x9f\x98\x80 end";

/* A task as a worker would encode it; the caller clears it. */
static void
make_task(struct task *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "job-1");
	t->topic = xstrdup("orders.eu");
	t->body_len = sizeof(tricky_body) - 1;
	t->body = xmemdup(tricky_body, sizeof(tricky_body));
	t->due_at = INT64_C(1700000012345);
	t->key = xstrdup("customer:42");
	t->headers =
		json_pack("{s:s, s:s}", "trace", "abc", "lang", "fr \xc3\xa9");
	t->ttl_ms = 60000;
	t->attempt = 3;
}

static void
round_trip(const struct task *in, struct task *out)
{
	size_t len = 0;
	char *s = payload_encode(in, &len);

	assert_non_null(s);
	assert_int_equal(len, strlen(s));
	assert_int_equal(payload_decode(s, len, out), 0);
	free(s);
}

static void
test_round_trip(void **state)
{
	struct task in, out;

	(void)state;

	make_task(&in);
	round_trip(&in, &out);
	assert_string_equal(out.topic, "orders.eu");
	assert_int_equal(out.body_len, sizeof(tricky_body) - 1);
	assert_memory_equal(out.body, tricky_body, sizeof(tricky_body));
	assert_int_equal(out.due_at, INT64_C(1700000012345));
	assert_string_equal(out.key, "customer:42");
	assert_true(json_equal(out.headers, in.headers));
	assert_int_equal(out.ttl_ms, 60000);
	assert_int_equal(out.attempt, 3);
	/* The id is the caller's: it is not part of the payload. */
	assert_string_equal(out.id, "");
	assert_null(out.callback);
	task_clear(&out);
	task_clear(&in);
}

static void
test_minimal(void **state)
{
	struct task in, out;
	size_t len;
	char *s;

	(void)state;

	memset(&in, 0, sizeof(in));
	in.topic = xstrdup("t");
	in.body = xstrdup("");
	in.due_at = INT64_C(9999999999999);

	s = payload_encode(&in, &len);
	assert_string_equal(s, "{\"t\":\"t\",\"b\":\"\",\"d\":9999999999999}");
	free(s);

	round_trip(&in, &out);
	assert_string_equal(out.topic, "t");
	assert_int_equal(out.body_len, 0);
	assert_non_null(out.body);
	assert_int_equal(out.due_at, INT64_C(9999999999999));
	assert_null(out.key);
	assert_null(out.headers);
	assert_int_equal(out.ttl_ms, 0);
	assert_int_equal(out.attempt, 0);
	task_clear(&out);
	task_clear(&in);
}

static void
test_compact_fields(void **state)
{
	struct task in;
	json_error_t jerr;
	json_t *j;
	size_t len;
	char *s;

	(void)state;

	make_task(&in);
	s = payload_encode(&in, &len);
	j = json_loadb(s, len, JSON_ALLOW_NUL, &jerr);
	assert_non_null(j);
	assert_int_equal(json_object_size(j), 7);
	assert_string_equal(json_string_value(json_object_get(j, "t")),
			    "orders.eu");
	assert_int_equal(json_string_length(json_object_get(j, "b")),
			 sizeof(tricky_body) - 1);
	assert_int_equal(json_integer_value(json_object_get(j, "d")),
			 INT64_C(1700000012345));
	assert_string_equal(json_string_value(json_object_get(j, "k")),
			    "customer:42");
	assert_true(json_equal(json_object_get(j, "h"), in.headers));
	assert_int_equal(json_integer_value(json_object_get(j, "x")), 60000);
	assert_int_equal(json_integer_value(json_object_get(j, "a")), 3);
	assert_null(strchr(s, '\n'));
	json_decref(j);
	free(s);
	task_clear(&in);
}

/* A small deterministic generator: the same cases on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t
rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static unsigned
rnd_below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

/*
 * Random bytes that JSON strings find hard: quotes, backslashes, slashes,
 * every control character, DEL, 2-4 byte UTF-8 and, when bad, bytes
 * that are not UTF-8. With nul 0 there is no NUL byte (a C string).
 */
static char *
rnd_bytes(size_t *lenp, size_t max, int bad, int nul)
{
	static const char *const utf8[] = {"\xc3\xa9",	       "\xe2\x82\xac",
					   "\xf0\x9f\x98\x80", "\xef\xbf\xbf",
					   "\xf4\x8f\xbf\xbf", "\xc2\x80"};
	static const char *const invalid[] = {
		"\xff",	    "\xc0\xaf", "\xed\xa0\x80",
		"\xe2\x82", "\x80",	"\xf5\x80\x80\x80"};
	size_t n = rnd_below((unsigned)max + 1), len = 0;
	char *s = xmalloc(n * 4 + 1);

	for (size_t i = 0; i < n; i++) {
		unsigned kind = rnd_below(10);
		const char *piece = NULL;
		char c = 0;

		if (kind < 4) {
			c = (char)(0x20 + rnd_below(0x5f));
		} else if (kind == 4) {
			c = "\"\\/"[rnd_below(3)];
		} else if (kind == 5) {
			c = (char)rnd_below(0x20);
			if (c == 0 && !nul)
				c = '\x7f';
		} else if (kind == 6 && bad && rnd_below(8) == 0) {
			piece = invalid[rnd_below(6)];
		} else if (kind <= 7) {
			piece = utf8[rnd_below(6)];
		} else {
			c = (char)('a' + rnd_below(26));
		}
		if (piece != NULL) {
			memcpy(s + len, piece, strlen(piece));
			len += strlen(piece);
		} else {
			s[len++] = c;
		}
	}
	s[len] = '\0';
	*lenp = len;
	return s;
}

static char *
rnd_cstr(size_t max, int bad)
{
	size_t n;

	return rnd_bytes(&n, max, bad, 0);
}

static json_t *
rnd_object(void)
{
	json_t *o = json_object();
	unsigned n = rnd_below(4);

	for (unsigned i = 0; i < n; i++) {
		char *k = rnd_cstr(6, 0);
		char *v = rnd_cstr(12, 0);

		if (rnd_below(4) == 0)
			json_object_set_new(o, k,
					    json_integer((json_int_t)rnd()));
		else
			json_object_set_new(o, k, json_string(v));
		free(k);
		free(v);
	}
	return o;
}

static int64_t
rnd_int(void)
{
	static const int64_t edge[] = {0,
				       1,
				       -1,
				       INT64_MAX,
				       INT64_MIN,
				       INT32_MAX,
				       (int64_t)INT32_MAX + 1};

	switch (rnd_below(3)) {
	case 0: return edge[rnd_below(7)];
	case 1: return (int64_t)rnd_below(100000);
	default: return (int64_t)rnd();
	}
}

/* A task with random members; bad: its strings may not be UTF-8. */
static void
rnd_task(struct task *t, int bad)
{
	memset(t, 0, sizeof(*t));
	t->topic = rnd_cstr(20, bad);
	t->body = rnd_bytes(&t->body_len, rnd_below(4) ? 40 : 300, bad, 1);
	t->due_at = rnd_int();
	if (rnd_below(2))
		t->key = rnd_cstr(20, bad);
	if (rnd_below(3) == 0)
		t->headers = rnd_object();
	if (rnd_below(2))
		t->ttl_ms = rnd_int();
	if (rnd_below(2))
		t->attempt = (int)rnd_int();
	t->misfire = (enum task_misfire)rnd_below(TASK__MISFIRE_COUNT);
	if (rnd_below(4) == 0)
		t->callback = rnd_object();
	if (rnd_below(2))
		t->max_attempts = (int)rnd_int();
}

/* payload_decode and the jansson decoder agree on s. */
static int
decode_agrees(const char *s, size_t len)
{
	struct task a, b;
	int ra = payload_decode(s, len, &a);
	int rb = ref_payload_decode(s, len, &b);
	int same = ra == rb && (ra < 0 || ref_payload_same(&a, &b));

	if (ra == 0)
		task_clear(&a);
	else if (a.topic != NULL || a.body != NULL || a.headers != NULL)
		same = 0; /* a refusal leaves t empty */
	if (rb == 0)
		task_clear(&b);
	if (!same)
		print_error("decoders disagree (fast %d, jansson %d) on %.*s\n",
			    ra, rb, (int)len, s);
	return same;
}

static void
test_random_tasks(void **state)
{
	(void)state;

	for (int i = 0; i < 20000; i++) {
		int bad = i % 4 == 3;
		struct task in, out;
		size_t len, rlen;
		char *s, *r;

		rnd_task(&in, bad);
		s = payload_encode(&in, &len);
		r = ref_payload_encode(&in, &rlen);
		assert_int_equal(len, strlen(s));
		if (len != rlen || memcmp(s, r, len) != 0)
			fail_msg("encoders differ:\n%s\n%s", s, r);
		assert_true(decode_agrees(s, len));
		if (!bad) {
			/* Every member survives (the optional ones when set). */
			assert_int_equal(payload_decode(s, len, &out), 0);
			assert_string_equal(out.topic, in.topic);
			assert_int_equal(out.body_len, in.body_len);
			assert_memory_equal(out.body, in.body, in.body_len);
			assert_int_equal(out.body[out.body_len], '\0');
			assert_int_equal(out.due_at, in.due_at);
			if (in.key != NULL)
				assert_string_equal(out.key, in.key);
			assert_true(in.headers == NULL ||
				    json_equal(in.headers, out.headers));
			assert_true(in.callback == NULL ||
				    json_equal(in.callback, out.callback));
			assert_int_equal(out.ttl_ms,
					 in.ttl_ms > 0 ? in.ttl_ms : 0);
			assert_int_equal(out.attempt,
					 in.attempt > 0 ? in.attempt : 0);
			assert_int_equal(out.misfire, in.misfire);
			assert_int_equal(out.max_attempts,
					 in.max_attempts > 0 ? in.max_attempts
							     : 0);
			task_clear(&out);
		}
		free(s);
		free(r);
		task_clear(&in);
	}
}

static void
test_encode_exact(void **state)
{
	struct task in;
	size_t len;
	char *s;

	(void)state;

	memset(&in, 0, sizeof(in));
	in.topic = xstrdup("a/b");
	in.body = xmemdup("\"\\/\b\f\n\r\t\x01\x1f\x7f\0\xc3\xa9", 15);
	in.body_len = 14;
	in.due_at = INT64_MIN;
	in.key = xstrdup("");
	in.ttl_ms = INT64_MAX;
	in.misfire = TASK_MISFIRE_SKIP;
	in.callback = json_pack("{s:s}", "url", "http://x/y");
	in.max_attempts = 5;
	s = payload_encode(&in, &len);
	assert_string_equal(
		s, "{\"t\":\"a/b\",\"b\":\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0001"
		   "\\u001F\x7f\\u0000\xc3\xa9\",\"d\":-9223372036854775808,"
		   "\"k\":\"\",\"x\":9223372036854775807,\"m\":\"skip\","
		   "\"c\":{\"url\":\"http://x/y\"},\"n\":5}");
	free(s);

	/* Like a json_string() that failed: a body that is not UTF-8 is
	 * left out (and such a payload does not decode). */
	free(in.body);
	in.body = xstrdup("\xff");
	in.body_len = 1;
	s = payload_encode(&in, &len);
	assert_null(strstr(s, "\"b\""));
	assert_true(decode_agrees(s, len));
	free(s);
	task_clear(&in);
}

/* Accepted like json_loadb accepted them; checked field by field. */
static void
test_decode_variants(void **state)
{
	struct task t;

	(void)state;

	/* Lua cjson: other key order, "\/", whitespace. */
	const char *s =
		" {\"n\":3 ,\"d\" : 42,\n\"k\":\"a\\/b\",\"x\":1000,"
		"\"h\":{\"p\":\"q\"},\"b\":\"x\\u00e9\\ud83d\\ude00\\n\","
		"\"t\":\"top\\u002fic\",\"c\":{\"url\":\"http:\\/\\/h\"},"
		"\"m\":\"fire_all\",\"a\":2}\r\n\t";

	assert_int_equal(payload_decode(s, strlen(s), &t), 0);
	assert_string_equal(t.topic, "top/ic");
	assert_int_equal(t.body_len, 8);
	assert_memory_equal(t.body, "x\xc3\xa9\xf0\x9f\x98\x80\n", 9);
	assert_int_equal(t.due_at, 42);
	assert_string_equal(t.key, "a/b");
	assert_string_equal(json_string_value(json_object_get(t.headers, "p")),
			    "q");
	assert_string_equal(
		json_string_value(json_object_get(t.callback, "url")),
		"http://h");
	assert_int_equal(t.ttl_ms, 1000);
	assert_int_equal(t.attempt, 2);
	assert_int_equal(t.misfire, TASK_MISFIRE_FIRE_ALL);
	assert_int_equal(t.max_attempts, 3);
	task_clear(&t);
	assert_true(decode_agrees(s, strlen(s)));

	static const char *const same[] = {
		/* escaped keys, the last of duplicates wins */
		"{\"\\u0074\":\"x\",\"b\":\"\",\"\\u0064\":-0}",
		"{\"t\":\"x\",\"t\":\"y\",\"b\":\"\",\"d\":1,\"k\":\"a\","
		"\"k\":null,\"x\":5,\"x\":\"5\",\"h\":{},\"h\":[1]}",
		"{\"t\":1,\"t\":\"y\",\"b\":\"\",\"d\":\"1\",\"d\":1}",
		/* wrong types of optional members are ignored */
		"{\"t\":\"x\",\"b\":\"\",\"d\":1,\"k\":7,\"h\":\"s\",\"x\":1.5,"
		"\"a\":true,\"m\":null,\"c\":[],\"n\":false}",
		"{\"t\":\"x\",\"b\":\"\",\"d\":1,\"x\":-5,\"a\":-2,\"n\":1e2}",
		/* unknown members, of any kind */
		"{\"zz\":{\"a\":[1,2.5,{\"b\":null}],\"c\":\"\\u0000\"},"
		"\"t\":\"x\",\"\":1,\"tb\":true,\"b\":\"\",\"d\":1,"
		"\"\\ud83d\\ude00\":-1.5e-3,\"q\":[]}",
		/* bounds of a 64-bit integer; int members truncate */
		"{\"t\":\"x\",\"b\":\"\",\"d\":-9223372036854775808,"
		"\"x\":9223372036854775807,\"a\":4294967297}",
		/* NUL in values, an escaped misfire */
		"{\"t\":\"a\\u0000b\",\"b\":\"\\u0000\",\"d\":1,"
		"\"m\":\"\\u0073kip\"}",
		"{\"t\":\"x\",\"b\":\"\",\"d\":1,\"m\":\"fire_once\\u0000z\"}",
		"{\"t\":\"\xc3\xa9\x7f\",\"b\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\","
		"\"d\":0}",
	};
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		assert_int_equal(payload_decode(same[i], strlen(same[i]), &t),
				 0);
		task_clear(&t);
		assert_true(decode_agrees(same[i], strlen(same[i])));
	}

	/* jansson drops one raw NUL after a number or literal. */
	static const char nul[] = "{\"t\":\"x\",\"b\":\"\",\"d\":1\0}";
	assert_true(decode_agrees(nul, sizeof(nul) - 1));
	assert_int_equal(payload_decode(nul, sizeof(nul) - 1, &t), 0);
	task_clear(&t);
}

/* The nesting limit of json_loadb counts the payload object too. */
static void
test_decode_depth(void **state)
{
	struct task t;

	(void)state;

	for (int key = 0; key < 2; key++) {
		for (int n = 2044; n <= 2049; n++) {
			size_t cap = 64 + 2 * (size_t)n;
			char *s = xmalloc(cap);
			size_t len;

			len = (size_t)snprintf(
				s, cap,
				"{\"t\":\"x\",\"b\":\"\",\"d\":1,"
				"\"%s\":{\"a\":",
				key ? "h" : "zz");
			for (int i = 1; i < n; i++)
				s[len++] = '[';
			s[len++] = '7';
			for (int i = 1; i < n; i++)
				s[len++] = ']';
			s[len++] = '}';
			s[len++] = '}';
			assert_true(decode_agrees(s, len));
			/* The "a" arrays start at level 3, 7 is at n + 2. */
			assert_int_equal(payload_decode(s, len, &t),
					 n + 2 <= 2048 ? 0 : -1);
			if (n + 2 <= 2048)
				task_clear(&t);
			free(s);
		}
	}
}

static void
test_decode_mutations(void **state)
{
	static const char alphabet[] =
		"{}[]:,\"\\/ \t\n0123456789-+.eEuntrfalsdbhkxmc"
		"\x00\x01\x7f\xc3\xa9\xed\xa0\x80\xff";
	(void)state;

	for (int i = 0; i < 30000; i++) {
		struct task in;
		size_t len;
		char *p, *s;
		int edits = 1 + (int)rnd_below(3);

		rnd_task(&in, 0);
		p = payload_encode(&in, &len);
		task_clear(&in);
		s = xmalloc(len + 8);
		memcpy(s, p, len);
		for (int e = 0; e < edits && len > 0; e++) {
			size_t at = rnd_below((unsigned)len);
			char c = alphabet[rnd_below(sizeof(alphabet) - 1)];

			switch (rnd_below(4)) {
			case 0: s[at] = c; break;
			case 1: len = at; break;
			case 2:
				memmove(s + at, s + at + 1, len - at - 1);
				len--;
				break;
			default:
				s = xrealloc(s, len + 1);
				memmove(s + at + 1, s + at, len - at);
				s[at] = c;
				len++;
			}
		}
		assert_true(decode_agrees(s, len));
		free(s);
		free(p);
	}
}

static void
reject(const char *s)
{
	struct task t;

	if (payload_decode(s, strlen(s), &t) == 0) {
		task_clear(&t);
		fail_msg("decoded '%s'", s);
	}
	assert_null(t.topic);
	assert_null(t.body);
	assert_null(t.headers);
	/* ... and so did json_loadb. */
	assert_true(decode_agrees(s, strlen(s)));
}

static void
test_decode_rejects(void **state)
{
	struct task t;

	(void)state;

	reject("");
	reject("garbage");
	reject("{");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1");
	reject("[\"x\",\"y\",1]");
	reject("\"x\"");
	reject("{}");
	reject("{\"b\":\"y\",\"d\":1}");
	reject("{\"t\":\"x\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\"}");
	reject("{\"t\":1,\"b\":\"y\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":null,\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":\"1\"}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1.5}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1e3}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":-}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":01}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":+1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":9223372036854775808}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":-9223372036854775809}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"x\":99999999999999999999}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"x\":1e999}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1}x");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1}{}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,}");
	reject("{\"t\":\"x\",\"b\":\"y\",,\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\" \"d\":1}");
	reject("{\"t\" \"x\",\"b\":\"y\",\"d\":1}");
	reject("{t:\"x\",\"b\":\"y\",\"d\":1}");
	reject("{'t':\"x\",\"b\":\"y\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"k\":tru}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"k\":truex}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"k\":True}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"k\":[1,]}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"h\":{\"a\":1.}}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"m\":\"never\"}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"m\":\"\"}");
	reject("{\"t\":\"x\",\"b\":\"a\\x\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"a\\u12\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"a\\u12G4\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\\ud800\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\\udc00\\ud800\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\\ud800\\u0041\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\\ud800\\n\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"a\nb\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"a\x01\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\xff\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\xc0\xaf\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\xed\xa0\x80\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"\xe2\x82\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"a\\u0000\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"\\u0000\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"h\":{\"a\\u0000\":\"v\"}}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"h\":{\"a\":\"v\"}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"h\":{\"a\":\"v\"]}");
	reject("\xef\xbb\xbf{\"t\":\"x\",\"b\":\"y\",\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1\x0b}");
	reject("[{\"t\":\"x\",\"b\":\"y\",\"d\":1}]");
	reject("{\"t\":\"x\",\"b\":\"y\",\"t\":null,\"d\":1}");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":1,\"d\":1.0}");
	reject("{\"t\":\"x\",\"b\":\"y\"");
	reject("{\"t\":\"x\",\"b\":\"y");
	reject("{\"t\":\"x\",\"b\":\"y\\");
	reject("{\"t\":\"x\",\"b\":\"y\",\"d\":");
	reject(" ");
	reject("null");
	reject("1");

	/* Only the length given is read. */
	assert_int_equal(
		payload_decode("{\"t\":\"x\",\"b\":\"y\",\"d\":1}junk",
			       strlen("{\"t\":\"x\",\"b\":\"y\",\"d\":1}"), &t),
		0);
	assert_string_equal(t.topic, "x");
	assert_int_equal(t.due_at, 1);
	task_clear(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_minimal),
		cmocka_unit_test(test_compact_fields),
		cmocka_unit_test(test_decode_rejects),
		cmocka_unit_test(test_random_tasks),
		cmocka_unit_test(test_encode_exact),
		cmocka_unit_test(test_decode_variants),
		cmocka_unit_test(test_decode_depth),
		cmocka_unit_test(test_decode_mutations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
