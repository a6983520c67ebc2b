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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
