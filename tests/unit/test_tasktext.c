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
#include "task_same.h"
#include "tz.h"
#include "xmalloc.h"

/*
 * The submission hot path (proto/tasktext.c) against the jansson path it
 * stands in for: whatever it accepts, jansson and task_from_json must
 * accept with the same task; what it declines, the jansson path answers.
 * Tables of both, then mutated documents by the ten thousand.
 */

#define NOW INT64_C(1700000000000)
#define MAX_DELAY (INT64_C(86400000) * 365)

static const struct task_limits lim = {64, MAX_DELAY, NULL, 0, tz_get};

/* jansson, then task_from_json, as the manager's API and Kafka ingest
 * do: 0 with t filled, -1 if either refuses. */
static int
reference(const char *text, size_t len, const char *default_id, struct task *t)
{
	struct task_error err;
	json_t *in;
	int rc;

	memset(t, 0, sizeof(*t));
	in = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
			NULL);
	if (in == NULL)
		return -1;
	if (default_id != NULL && json_is_object(in) &&
	    json_object_get(in, "id") == NULL)
		json_object_set_new(in, "id", json_string(default_id));
	rc = task_from_json(in, &lim, NOW, t, &err);
	json_decref(in);
	return rc;
}

/* Every field of two parsed tasks (the id only if either was given). */
static void
assert_same(const struct task *a, const struct task *b, const char *doc)
{
	if (a->id_given != b->id_given ||
	    (a->id_given && strcmp(a->id, b->id)) ||
	    strlen(a->id) != strlen(b->id) || !task_same_fields(a, b))
		fail_msg("hot path and jansson differ on: %s", doc);
}

/* ' stands for " in the tables. */
static char *
doc(const char *text)
{
	char *s = xstrdup(text);

	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	return s;
}

static const char *const accepted[] = {
	"{'id':'a1','topic':'orders','body':'hello','due_at':1700000060000}",
	"{'topic':'orders','body':'','delay_ms':0}",
	" {\n\t'topic' : 'o.r-d_s' ,\r 'body':'x', 'delay_ms':5000 }\n ",
	"{'body':'b','topic':'t','ttl_ms':0,'max_attempts':100,'delay_ms':1}",
	"{'topic':'t','body':'b','due_at':0,'key':'k\xc3\xa9y','max_attempts':"
	"1}",
	"{'topic':'t','body':'b','due_at':-0}",
	"{'topic':'t','body':'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80',"
	"'delay_ms':10}",
	"{'topic':'t','body':'q\\'\\\\\\/\\b\\f\\n\\r\\t','delay_ms':1}",
	"{'topic':'t','body':'\\u00e9\\u20AC\\ud83d\\ude00\\u0000x',"
	"'delay_ms':1}",
	"{'id':'A.b:c-d_e','topic':'t','body':'b','delay_ms':31536000000}",
	"{'topic':'t','body':'b','due_at':1731536000000,'ttl_ms':31536000000}",
	NULL};

/* Declined: jansson would refuse them, task_from_json would, or they
 * are outside the hot path's shape (jansson answers them). */
