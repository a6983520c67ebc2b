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

#include "task.h"
#include "trace.h"
#include "tz.h"
#include "xmalloc.h"

#define NOW INT64_C(1700000000000)
#define MAX_BODY 1024
#define MAX_DELAY (INT64_C(86400000) * 365)

#define MAX_HEADERS 300

static const struct task_limits lim = {MAX_BODY, MAX_DELAY, NULL, 0, tz_get};
/* The same with a small task.max_headers_bytes. */
static const struct task_limits small_headers = {MAX_BODY, MAX_DELAY, NULL,
						 MAX_HEADERS, tz_get};

/*
 * Test JSON is written with ' for " so it stays readable; no test needs a
 * literal single quote.
 */
static json_t *
load(const char *text)
{
	char *s = xstrdup(text);
	json_error_t jerr;
	json_t *j;

	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	j = json_loads(s, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
	if (j == NULL)
		fail_msg("bad test JSON '%s': %s", s, jerr.text);
	xfree(s);
	return j;
}

static int
parse_at(json_t *in, int64_t now, struct task *t, struct task_error *err)
{
	memset(err, 0, sizeof(*err));
	return task_from_json(in, &lim, now, t, err);
}

/* Parses text that must be accepted; the caller clears t. */
static void
accept_text(const char *text, int64_t now, struct task *t)
{
	struct task_error err;
	json_t *in = load(text);
	int rc = parse_at(in, now, t, &err);

	json_decref(in);
	if (rc != 0)
		fail_msg("rejected %s: %d %s %s: %s", text, err.http, err.code,
			 err.field, err.message);
}

static void
accept_json(json_t *in)
{
	struct task_error err;
	struct task t;

	if (parse_at(in, NOW, &t, &err) != 0)
		fail_msg("rejected: %d %s %s: %s", err.http, err.code,
			 err.field, err.message);
	task_clear(&t);
	json_decref(in);
}

static void
assert_cleared(const struct task *t)
{
	static const struct task zero;

	assert_memory_equal(t, &zero, sizeof(zero));
}

/* in must be rejected with exactly this status, code and field. */
static void
reject_json(json_t *in, int http, const char *code, const char *field)
{
	struct task_error err;
	struct task t;
	int rc = parse_at(in, NOW, &t, &err);

	json_decref(in);
	if (rc == 0) {
		task_clear(&t);
		fail_msg("accepted, expected %d %s %s", http, code, field);
	}
	assert_int_equal(rc, -1);
	assert_int_equal(err.http, http);
	assert_string_equal(err.code, code);
	assert_string_equal(err.field, field);
	assert_true(err.message[0] != '\0');
	assert_cleared(&t);
}

static void
reject_text(const char *text, int http, const char *code, const char *field)
{
	reject_json(load(text), http, code, field);
}

/* {"topic":"orders","body":"hello","delay_ms":1000}, to be modified. */
static json_t *
base(void)
{
	return load("{'topic':'orders','body':'hello','delay_ms':1000}");
}

static json_t *
with(const char *field, json_t *v)
{
	json_t *o = base();

	json_object_set_new(o, field, v);
	return o;
}

static char *
repeat(char c, size_t n)
{
	char *s = xmalloc(n + 1);

	memset(s, c, n);
	s[n] = '\0';
	return s;
}

static uint64_t
hash_of(const char *text, int64_t now)
{
	struct task t;
	uint64_t h;

	accept_text(text, now, &t);
	h = t.content_hash;
	task_clear(&t);
	return h;
}

static void
test_minimal(void **state)
{
	struct task t;

	(void)state;

	accept_text("{'topic':'orders','body':'hello','delay_ms':1500}", NOW,
		    &t);
	assert_string_equal(t.topic, "orders");
	assert_int_equal(t.body_len, 5);
	assert_memory_equal(t.body, "hello", 6);
	assert_int_equal(t.delay_ms, 1500);
	assert_int_equal(t.due_at, NOW + 1500);
	assert_int_equal(strlen(t.id), 26);
	assert_true(task_id_valid(t.id, strlen(t.id)));
	assert_int_equal(t.id_given, 0);
	assert_null(t.key);
	assert_null(t.headers);
	assert_null(t.callback);
	assert_null(t.cron);
	assert_int_equal(t.max_attempts, 0);
	assert_int_equal(t.ttl_ms, 0);
	assert_int_equal(t.status, TASK_SCHEDULED);
	assert_int_equal(t.callback_status, TASK_CB_NONE);
	assert_int_equal(t.created_at, NOW);
	assert_int_equal(t.updated_at, NOW);
	assert_int_equal(t.fired_at, 0);
	task_clear(&t);
	assert_cleared(&t);

	accept_text("{'topic':'orders','body':'','delay_ms':0}", NOW, &t);
	assert_int_equal(t.due_at, NOW);
	assert_int_equal(t.body_len, 0);
	task_clear(&t);
}

static void
test_due_at(void **state)
{
	struct task t;

	(void)state;

	accept_text("{'topic':'t','body':'b','due_at':1700000005000}", NOW, &t);
	assert_int_equal(t.due_at, NOW + 5000);
	assert_int_equal(t.delay_ms, -1);
	task_clear(&t);

	/* A due time in the past fires now: accepted as given. */
	accept_text("{'topic':'t','body':'b','due_at':1000}", NOW, &t);
	assert_int_equal(t.due_at, 1000);
	task_clear(&t);
	accept_text("{'topic':'t','body':'b','due_at':0}", NOW, &t);
	assert_int_equal(t.due_at, 0);
	task_clear(&t);
}

static void
test_due_at_and_delay(void **state)
{
	(void)state;

	reject_text("{'topic':'t','body':'b','due_at':1700000005000,"
		    "'delay_ms':10}",
		    400, "invalid_value", "delay_ms");
	reject_text("{'topic':'t','body':'b'}", 400, "missing_field", "due_at");
	reject_text("{'topic':'t','body':'b','due_at':null}", 400,
		    "missing_field", "due_at");
}

static void
test_time_bounds(void **state)
{
	struct task t;
	char text[256];

	(void)state;

	snprintf(text, sizeof(text), "{'topic':'t','body':'b','due_at':%lld}",
		 (long long)(NOW + MAX_DELAY));
	accept_text(text, NOW, &t);
	assert_int_equal(t.due_at, NOW + MAX_DELAY);
	task_clear(&t);
	snprintf(text, sizeof(text), "{'topic':'t','body':'b','due_at':%lld}",
		 (long long)(NOW + MAX_DELAY + 1));
	reject_text(text, 400, "invalid_value", "due_at");

	snprintf(text, sizeof(text), "{'topic':'t','body':'b','delay_ms':%lld}",
		 (long long)MAX_DELAY);
	accept_text(text, NOW, &t);
	assert_int_equal(t.due_at, NOW + MAX_DELAY);
	task_clear(&t);
	snprintf(text, sizeof(text), "{'topic':'t','body':'b','delay_ms':%lld}",
		 (long long)(MAX_DELAY + 1));
	reject_text(text, 400, "invalid_value", "delay_ms");

	reject_text("{'topic':'t','body':'b','delay_ms':-1}", 400,
		    "invalid_value", "delay_ms");
	reject_text("{'topic':'t','body':'b','due_at':-1}", 400,
		    "invalid_value", "due_at");
}

static void
test_missing_fields(void **state)
{
	(void)state;

	reject_text("{'body':'b','delay_ms':1}", 400, "missing_field", "topic");
	reject_text("{'topic':null,'body':'b','delay_ms':1}", 400,
		    "missing_field", "topic");
	reject_text("{'topic':'t','delay_ms':1}", 400, "missing_field", "body");
	reject_text("{}", 400, "missing_field", "topic");
}

static void
test_wrong_types(void **state)
{
	(void)state;

	reject_json(with("topic", json_integer(5)), 400, "invalid_type",
		    "topic");
	reject_json(with("body", json_object()), 400, "invalid_type", "body");
	reject_json(with("body", json_integer(1)), 400, "invalid_type", "body");
	reject_json(with("delay_ms", json_string("10")), 400, "invalid_type",
		    "delay_ms");
	reject_json(with("delay_ms", json_real(1.5)), 400, "invalid_type",
		    "delay_ms");
	reject_json(with("delay_ms", json_true()), 400, "invalid_type",
		    "delay_ms");
	/* Far beyond int64: must be refused, not wrapped. */
	reject_json(with("delay_ms", json_real(1e300)), 400, "invalid_type",
		    "delay_ms");
	reject_json(with("headers", json_array()), 400, "invalid_type",
		    "headers");
	reject_json(with("headers", json_string("a=b")), 400, "invalid_type",
		    "headers");
	reject_json(with("headers", load("{'a':1}")), 400, "invalid_type",
		    "headers");
	reject_json(with("headers", load("{'a':null}")), 400, "invalid_type",
		    "headers");
	reject_json(with("id", json_integer(7)), 400, "invalid_type", "id");
	reject_json(with("key", json_integer(7)), 400, "invalid_type", "key");
	reject_json(with("max_attempts", json_string("3")), 400, "invalid_type",
		    "max_attempts");
	reject_json(with("ttl_ms", json_string("3")), 400, "invalid_type",
		    "ttl_ms");
	reject_json(with("callback", json_string("http://x")), 400,
		    "invalid_type", "callback");
	reject_text("[]", 400, "invalid_type", "");
	reject_text("'task'", 400, "invalid_type", "");
}

static void
test_unknown_field(void **state)
{
	(void)state;

	reject_json(with("delay", json_integer(5)), 400, "unknown_field",
		    "delay");
	reject_json(with("Topic", json_string("x")), 400, "unknown_field",
		    "Topic");
}

static void
test_body_limit(void **state)
{
	char *s = repeat('x', MAX_BODY);
	struct task_error err;
	struct task t;
	json_t *in;

	(void)state;

	in = with("body", json_string(s));
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	assert_int_equal(t.body_len, MAX_BODY);
	assert_memory_equal(t.body, s, MAX_BODY);
	task_clear(&t);
	json_decref(in);
	xfree(s);

	s = repeat('x', MAX_BODY + 1);
	reject_json(with("body", json_string(s)), 413, "too_large", "body");
	xfree(s);
}

static void
test_body_nul(void **state)
{
	static const char want[] = "a\0b\0";
	struct task t;

	(void)state;

	accept_text("{'topic':'t','body':'a\\u0000b\\u0000','delay_ms':1}", NOW,
		    &t);
	assert_int_equal(t.body_len, 4);
	assert_memory_equal(t.body, want, 4);
	assert_int_equal(t.body[4], '\0');
	task_clear(&t);
}

/* U+0000 only in body: every other string refuses it, with its field. */
static void
test_nul_refused_outside_body(void **state)
{
	static const struct {
		const char *text, *field;
	} cases[] = {
		{"{'id':'a\\u0000b'}", "id"},
		{"{'topic':'t\\u0000x'}", "topic"},
		{"{'key':'k\\u0000'}", "key"},
		{"{'headers':{'h':'v\\u0000w'}}", "headers"},
		{"{'callback':{'url':'http://a/\\u0000'}}", "callback.url"},
		{"{'callback':{'url':'http://a/','method':'POST\\u0000x'}}",
		 "callback.method"},
		{"{'callback':{'url':'http://a/','headers':{'h':'\\u0000'}}}",
		 "callback.headers"},
		{"{'cron':'* * * * *\\u0000junk'}", "cron"},
		{"{'cron':'* * * * *','timezone':'UTC\\u0000/x'}", "timezone"},
		{"{'cron':'* * * * *','misfire':'skip\\u0000'}", "misfire"},
		{NULL, NULL}};

	(void)state;

	for (int i = 0; cases[i].text; i++) {
		json_t *in = base(), *extra = load(cases[i].text);

		/* A recurring task takes no delay_ms. */
		if (json_object_get(extra, "cron") != NULL)
			json_object_del(in, "delay_ms");
		json_object_update(in, extra);
		json_decref(extra);
		reject_json(in, 400, "invalid_value", cases[i].field);
	}
	/* The same values without the NUL are fine. */
	accept_json(load("{'topic':'t','body':'b','delay_ms':1,"
			 "'headers':{'h':'vw'},'key':'k',"
			 "'callback':{'url':'http://a/','method':'POST',"
			 "'headers':{'h':'x'}}}"));
}

/* in parsed with small_headers must be refused 413 on field, or
 * accepted (field NULL). */
static void
headers_case(json_t *in, const char *field)
{
	struct task_error err;
	struct task t;
	int rc = task_from_json(in, &small_headers, NOW, &t, &err);

	json_decref(in);
	if (field == NULL) {
		if (rc != 0)
			fail_msg("rejected: %s", err.message);
		task_clear(&t);
		return;
	}
	assert_int_equal(rc, -1);
	assert_int_equal(err.http, 413);
	assert_string_equal(err.code, "too_large");
	assert_string_equal(err.field, field);
	assert_non_null(strstr(err.message, "task.max_headers_bytes"));
}

/* headers and callback.headers: at most max_headers bytes as stored
 * (compact JSON; escapes count as what they take). */
static void
test_headers_encoded_limit(void **state)
{
	char name[16], *v;
	json_t *h = json_object();

	(void)state;

	/* {"a":"<v>"}: 8 bytes around the value. */
	for (size_t n = MAX_HEADERS - 10; n <= MAX_HEADERS - 6; n++) {
		v = repeat('v', n);
		headers_case(with("headers", json_pack("{s:s}", "a", v)),
			     n + 8 <= MAX_HEADERS ? NULL : "headers");
		xfree(v);
	}
	/* 50 control characters take 300 bytes escaped. */
	v = repeat('\001', 50);
	headers_case(with("headers", json_pack("{s:s}", "a", v)), "headers");
	xfree(v);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "header-%02d", i);
		json_object_set_new(h, name, json_string("value"));
	}
	headers_case(with("headers", json_deep_copy(h)), "headers");
	headers_case(with("callback", json_pack("{s:s, s:O}", "url",
						"http://a/", "headers", h)),
		     "callback.headers");
	/* Without the limit (0: what the column holds) both are fine. */
	accept_json(with("headers", json_deep_copy(h)));
	json_decref(h);
}

