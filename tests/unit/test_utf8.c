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
#include "utf8.h"

static void
test_valid_and_invalid(void **state)
{
	static const char *const good[] = {"",
					   "plain",
					   "h\xc3\xa9llo",
					   "\xe6\x97\xa5\xe6\x9c\xac",
					   "\xf0\x9f\x9a\x80",
					   "\xef\xbf\xbf",
					   "\xf4\x8f\xbf\xbf",
					   NULL};
	static const char *const bad[] = {"\xff",
					  "\xfe\xff",
					  "\xc0\xaf",
					  "\xe0\x80\xaf",     /* overlong */
					  "\xed\xa0\x80",     /* surrogate */
					  "\xf4\x90\x80\x80", /* > U+10FFFF */
					  "\xc3",
					  "\xe6\x97",
					  "\xf0\x9f\x9a",
					  "a\x80",
					  NULL}; /* cut */

	for (int i = 0; good[i]; i++)
		assert_true(utf8_valid(good[i], strlen(good[i])));
	for (int i = 0; bad[i]; i++)
		assert_false(utf8_valid(bad[i], strlen(bad[i])));
	assert_true(utf8_valid("a\0b", 3));
}

/* A copy into a small buffer ends on a character boundary, whatever the
 * size: every prefix jansson accepts. */
static void
test_copy_never_cuts_a_character(void **state)
{
	const char *s = "ab\xe6\x97\xa5\xf0\x9f\x9a\x80x\xc3\xa9";
	char buf[32];

	for (size_t cap = 1; cap < 20; cap++) {
		size_t n = utf8_copy(buf, cap, s, strlen(s));
		json_t *j;

		assert_true(n < cap);
		assert_int_equal(strlen(buf), n);
		assert_true(utf8_valid(buf, n));
		assert_memory_equal(buf, s, n); /* a prefix, nothing replaced */
		j = json_string(buf);
		assert_non_null(j);
		json_decref(j);
	}
	assert_int_equal(utf8_copy(buf, 3, s, strlen(s)), 2);
	assert_int_equal(utf8_copy(buf, 5, s, strlen(s)), 2);
	assert_int_equal(utf8_copy(buf, 6, s, strlen(s)), 5);
}

static void
test_copy_replaces_invalid_and_nul(void **state)
{
	char buf[64];

	utf8_copy(buf, sizeof(buf),
		  "a\xff"
		  "b\0c\xc3",
		  6);
	assert_string_equal(buf, "a" UTF8_REPLACEMENT "b" UTF8_REPLACEMENT
				 "c" UTF8_REPLACEMENT);
}

static void
test_format(void **state)
{
	char buf[16], wide[32], big[4096];

	utf8_format(wide, sizeof(wide), "no route %s", "/v1/\xff\xfe");
	assert_string_equal(wide,
			    "no route /v1/" UTF8_REPLACEMENT UTF8_REPLACEMENT);
	/* 13 bytes + U+FFFD do not fit in 16 with the NUL: left out whole */
	utf8_format(buf, sizeof(buf), "no route %s", "/v1/\xff\xfe");
	assert_string_equal(buf, "no route /v1/");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	utf8_format(buf, sizeof(buf), "%s", big);
	assert_int_equal(strlen(buf), sizeof(buf) - 1);
}

static void
test_json_never_null(void **state)
{
	json_t *j = utf8_json("a\xff\0z", 4);

	assert_non_null(j);
	assert_int_equal(json_string_length(j), 6);
	assert_memory_equal(json_string_value(j), "a" UTF8_REPLACEMENT "\0z",
			    6);
	json_decref(j);
	j = utf8_json_str(NULL);
	assert_string_equal(json_string_value(j), "");
	json_decref(j);
}

/* The crash of issue 16: an error quoting a name that is not UTF-8, or one
 * whose multi-byte characters a fixed buffer cuts, still renders. */
