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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