static const char *const declined[] = {
	"",
	"[]",
	"{}",
	"{'topic':'t','body':'b'}",
	"{'topic':'t','body':'b','delay_ms':1,'delay_ms':2}",
	"{'topic':'t','body':'b','delay_ms':1,'due_at':2}",
	"{'topic':'t','body':'b','delay_ms':1}x",
	"{'topic':'t','body':'b','delay_ms':1,}",
	"{'topic':'t','body':'b','delay_ms':01}",
	"{'topic':'t','body':'b','delay_ms':1.0}",
	"{'topic':'t','body':'b','delay_ms':1e3}",
	"{'topic':'t','body':'b','delay_ms':-1}",
	"{'topic':'t','body':'b','delay_ms':31536000001}",
	"{'topic':'t','body':'b','due_at':1731536000001}",
	"{'topic':'t','body':'b','delay_ms':null}",
	"{'topic':'t','body':'b','delay_ms':'1'}",
	"{'topic':'t','body':'b','delay_ms':1,'priority':1}",
	"{'topic':'t','body':'b','delay_ms':1,'headers':{'a':'b'}}",
	"{'topic':'t','body':'b','delay_ms':1,'callback':{'url':'http://x'}}",
	"{'topic':'t','body':'b','delay_ms':1,'traceparent':'x'}",
	"{'topic':'t','body':'b','cron':'* * * * *'}",
	"{'topic':'t','body':'b','delay_ms':1,'nope':1}",
	"{'topic':'t\\u0041','body':'b','delay_ms':1}",
	"{'topic':'t t','body':'b','delay_ms':1}",
	"{'topic':'..','body':'b','delay_ms':1}",
	"{'topic':'t','body':7,'delay_ms':1}",
	"{'topic':'t','body':'b','delay_ms':1,'key':''}",
	"{'topic':'t','body':'b','delay_ms':1,'max_attempts':0}",
	"{'topic':'t','body':'b','delay_ms':1,'max_attempts':101}",
	"{'topic':'t','body':'b','delay_ms':1,'ttl_ms':-1}",
	"{'id':'a b','topic':'t','body':'b','delay_ms':1}",
	"{'id':'','topic':'t','body':'b','delay_ms':1}",
	"{'topic':'t','body':'\\ud83d','delay_ms':1}",
	"{'topic':'t','body':'\\ude00','delay_ms':1}",
	"{'topic':'t','body':'\\ud83d\\u0041','delay_ms':1}",
	"{'topic':'t','body':'\\x','delay_ms':1}",
	"{'topic':'t','body':'\\u12','delay_ms':1}",
	"{'topic':'t','body':'a\tb','delay_ms':1}",
	"{'topic':'t','body':'\xc3','delay_ms':1}",
	"{'topic':'t','body':'\xed\xa0\x80','delay_ms':1}",
	"{'topic':'t','body':'\xc0\xaf','delay_ms':1}",
	"{'topic':'t','body':'\xf4\x90\x80\x80','delay_ms':1}",
	"{'topic':'t','body':'0123456789012345678901234567890123456789"
	"01234567890123456789012345','delay_ms':1}",
	"{'topic':'t','body':'b','delay_ms':1",
	"{'topic':'t','body':'b','delay_ms':1}{}",
	"\xef\xbb\xbf{'topic':'t','body':'b','delay_ms':1}",
	NULL};

static void
test_accepted(void **state)
{
	(void)state;
	for (int i = 0; accepted[i] != NULL; i++) {
		char *s = doc(accepted[i]);
		struct task a, b;

		if (!task_from_text(s, strlen(s), &lim, NOW, NULL, &a))
			fail_msg("hot path declined: %s", s);
		assert_int_equal(reference(s, strlen(s), NULL, &b), 0);
		assert_same(&a, &b, s);
		task_clear(&a);
		task_clear(&b);
		xfree(s);
	}
}

static void
test_declined(void **state)
{
	(void)state;
	for (int i = 0; declined[i] != NULL; i++) {
		char *s = doc(declined[i]);
		struct task a;

		if (task_from_text(s, strlen(s), &lim, NOW, NULL, &a))
			fail_msg("hot path accepted: %s", s);
		/* Cleared: nothing to free, nothing left behind. */
		assert_null(a.topic);
		assert_null(a.body);
		xfree(s);
	}
}

/* Values only the text carries: the body's escapes decoded, a NUL kept
 * with its length, delay_ms resolved, the default id. */
static void
test_values(void **state)
{
	char *s = doc("{'topic':'t','body':'a\\u0000\\\"\\ud83d\\ude00',"
		      "'delay_ms':250}");
	struct task t;

	(void)state;
	assert_int_equal(task_from_text(s, strlen(s), &lim, NOW, NULL, &t), 1);
	assert_int_equal(t.body_len, 7);
	assert_memory_equal(t.body, "a\0\"\xf0\x9f\x98\x80", 8);
	assert_int_equal(t.due_at, NOW + 250);
	assert_int_equal(t.delay_ms, 250);
	assert_int_equal(t.id_given, 0);
	assert_int_equal(strlen(t.id), 26);
	task_clear(&t);
	assert_int_equal(
		task_from_text(s, strlen(s), &lim, NOW, "kafka:in:0:7", &t), 1);
	assert_string_equal(t.id, "kafka:in:0:7");
	assert_int_equal(t.id_given, 1);
	task_clear(&t);
	xfree(s);
}