static void
test_task_error_renders(void **state)
{
	struct task_error e;
	char name[300];
	json_t *j;
	char *s;

	task_error_set(&e, 400, "unknown_field", "\xff\xfe",
		       "'%s' is not a task field", "\xff\xfe");
	j = task_error_json(&e);
	assert_non_null(j);
	json_decref(j);
	for (size_t i = 0; i + 2 < sizeof(name); i += 2)
		memcpy(name + i, "\xc3\xa9", 2);
	name[sizeof(name) - 2] = '\0';
	for (size_t cut = 1; cut < sizeof(name) - 2; cut += 37) {
		char n2[300];

		memcpy(n2, name, cut);
		n2[cut] = '\0';
		task_error_set(&e, 400, "unknown_field", n2,
			       "'%s' is not a task field", n2);
		j = task_error_json(&e);
		assert_non_null(j);
		s = json_dumps(j, JSON_COMPACT);
		assert_non_null(s);
		free(s);
		json_decref(j);
	}
}

/* One JSON string body (without its quotes) through utf8_json_scan and
 * utf8_json_unescape, held against jansson on the same text. */
static void
check_json_string(const char *body, size_t n)
{
	char *doc = malloc(n + 4), *val = malloc(n + 1);
	struct utf8_json_span sp;
	json_error_t err;
	const char *q;
	json_t *j;

	doc[0] = '[';
	doc[1] = '"';
	memcpy(doc + 2, body, n);
	/* The scan must stop at the string's own closing quote. */
	doc[n + 2] = '"';
	doc[n + 3] = ']';
	j = json_loadb(doc, n + 4, JSON_ALLOW_NUL, &err);
	q = utf8_json_scan(doc + 2, doc + n + 4, &sp);
	if (j == NULL) {
		/* jansson refused: either the scan refuses, or the string
		 * ended early at a quote of its own and what follows is not
		 * the array's end. */
		assert_true(q == NULL || q != doc + n + 3);
	} else {
		json_t *s = json_array_get(j, 0);
		size_t len;

		assert_ptr_equal(q, doc + n + 3);
		assert_int_equal(sp.len, n);
		len = utf8_json_unescape(&sp, val);
		assert_int_equal(len, json_string_length(s));
		assert_memory_equal(val, json_string_value(s), len);
		assert_int_equal(val[len], '\0');
		/* A NUL in the value can only come from \u0000. */
		assert_int_equal(sp.nul, memchr(val, '\0', len) != NULL);
		json_decref(j);
	}
	free(doc);
	free(val);
}

static void
test_json_scan_against_jansson(void **state)
{
	static const char *const table[] = {
		"", "plain", "a longer plain run of more than sixteen bytes",
		"tab\\tnew\\nline", "\\\"quoted\\\"", "\\/\\b\\f\\r\\\\",
		"\\u0041\\u00e9\\u65e5", "\\ud83d\\ude80", "\\u0000nul",
		"h\xc3\xa9llo world, and then some more", "\xf0\x9f\x9a\x80",
		/* refused */
		"\\x", "\\u12", "\\ud83d", "\\ude80", "\\ud83d\\u0041", "\x01",
		"0123456789abcdef\x1f", "\xc0\xaf", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "0123456789abcde\xe6\x97", "\\", "a\"b",
		NULL};
	static const char alphabet[] = "ab\\\"/u0dDfF9\x01\x7f\xc3\xa9\xe6\x97"
				       "\xa5\xf0\x9f\xed\xa0 ";
	char buf[64];

	(void)state;
	for (size_t i = 0; table[i] != NULL; i++)
		check_json_string(table[i], strlen(table[i]));
	srand(7);
	for (int i = 0; i < 200000; i++) {
		size_t n = (size_t)rand() % sizeof(buf);

		for (size_t k = 0; k < n; k++) {
			/* Mostly plain runs, so the 16-byte steps are met. */
			if (rand() % 4 != 0)
				buf[k] = (char)('a' + rand() % 26);
			else
				buf[k] = alphabet[(size_t)rand() %
						  (sizeof(alphabet) - 1)];
		}
		check_json_string(buf, n);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_and_invalid),
		cmocka_unit_test(test_copy_never_cuts_a_character),
		cmocka_unit_test(test_copy_replaces_invalid_and_nul),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_json_never_null),
		cmocka_unit_test(test_task_error_renders),
		cmocka_unit_test(test_json_scan_against_jansson),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