static void
test_id_valid(void **state)
{
	static const char *const good[] = {"a",
					   "Z",
					   "0",
					   "order-1",
					   "a.b_c:d-e",
					   "01HZX3KQ7B8M9N0P1Q2R3S4T5V",
					   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi"
					   "jklmnopqrstuvwxyz0123456789._:-",
					   NULL};
	static const char *const bad[] = {"",	 "a b",	 "\xc3\xa9", "a/b",
					  "a#b", "a,b",	 "a\tb",     "a+b",
					  "a@b", "a\"b", NULL};
	char *s;

	(void)state;

	for (int i = 0; good[i]; i++)
		assert_true(task_id_valid(good[i], strlen(good[i])));
	for (int i = 0; bad[i]; i++)
		assert_false(task_id_valid(bad[i], strlen(bad[i])));
	assert_false(task_id_valid("a\0b", 3));

	s = repeat('a', 128);
	assert_true(task_id_valid(s, 128));
	xfree(s);
	s = repeat('a', 129);
	assert_false(task_id_valid(s, 129));
	xfree(s);
}

static void
test_id_in_task(void **state)
{
	struct task_error err;
	struct task t;
	json_t *in;
	char *s;

	(void)state;

	in = with("id", json_string("order:42"));
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	assert_string_equal(t.id, "order:42");
	assert_int_equal(t.id_given, 1);
	task_clear(&t);
	json_decref(in);

	s = repeat('i', 128);
	in = with("id", json_string(s));
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	assert_string_equal(t.id, s);
	task_clear(&t);
	json_decref(in);
	xfree(s);

	s = repeat('i', 129);
	reject_json(with("id", json_string(s)), 400, "invalid_value", "id");
	xfree(s);
	reject_json(with("id", json_string("")), 400, "invalid_value", "id");
	reject_json(with("id", json_string("a b")), 400, "invalid_value", "id");
	reject_json(with("id", json_string("\xc3\xa9")), 400, "invalid_value",
		    "id");
	reject_json(with("id", json_stringn("a\0b", 3)), 400, "invalid_value",
		    "id");
}