static const char *const batches_ok[] = {
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1}]}",
	" { 'tasks' : [ {'id':'x1','topic':'t','body':'a','delay_ms':1} , "
	"{'id':'x2','topic':'u','body':'\\n','due_at':1700000001000} ] } ",
	NULL};

static const char *const batches_declined[] = {
	"{'tasks':[]}",
	"{'tasks':{}}",
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1}],'x':1}",
	"{'x':1,'tasks':[{'topic':'t','body':'a','delay_ms':1}]}",
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1},]}",
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1}]}]",
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1},"
	"{'topic':'t','body':'a','delay_ms':1,'headers':{}}]}",
	"{'tasks':[{'topic':'t','body':'a','delay_ms':1},"
	"{'topic':'t','body':'a','delay_ms':1},{'topic':'t','body':'a',"
	"'delay_ms':1},{'topic':'t','body':'a','delay_ms':1}]}",
	NULL};

/* A batch the hot path took: jansson's items, one by one, the same. */
static void
check_batch(const char *s, size_t len, struct task *ts, size_t n)
{
	json_t *in = json_loadb(s, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
				NULL);
	json_t *arr = json_object_get(in, "tasks");

	if (in == NULL || json_object_size(in) != 1 ||
	    json_array_size(arr) != n)
		fail_msg("hot path took a batch jansson reads otherwise: %s",
			 s);
	for (size_t i = 0; i < n; i++) {
		char *item = json_dumps(json_array_get(arr, i),
					JSON_COMPACT | JSON_ENCODE_ANY);
		struct task b;

		if (reference(item, strlen(item), NULL, &b) < 0)
			fail_msg("hot path took an item jansson refuses: %s",
				 s);
		assert_same(&ts[i], &b, s);
		task_clear(&b);
		free(item);
	}
	json_decref(in);
}

static void
test_batches(void **state)
{
	struct task *ts;
	size_t n;

	(void)state;
	for (int i = 0; batches_ok[i] != NULL; i++) {
		char *s = doc(batches_ok[i]);

		n = task_batch_from_text(s, strlen(s), &lim, NOW, 3, &ts);
		if (n == 0)
			fail_msg("hot path declined the batch: %s", s);
		check_batch(s, strlen(s), ts, n);
		for (size_t k = 0; k < n; k++)
			task_clear(&ts[k]);
		xfree(ts);
		xfree(s);
	}
	for (int i = 0; batches_declined[i] != NULL; i++) {
		char *s = doc(batches_declined[i]);

		n = task_batch_from_text(s, strlen(s), &lim, NOW, 3, &ts);
		if (n != 0)
			fail_msg("hot path took the batch: %s", s);
		assert_null(ts);
		xfree(s);
	}
}

/* xorshift: the same documents every run. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15u;

static uint32_t
rnd(uint32_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state % n);
}

static const char *const tokens[] = {"\"",
				     "\\",
				     "{",
				     "}",
				     "[",
				     "]",
				     ":",
				     ",",
				     " ",
				     "\n",
				     "0",
				     "1",
				     "9",
				     "-",
				     ".",
				     "e",
				     "a",
				     "\"id\"",
				     "\"key\"",
				     "\"due_at\"",
				     "\"delay_ms\"",
				     "\"ttl_ms\"",
				     "\"max_attempts\"",
				     "\"body\"",
				     "\"topic\"",
				     "null",
				     "true",
				     "\\u0000",
				     "\\u00e9",
				     "\\ud83d",
				     "\\ude00",
				     "\\n",
				     "\\\"",
				     "\xc3\xa9",
				     "\xc3",
				     "\xed\xa0\x80",
				     "\xff",
				     "\x01",
				     "\t",
				     "1e2",
				     "1.5",
				     "\"headers\":{}",
				     "\"priority\":1",
				     "12345678901234567890",
				     "1700000060000",
				     "31536000000"};

/* One edit: a byte replaced, a token inserted, a span deleted or
 * repeated. */