static void
test_topic_valid(void **state)
{
	char *s;

	(void)state;

	assert_true(task_topic_valid("a.b_c-1", 7));
	assert_true(task_topic_valid("...", 3));
	assert_true(task_topic_valid("x", 1));
	assert_false(task_topic_valid(".", 1));
	assert_false(task_topic_valid("..", 2));
	assert_false(task_topic_valid("", 0));
	assert_false(task_topic_valid("a/b", 3));
	assert_false(task_topic_valid("a b", 3));
	assert_false(task_topic_valid("a:b", 3));
	assert_false(task_topic_valid("\xc3\xa9", 2));
	assert_false(task_topic_valid("a\0b", 3));

	s = repeat('t', 200);
	assert_true(task_topic_valid(s, 200));
	xfree(s);
	s = repeat('t', 201);
	assert_false(task_topic_valid(s, 201));
	reject_json(with("topic", json_string(s)), 400, "invalid_value",
		    "topic");
	xfree(s);

	reject_json(with("topic", json_string("a/b")), 400, "invalid_value",
		    "topic");
	reject_json(with("topic", json_string(".")), 400, "invalid_value",
		    "topic");
	reject_json(with("topic", json_string("..")), 400, "invalid_value",
		    "topic");
	reject_json(with("topic", json_string("")), 400, "invalid_value",
		    "topic");
	accept_json(with("topic", json_string("a.b_c-1")));
}

static void
test_headers(void **state)
{
	static const char *const reserved[] = {"prophet-id", "Prophet-Due-At",
					       "PROPHET-x", "prophet-", NULL};
	struct task_error err;
	struct task t;
	json_t *h, *in;
	char name[32];
	char *s;

	(void)state;

	for (int i = 0; reserved[i]; i++) {
		h = json_object();
		json_object_set_new(h, reserved[i], json_string("v"));
		reject_json(with("headers", h), 400, "invalid_value",
			    "headers");
	}
	accept_json(
		with("headers", load("{'prophet':'v','x-prophet-id':'v'}")));

	h = json_object();
	for (int i = 0; i < TASK_HEADERS_MAX; i++) {
		snprintf(name, sizeof(name), "h%d", i);
		json_object_set_new(h, name, json_string("v"));
	}
	in = with("headers", json_deep_copy(h));
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	assert_int_equal(json_object_size(t.headers), 32);
	assert_true(json_equal(t.headers, h));
	task_clear(&t);
	json_decref(in);
	json_object_set_new(h, "one-more", json_string("v"));
	reject_json(with("headers", h), 400, "too_large", "headers");

	reject_json(with("headers", load("{'':'v'}")), 400, "invalid_value",
		    "headers");
	s = repeat('v', TASK_HEADER_VALUE_MAX);
	accept_json(with("headers", json_pack("{s:s}", "big", s)));
	xfree(s);
	s = repeat('v', TASK_HEADER_VALUE_MAX + 1);
	reject_json(with("headers", json_pack("{s:s}", "big", s)), 400,
		    "too_large", "headers");
	xfree(s);
	accept_json(with("headers", json_object()));
}

static void
test_callback(void **state)
{
	static const char *const methods[] = {"GET",   "POST",	 "PUT",
					      "PATCH", "DELETE", NULL};
	struct task_error err;
	struct task t;
	json_t *cb, *in;

	(void)state;

	cb = load("{'url':'https://hooks.example.com/x?a=1','method':'POST',"
		  "'headers':{'Authorization':'Bearer t'},'timeout_ms':5000}");
	in = with("callback", json_deep_copy(cb));
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	assert_non_null(t.callback);
	assert_true(json_equal(t.callback, cb));
	task_clear(&t);
	json_decref(in);
	json_decref(cb);

	accept_json(with("callback", load("{'url':'http://h'}")));
	accept_json(with("callback", load("{'url':'HTTPS://h/p'}")));
	for (int i = 0; methods[i]; i++)
		accept_json(with("callback",
				 json_pack("{s:s, s:s}", "url", "http://h",
					   "method", methods[i])));
	accept_json(
		with("callback", load("{'url':'http://h','timeout_ms':1}")));
	accept_json(with("callback",
			 load("{'url':'http://h','timeout_ms':300000}")));

	reject_json(with("callback", load("{}")), 400, "missing_field",
		    "callback.url");
	reject_json(with("callback", load("{'method':'GET'}")), 400,
		    "missing_field", "callback.url");
	reject_json(with("callback", load("{'url':'ftp://h/x'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(with("callback", load("{'url':'h/x'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(with("callback", load("{'url':'http://'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(with("callback", load("{'url':'https://'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(with("callback", load("{'url':'http://h/a b'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(with("callback", load("{'url':'http://h/\\ta'}")), 400,
		    "invalid_value", "callback.url");
	reject_json(
		with("callback", load("{'url':'http://h','method':'FETCH'}")),
		400, "invalid_value", "callback.method");
	reject_json(with("callback", load("{'url':'http://h','method':''}")),
		    400, "invalid_value", "callback.method");
	reject_json(with("callback", load("{'url':'http://h','method':1}")),
		    400, "invalid_type", "callback.method");
	reject_json(with("callback", load("{'url':'http://h','timeout_ms':0}")),
		    400, "invalid_value", "callback.timeout_ms");
	reject_json(with("callback",
			 load("{'url':'http://h','timeout_ms':300001}")),
		    400, "invalid_value", "callback.timeout_ms");
	reject_json(
		with("callback", load("{'url':'http://h','timeout_ms':-5}")),
		400, "invalid_value", "callback.timeout_ms");
	reject_json(with("callback", load("{'url':'http://h','retries':3}")),
		    400, "unknown_field", "callback");
	reject_json(with("callback", load("{'url':'http://h','headers':[]}")),
		    400, "invalid_type", "callback.headers");
	/* framing and hop-by-hop headers, non-token names, injection */
	accept_json(with("callback",
			 load("{'url':'http://h','headers':{'X-Ok':'a\\tb',"
			      "'Authorization':'Bearer t','Hostname':'h'}}")));
	{
		static const char *const refused[] = {
			"{'Host':'internal'}",
			"{'content-length':'0'}",
			"{'Transfer-Encoding':'chunked'}",
			"{'Connection':'close'}",
			"{'Keep-Alive':'1'}",
			"{'Upgrade':'h2c'}",
			"{'TE':'trailers'}",
			"{'Trailer':'X'}",
			"{'Expect':'100-continue'}",
			"{'Proxy-Authorization':'Basic x'}",
			"{'X-Ok':'1','Bad Name':'v'}",
			"{'a:b':'v'}",
			"{'X':'a\\r\\nInjected: 1'}",
			"{'X':'a\\nb'}",
			"{'X':'a\\u0000b'}",
			NULL};

		for (int i = 0; refused[i] != NULL; i++) {
			json_t *c = load("{'url':'http://h'}");

			json_object_set_new(c, "headers", load(refused[i]));
			reject_json(with("callback", c), 400, "invalid_value",
				    "callback.headers");
		}
	}
	reject_json(
		with("callback", load("{'url':'http://h','headers':{'a':2}}")),
		400, "invalid_type", "callback.headers");
}

static void
test_max_attempts(void **state)
{
	struct task t;

	(void)state;

	accept_text("{'topic':'t','body':'b','delay_ms':1,'max_attempts':1}",
		    NOW, &t);
	assert_int_equal(t.max_attempts, 1);
	task_clear(&t);
	accept_text("{'topic':'t','body':'b','delay_ms':1,'max_attempts':100}",
		    NOW, &t);
	assert_int_equal(t.max_attempts, 100);
	task_clear(&t);
	reject_json(with("max_attempts", json_integer(0)), 400, "invalid_value",
		    "max_attempts");
	reject_json(with("max_attempts", json_integer(101)), 400,
		    "invalid_value", "max_attempts");
	reject_json(with("max_attempts", json_integer(-1)), 400,
		    "invalid_value", "max_attempts");
}

static void
test_optional_fields(void **state)
{
	struct task t;

	(void)state;

	accept_text("{'topic':'t','body':'b','delay_ms':1,'key':'k1',"
		    "'ttl_ms':60000}",
		    NOW, &t);
	assert_string_equal(t.key, "k1");
	assert_int_equal(t.ttl_ms, 60000);
	task_clear(&t);

	reject_json(with("key", json_string("")), 400, "invalid_value", "key");
	reject_json(with("key", json_stringn("a\0b", 3)), 400, "invalid_value",
		    "key");
	reject_json(with("ttl_ms", json_integer(-1)), 400, "invalid_value",
		    "ttl_ms");
}

/* priority was accepted and ignored; now it is refused by name, in any
 * form, also beside other errors (it is checked first). */
static void
test_priority_refused(void **state)
{
	struct task_error err;
	struct task t;
	json_t *in;

	(void)state;

	reject_json(with("priority", json_integer(5)), 400, "unsupported_field",
		    "priority");
	reject_json(with("priority", json_integer(0)), 400, "unsupported_field",
		    "priority");
	reject_json(with("priority", json_null()), 400, "unsupported_field",
		    "priority");
	reject_text("{'topic':'t','body':'b','delay_ms':-1,'priority':'high'}",
		    400, "unsupported_field", "priority");
	in = with("priority", json_integer(1));
	assert_int_equal(parse_at(in, NOW, &t, &err), -1);
	assert_non_null(strstr(err.message, "priority is not supported"));
	assert_non_null(strstr(err.message, "due order"));
	json_decref(in);
}

/* NOW is 2023-11-14T22:13:20Z, a Tuesday. */
static void
test_cron_submit(void **state)
{
	struct task t;
	json_t *j;

	(void)state;
	accept_text("{'topic':'t','body':'b','cron':'*/10 * * * * *'}", NOW,
		    &t);
	assert_string_equal(t.cron, "*/10 * * * * *");
	assert_string_equal(t.timezone, "UTC");
	assert_int_equal(t.misfire, TASK_MISFIRE_FIRE_ONCE);
	/* NOW is on a 10 s boundary: the first occurrence is at or after
	 * the submission. */
	assert_int_equal(t.due_at, NOW);
	task_clear(&t);
	/* 09:00 Berlin (CET, +1) on the next weekday. */
	accept_text("{'topic':'t','body':'b','cron':'0 9 * * MON-FRI',"
		    "'timezone':'Europe/Berlin','misfire':'skip',"
		    "'max_occurrences':3,'end_at':1710000000000}",
		    NOW, &t);
	assert_int_equal(t.due_at, INT64_C(1700035200000));
	assert_int_equal(t.misfire, TASK_MISFIRE_SKIP);
	assert_int_equal(t.max_occurrences, 3);
	j = task_to_json(&t, tz_get);
	assert_int_equal(
		json_array_size(json_object_get(j, "next_occurrences")), 3);
	assert_int_equal(json_integer_value(json_array_get(
				 json_object_get(j, "next_occurrences"), 1)),
			 INT64_C(1700035200000) + 24 * 3600000);
	assert_string_equal(json_string_value(json_object_get(j, "misfire")),
			    "skip");
	json_decref(j);
	task_clear(&t);
	/* start_at in the future: the first occurrence at or after it. */
	accept_text("{'topic':'t','body':'b','cron':'0 0 * * *',"
		    "'start_at':1700179200000}",
		    NOW, &t);
	assert_int_equal(t.due_at, INT64_C(1700179200000));
	task_clear(&t);
}

static void
test_cron_reject(void **state)
{
	(void)state;
	reject_json(with("cron", json_string("*/5 * * * *")), 400,
		    "invalid_value", "delay_ms");
	reject_json(with("timezone", json_string("Europe/Paris")), 400,
		    "invalid_value", "timezone");
	reject_text("{'topic':'t','body':'b','cron':'0 0 L * *'}", 400,
		    "invalid_value", "cron.day_of_month");
	reject_text("{'topic':'t','body':'b','cron':'0 0 * * 1#2'}", 400,
		    "invalid_value", "cron.day_of_week");
	reject_text("{'topic':'t','body':'b','cron':'* * *'}", 400,
		    "invalid_value", "cron");
	reject_text("{'topic':'t','body':'b','cron':5}", 400, "invalid_type",
		    "cron");
	reject_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'timezone':'Mars/Olympus'}",
		    400, "invalid_value", "timezone");
	reject_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'timezone':'../../etc/passwd'}",
		    400, "invalid_value", "timezone");
	reject_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'misfire':'later'}",
		    400, "invalid_value", "misfire");
	reject_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'max_occurrences':0}",
		    400, "invalid_value", "max_occurrences");
	reject_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'end_at':1600000000000}",
		    400, "invalid_value", "end_at");
	/* No occurrence before end_at; none ever. */
	reject_text("{'topic':'t','body':'b','cron':'0 0 1 1 *',"
		    "'end_at':1700100000000}",
		    400, "invalid_value", "cron");
	reject_text("{'topic':'t','body':'b','cron':'0 0 30 2 *'}", 400,
		    "invalid_value", "cron");
	reject_text("{'topic':'t','body':'b','delay_ms':5,'misfire':'skip'}",
		    400, "invalid_value", "misfire");
}