static size_t
mutate(char *buf, size_t len, size_t cap)
{
	size_t at = len ? rnd((uint32_t)len + 1) : 0, k;
	const char *tok;

	switch (rnd(4)) {
	case 0:
		if (len > 0 && at < len) {
			tok = tokens[rnd(sizeof(tokens) / sizeof(tokens[0]))];
			buf[at] = tok[0];
		}
		break;
	case 1:
		tok = tokens[rnd(sizeof(tokens) / sizeof(tokens[0]))];
		k = strlen(tok);
		if (len + k < cap) {
			memmove(buf + at + k, buf + at, len - at);
			memcpy(buf + at, tok, k);
			len += k;
		}
		break;
	case 2:
		k = 1 + rnd(4);
		if (at + k <= len) {
			memmove(buf + at, buf + at + k, len - at - k);
			len -= k;
		}
		break;
	default:
		k = 1 + rnd(12);
		if (at + k <= len && len + k < cap) {
			memmove(buf + at + k, buf + at, len - at);
			len += k;
		}
		break;
	}
	return len;
}

#define FUZZ_ROUNDS 200000

static void
test_mutated(void **state)
{
	char buf[1024];
	size_t took = 0, declined_valid = 0;

	(void)state;
	for (int r = 0; r < FUZZ_ROUNDS; r++) {
		const char *seed = accepted[rnd(
			sizeof(accepted) / sizeof(accepted[0]) - 1)];
		char *s = doc(seed);
		size_t len = strlen(s);
		struct task a, b;
		int fast, ref, edits = 1 + (int)rnd(2);
		const char *def = rnd(4) == 0 ? "kafka:in:3:42" : NULL;

		memcpy(buf, s, len);
		xfree(s);
		for (int e = 0; e < edits; e++)
			len = mutate(buf, len, sizeof(buf));
		fast = task_from_text(buf, len, &lim, NOW, def, &a);
		ref = reference(buf, len, def, &b);
		if (fast) {
			char shown[1100];

			snprintf(shown, sizeof(shown), "%.*s", (int)len, buf);
			if (ref < 0)
				fail_msg("hot path took what jansson refuses: "
					 "%s",
					 shown);
			assert_same(&a, &b, shown);
			task_clear(&a);
			took++;
		} else if (ref == 0) {
			declined_valid++;
		}
		if (ref == 0)
			task_clear(&b);
	}
	/* The edits leave many documents valid: both kinds of outcome are
	 * exercised. */
	print_message("mutated: %d documents, %zu taken by the hot path, "
		      "%zu valid ones left to jansson\n",
		      FUZZ_ROUNDS, took, declined_valid);
	assert_true(took > FUZZ_ROUNDS / 20);
	assert_true(declined_valid > 0);
}

static void
test_mutated_batches(void **state)
{
	char buf[2048];
	size_t took = 0;

	(void)state;
	for (int r = 0; r < FUZZ_ROUNDS / 3; r++) {
		char *s = doc(batches_ok[rnd(2)]);
		size_t len = strlen(s), n;
		struct task *ts;

		memcpy(buf, s, len);
		xfree(s);
		len = mutate(buf, len, sizeof(buf));
		n = task_batch_from_text(buf, len, &lim, NOW, 3, &ts);
		if (n == 0) {
			assert_null(ts);
			continue;
		}
		check_batch(buf, len, ts, n);
		for (size_t k = 0; k < n; k++)
			task_clear(&ts[k]);
		xfree(ts);
		took++;
	}
	assert_true(took > FUZZ_ROUNDS / 60);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_declined),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_mutated),
		cmocka_unit_test(test_mutated_batches),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