/* Without a zone lookup (task_limits.zone NULL) a recurring task is refused
 * on its timezone, never resolved some other way; a one-off task is not
 * affected. */
static void
test_cron_no_zone_lookup(void **state)
{
	const struct task_limits nozone = {MAX_BODY, MAX_DELAY, NULL, 0, NULL};
	struct task_error err;
	struct task t;
	json_t *in = load("{'topic':'t','body':'b','cron':'* * * * *'}");

	(void)state;
	assert_int_equal(task_from_json(in, &nozone, NOW, &t, &err), -1);
	assert_int_equal(err.http, 400);
	assert_string_equal(err.field, "timezone");
	json_decref(in);
	in = load("{'topic':'t','body':'b','delay_ms':5}");
	assert_int_equal(task_from_json(in, &nozone, NOW, &t, &err), 0);
	task_clear(&t);
	json_decref(in);
}

/* A replay submitted later hashes the same; a different schedule does
 * not. */
static void
test_cron_hash(void **state)
{
	struct task a, b, c;

	(void)state;
	accept_text("{'topic':'t','body':'b','cron':'* * * * *'}", NOW, &a);
	accept_text("{'topic':'t','body':'b','cron':'* * * * *'}", NOW + 90000,
		    &b);
	accept_text("{'topic':'t','body':'b','cron':'* * * * *',"
		    "'misfire':'skip'}",
		    NOW, &c);
	assert_true(a.content_hash == b.content_hash);
	assert_true(a.content_hash != c.content_hash);
	task_clear(&a);
	task_clear(&b);
	task_clear(&c);
}

/* A failure after every allocation has happened must free them all. */
static void
test_late_failure_clears(void **state)
{
	(void)state;

	reject_text("{'id':'x1','topic':'t','body':'b','delay_ms':1,'key':'k',"
		    "'headers':{'a':'1'},'callback':{'url':'http://h'},"
		    "'max_attempts':3,'ttl_ms':5,'cron':'* * * * *'}",
		    400, "invalid_value", "delay_ms");
	reject_text("{'id':'x1','topic':'t','body':'b','key':'k',"
		    "'headers':{'a':'1'},'callback':{'url':'http://h'},"
		    "'max_attempts':3,'ttl_ms':5,'cron':'* * * * *'}",
		    400, "invalid_value", "ttl_ms");
}

static void
test_hash_replay(void **state)
{
	static const char sub[] =
		"{'id':'a1','topic':'t','body':'b','delay_ms':5000,"
		"'headers':{'x':'1'},'callback':{'url':'http://h'}}";
	static const char due[] = "{'topic':'t','body':'b','due_at':99}";

	(void)state;

	assert_int_equal(hash_of(sub, NOW), hash_of(sub, NOW + 123456));
	assert_int_equal(hash_of(due, NOW), hash_of(due, NOW + 1));
	assert_int_equal(hash_of("{'topic':'t','body':'b','delay_ms':1,"
				 "'headers':{'a':'1','b':'2'}}",
				 NOW),
			 hash_of("{'topic':'t','body':'b','delay_ms':1,"
				 "'headers':{'b':'2','a':'1'}}",
				 NOW));
	assert_int_equal(
		hash_of("{'topic':'t','body':'b','delay_ms':1,"
			"'callback':{'url':'http://h','method':'PUT'}}",
			NOW),
		hash_of("{'topic':'t','body':'b','delay_ms':1,"
			"'callback':{'method':'PUT','url':'http://h'}}",
			NOW));
}

static void
test_hash_changes(void **state)
{
	static const char *const variants[] = {
		"{'topic':'t','body':'b2','delay_ms':1}",
		"{'topic':'t2','body':'b','delay_ms':1}",
		"{'topic':'t','body':'b','delay_ms':2}",
		"{'topic':'t','body':'b','due_at':1}",
		"{'topic':'t','body':'b','delay_ms':1,'key':'k'}",
		"{'topic':'t','body':'b','delay_ms':1,'key':'k2'}",
		"{'topic':'t','body':'b','delay_ms':1,'headers':{}}",
		"{'topic':'t','body':'b','delay_ms':1,'headers':{'a':'1'}}",
		"{'topic':'t','body':'b','delay_ms':1,'headers':{'a':'2'}}",
		"{'topic':'t','body':'b','delay_ms':1,'headers':{'b':'1'}}",
		"{'topic':'t','body':'b','delay_ms':1,"
		"'headers':{'a':'1','b':'2'}}",
		"{'topic':'t','body':'b','delay_ms':1,"
		"'callback':{'url':'http://h'}}",
		"{'topic':'t','body':'b','delay_ms':1,'max_attempts':2}",
		"{'topic':'t','body':'b','delay_ms':1,'ttl_ms':2}",
		"{'topic':'t','body':'b\\u0000','delay_ms':1}",
		NULL};
	uint64_t h[32];
	int n;

	(void)state;

	h[0] = hash_of("{'topic':'t','body':'b','delay_ms':1}", NOW);
	for (n = 0; variants[n]; n++)
		h[n + 1] = hash_of(variants[n], NOW);
	for (int i = 0; i <= n; i++)
		for (int j = i + 1; j <= n; j++)
			if (h[i] == h[j])
				fail_msg("same hash for submissions %d and %d",
					 i, j);
}

static void
test_to_json(void **state)
{
	static const char sub[] =
		"{'id':'job-1','topic':'orders','body':'x\\u0000y \\u00e9',"
		"'due_at':1700000009000,'key':'k','headers':{'a':'1'},"
		"'callback':{'url':'http://h/cb','method':'POST'},"
		"'max_attempts':5,'ttl_ms':60000}";
	struct task t, back;
	struct task_error err;
	json_t *in, *out;

	(void)state;

	in = load(sub);
	assert_int_equal(parse_at(in, NOW, &t, &err), 0);
	out = task_to_json(&t, tz_get);
	assert_string_equal(json_string_value(json_object_get(out, "id")),
			    "job-1");
	assert_string_equal(json_string_value(json_object_get(out, "topic")),
			    "orders");
	assert_int_equal(json_string_length(json_object_get(out, "body")), 6);
	assert_memory_equal(json_string_value(json_object_get(out, "body")),
			    "x\0y \xc3\xa9", 6);
	assert_int_equal(json_integer_value(json_object_get(out, "due_at")),
			 NOW + 9000);
	assert_string_equal(json_string_value(json_object_get(out, "status")),
			    "scheduled");
	assert_string_equal(
		json_string_value(json_object_get(out, "callback_status")),
		"none");
	assert_string_equal(json_string_value(json_object_get(out, "key")),
			    "k");
	assert_true(json_equal(json_object_get(out, "headers"),
			       json_object_get(in, "headers")));
	assert_true(json_equal(json_object_get(out, "callback"),
			       json_object_get(in, "callback")));
	assert_int_equal(
		json_integer_value(json_object_get(out, "max_attempts")), 5);
	assert_int_equal(json_integer_value(json_object_get(out, "ttl_ms")),
			 60000);
	assert_null(json_object_get(out, "priority"));
	assert_int_equal(json_integer_value(json_object_get(out, "attempt")),
			 0);
	assert_int_equal(json_integer_value(json_object_get(out, "created_at")),
			 NOW);
	assert_true(json_is_null(json_object_get(out, "fired_at")));
	assert_true(json_is_null(json_object_get(out, "delivered_at")));

	/* The submission fields of the view parse back to the same task. */
	json_object_del(out, "status");
	json_object_del(out, "callback_status");
	json_object_del(out, "attempt");
	json_object_del(out, "created_at");
	json_object_del(out, "updated_at");
	json_object_del(out, "fired_at");
	json_object_del(out, "delivered_at");
	assert_int_equal(parse_at(out, NOW, &back, &err), 0);
	assert_string_equal(back.id, t.id);
	assert_string_equal(back.topic, t.topic);
	assert_int_equal(back.body_len, t.body_len);
	assert_memory_equal(back.body, t.body, t.body_len);
	assert_int_equal(back.due_at, t.due_at);
	assert_string_equal(back.key, t.key);
	assert_true(json_equal(back.headers, t.headers));
	assert_true(json_equal(back.callback, t.callback));
	assert_int_equal(back.max_attempts, t.max_attempts);
	assert_int_equal(back.ttl_ms, t.ttl_ms);
	assert_int_equal(back.content_hash, t.content_hash);
	task_clear(&back);
	json_decref(out);

	t.status = TASK_DELIVERED;
	t.callback_status = TASK_CB_RETRYING;
	t.attempt = 2;
	t.fired_at = NOW + 9001;
	t.delivered_at = NOW + 9002;
	out = task_to_json(&t, tz_get);
	assert_string_equal(json_string_value(json_object_get(out, "status")),
			    "delivered");
	assert_string_equal(
		json_string_value(json_object_get(out, "callback_status")),
		"retrying");
	assert_int_equal(json_integer_value(json_object_get(out, "attempt")),
			 2);
	assert_int_equal(json_integer_value(json_object_get(out, "fired_at")),
			 NOW + 9001);
	assert_int_equal(
		json_integer_value(json_object_get(out, "delivered_at")),
		NOW + 9002);
	json_decref(out);
	task_clear(&t);
	json_decref(in);
}

static void
test_to_json_minimal(void **state)
{
	static const char *const absent[] = {
		"key",	  "headers",  "callback", "max_attempts",
		"ttl_ms", "priority", NULL};
	struct task t;
	json_t *out;

	(void)state;

	accept_text("{'topic':'t','body':'b','delay_ms':10}", NOW, &t);
	out = task_to_json(&t, tz_get);
	assert_string_equal(json_string_value(json_object_get(out, "id")),
			    t.id);
	assert_int_equal(json_integer_value(json_object_get(out, "due_at")),
			 NOW + 10);
	for (int i = 0; absent[i]; i++)
		if (json_object_get(out, absent[i]) != NULL)
			fail_msg("'%s' present in a minimal task", absent[i]);
	json_decref(out);
	task_clear(&t);
}

static void
test_status_names(void **state)
{
	static const char *const names[] = {"scheduled", "firing", "delivered",
					    "cancelled", "expired"};
	static const char *const cb_names[] = {"none", "ok", "retrying",
					       "failed"};
	enum task_callback_status cs;
	enum task_status s;

	(void)state;

	assert_int_equal(TASK__STATUS_COUNT, 5);
	for (int i = 0; i < TASK__STATUS_COUNT; i++) {
		assert_string_equal(task_status_name((enum task_status)i),
				    names[i]);
		assert_int_equal(task_status_parse(names[i], &s), 0);
		assert_int_equal(s, i);
	}
	assert_int_equal(TASK__CB_COUNT, 4);
	for (int i = 0; i < TASK__CB_COUNT; i++) {
		assert_string_equal(
			task_callback_status_name((enum task_callback_status)i),
			cb_names[i]);
		assert_int_equal(task_callback_status_parse(cb_names[i], &cs),
				 0);
		assert_int_equal(cs, i);
	}
	assert_int_equal(task_status_parse("bogus", &s), -1);
	assert_int_equal(task_status_parse("", &s), -1);
	assert_int_equal(task_status_parse("ok", &s), -1);
	assert_int_equal(task_callback_status_parse("scheduled", &cs), -1);
	assert_string_equal(task_status_name(TASK__STATUS_COUNT), "unknown");
	assert_string_equal(task_callback_status_name(TASK__CB_COUNT),
			    "unknown");
}

static void
test_error_json(void **state)
{
	struct task_error err;
	json_t *j, *e;

	(void)state;

	assert_int_equal(task_error_set(&err, 400, "invalid_value", "topic",
					"topic %s is bad", "x/y"),
			 -1);
	assert_int_equal(err.http, 400);
	j = task_error_json(&err);
	assert_int_equal(json_object_size(j), 1);
	e = json_object_get(j, "error");
	assert_true(json_is_object(e));
	assert_int_equal(json_object_size(e), 3);
	assert_string_equal(json_string_value(json_object_get(e, "code")),
			    "invalid_value");
	assert_string_equal(json_string_value(json_object_get(e, "message")),
			    "topic x/y is bad");
	assert_string_equal(json_string_value(json_object_get(e, "field")),
			    "topic");
	json_decref(j);

	task_error_set(&err, 413, "too_large", NULL, "too big");
	j = task_error_json(&err);
	e = json_object_get(j, "error");
	assert_string_equal(json_string_value(json_object_get(e, "code")),
			    "too_large");
	assert_null(json_object_get(e, "field"));
	json_decref(j);
}

static int
cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void
test_id_generate(void **state)
{
	enum { N = 10000 };
	char(*ids)[27] = xcalloc(N, sizeof(*ids));
	char a[27], b[27];

	(void)state;

	for (int i = 0; i < N; i++) {
		task_id_generate(ids[i], NOW);
		assert_int_equal(strlen(ids[i]), 26);
		assert_true(task_id_valid(ids[i], 26));
		for (int j = 0; j < 26; j++)
			assert_true((ids[i][j] >= '0' && ids[i][j] <= '9') ||
				    (ids[i][j] >= 'A' && ids[i][j] <= 'Z'));
		assert_memory_equal(ids[i], ids[0], 10);
	}
	qsort(ids, N, sizeof(*ids), cmp_id);
	for (int i = 1; i < N; i++)
		if (!strcmp(ids[i - 1], ids[i]))
			fail_msg("duplicate id %s", ids[i]);
	xfree(ids);

	for (int64_t t = NOW - 100; t < NOW + 1000; t++) {
		task_id_generate(a, t);
		task_id_generate(b, t + 1);
		if (strcmp(a, b) >= 0)
			fail_msg("%s (ms %lld) !< %s", a, (long long)t, b);
	}
	for (int64_t t = 1; t < INT64_C(4000000000000); t = t * 3 + 7) {
		task_id_generate(a, t);
		task_id_generate(b, t * 3 + 7);
		if (strcmp(a, b) >= 0)
			fail_msg("%s (ms %lld) !< %s", a, (long long)t, b);
	}
}

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

/* W3C trace context: strict traceparent (version 00), tracestate list
 * syntax, each refusal naming the field. */
static void
test_trace_validation(void **state)
{
	static const char *const bad_parent[] = {
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
		NULL};
	static const char *const good_state[] = {
		"",
		"a=1",
		"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		" a=1 ,\tb=2",
		"a=1,,b=2",
		"t@sys=x y",
		"0t@s-1=v",
		NULL};
	static const char *const bad_state[] = {
		"a",	   "=1",    "A=1",     "a=",
		"a=1,a=2", "a=b=c", "a=\x7f",  "@s=1",
		"t@=1",	   "t@S=1", "t@s@x=1", "t@abcdefghijklmno=1",
		"1a=1",	   NULL};
	char buf[600];

	(void)state;
	assert_null(trace_parent_invalid(TP, strlen(TP)));
	for (int i = 0; bad_parent[i]; i++)
		if (trace_parent_invalid(bad_parent[i],
					 strlen(bad_parent[i])) == NULL)
			fail_msg("traceparent '%s' accepted", bad_parent[i]);
	for (int i = 0; good_state[i]; i++)
		if (trace_state_invalid(good_state[i], strlen(good_state[i])))
			fail_msg("tracestate '%s' refused: %s", good_state[i],
				 trace_state_invalid(good_state[i],
						     strlen(good_state[i])));
	for (int i = 0; bad_state[i]; i++)
		if (trace_state_invalid(bad_state[i], strlen(bad_state[i])) ==
		    NULL)
			fail_msg("tracestate '%s' accepted", bad_state[i]);
	/* 32 members pass, 33 do not; 512 characters pass, 513 do not */
	buf[0] = '\0';
	for (int i = 0; i < 32; i++)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
			 "%sk%d=v", i ? "," : "", i);
	assert_null(trace_state_invalid(buf, strlen(buf)));
	strcat(buf, ",k32=v");
	assert_non_null(trace_state_invalid(buf, strlen(buf)));
	memset(buf, 'v', 513);
	memcpy(buf, "a=", 2);
	memcpy(buf + 256, ",b=", 3);
	buf[512] = '\0';
	assert_null(trace_state_invalid(buf, 512));
	buf[512] = 'v';
	buf[513] = '\0';
	assert_non_null(trace_state_invalid(buf, 513));
	buf[300] = '\0';
	memset(buf, 'v', 300);
	memcpy(buf, "a=", 2);
	assert_non_null(trace_state_invalid(buf, 300)); /* value > 256 */

	reject_text(
		"{'topic':'t','body':'','delay_ms':1,'traceparent':"
		"'00-00000000000000000000000000000000-00f067aa0ba902b7-01'}",
		400, "invalid_value", "traceparent");
	reject_text("{'topic':'t','body':'','delay_ms':1,'traceparent':5}", 400,
		    "invalid_type", "traceparent");
	reject_text("{'topic':'t','body':'','delay_ms':1,'headers':"
		    "{'traceparent':'00-1'}}",
		    400, "invalid_value", "traceparent");
	{
		json_t *in = load("{'topic':'t','body':'','delay_ms':1}");
		json_t *hd = json_object();
		char name[16];

		for (int i = 0; i < 32; i++) {
			snprintf(name, sizeof(name), "h%d", i);
			json_object_set_new(hd, name, json_string("v"));
		}
		json_object_set_new(in, "headers", hd);
		json_object_set_new(in, "traceparent", json_string(TP));
		reject_json(in, 400, "too_large", "headers");
	}
	reject_text("{'topic':'t','body':'','delay_ms':1,'tracestate':'a=1'}",
		    400, "invalid_value", "tracestate");
	reject_text("{'topic':'t','body':'','delay_ms':1,'traceparent':'" TP
		    "','tracestate':'a=1,a=2'}",
		    400, "invalid_value", "tracestate");
	reject_text(
		"{'topic':'t','body':'','delay_ms':1,'traceparent':'" TP
		"','headers':{'Traceparent':"
		"'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01'}}",
		400, "invalid_value", "traceparent");
}

/* Stored in the headers (so every publish and callback carries it), and
 * not part of the content hash: a client's retry with a new parent-id is
 * a replay. */
static void
test_trace_stored(void **state)
{
	struct task a, b, c;
	char kv[TRACE_KV_LEN];

	(void)state;

	accept_text("{'id':'x','topic':'t','body':'','delay_ms':1,"
		    "'traceparent':'" TP "','tracestate':'a=1',"
		    "'headers':{'h':'v'}}",
		    NOW, &a);
	assert_string_equal(
		json_string_value(json_object_get(a.headers, "traceparent")),
		TP);
	assert_string_equal(
		json_string_value(json_object_get(a.headers, "tracestate")),
		"a=1");
	assert_string_equal(trace_kv(kv, sizeof(kv), a.headers),
			    " trace=4bf92f3577b34da6a3ce929d0e0e4736");
	accept_text("{'id':'x','topic':'t','body':'','delay_ms':1,"
		    "'headers':{'h':'v','TraceParent':"
		    "'00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-00'"
		    "}}",
		    NOW, &b);
	assert_true(a.content_hash == b.content_hash);
	assert_string_equal(
		json_string_value(json_object_get(b.headers, "traceparent")),
		"00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-00");
	assert_null(json_object_get(b.headers, "TraceParent"));
	accept_text("{'id':'x','topic':'t','body':'','delay_ms':1,"
		    "'headers':{'h':'v'}}",
		    NOW, &c);
	assert_true(a.content_hash == c.content_hash);
	assert_string_equal(trace_kv(kv, sizeof(kv), c.headers), "");
	assert_null(json_object_get(c.headers, "traceparent"));
	task_clear(&a);
	task_clear(&b);
	task_clear(&c);
	/* the request's context applies only to a task without its own */
	{
		json_t *in = load("{'topic':'t','body':'','delay_ms':1}");

		trace_default(in, TP, "x=1");
		assert_string_equal(
			json_string_value(json_object_get(in, "traceparent")),
			TP);
		assert_string_equal(
			json_string_value(json_object_get(in, "tracestate")),
			"x=1");
		json_decref(in);
		in = load("{'topic':'t','body':'','delay_ms':1,'headers':{"
			  "'TRACEPARENT':'y'}}");
		trace_default(in, TP, NULL);
		assert_null(json_object_get(in, "traceparent"));
		json_decref(in);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal),
		cmocka_unit_test(test_priority_refused),
		cmocka_unit_test(test_due_at),
		cmocka_unit_test(test_due_at_and_delay),
		cmocka_unit_test(test_time_bounds),
		cmocka_unit_test(test_missing_fields),
		cmocka_unit_test(test_wrong_types),
		cmocka_unit_test(test_unknown_field),
		cmocka_unit_test(test_body_limit),
		cmocka_unit_test(test_body_nul),
		cmocka_unit_test(test_nul_refused_outside_body),
		cmocka_unit_test(test_headers_encoded_limit),
		cmocka_unit_test(test_id_valid),
		cmocka_unit_test(test_id_in_task),
		cmocka_unit_test(test_topic_valid),
		cmocka_unit_test(test_headers),
		cmocka_unit_test(test_callback),
		cmocka_unit_test(test_max_attempts),
		cmocka_unit_test(test_optional_fields),
		cmocka_unit_test(test_cron_submit),
		cmocka_unit_test(test_cron_reject),
		cmocka_unit_test(test_cron_no_zone_lookup),
		cmocka_unit_test(test_cron_hash),
		cmocka_unit_test(test_late_failure_clears),
		cmocka_unit_test(test_hash_replay),
		cmocka_unit_test(test_hash_changes),
		cmocka_unit_test(test_to_json),
		cmocka_unit_test(test_to_json_minimal),
		cmocka_unit_test(test_status_names),
		cmocka_unit_test(test_error_json),
		cmocka_unit_test(test_id_generate),
		cmocka_unit_test(test_trace_validation),
		cmocka_unit_test(test_trace_stored),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
