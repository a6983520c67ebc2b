#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "marker.h"

static void
test_round_trip(void **state)
{
	struct marker m = {.due_at = 1796042152551,
			   .fired_at = 1796042152553,
			   .epoch = 12,
			   .attempt = 3,
			   .recurring = 1,
			   .misfired = 1};
	struct marker d;
	char v[MARKER_VALUE_MAX];
	size_t n;

	(void)state;
	n = marker_encode(&m, v);
	assert_int_equal(n, strlen(v));
	assert_string_equal(v, "1 1796042152551 1796042152553 3 12 3");
	assert_int_equal(marker_decode("order-7", 7, v, n, &d), 0);
	assert_string_equal(d.id, "order-7");
	assert_true(d.due_at == m.due_at && d.fired_at == m.fired_at);
	assert_true(d.epoch == 12 && d.attempt == 3);
	assert_true(d.recurring && d.misfired);
	/* a one-shot task, epoch 1 */
	m.recurring = m.misfired = 0;
	m.epoch = 1;
	n = marker_encode(&m, v);
	assert_int_equal(marker_decode("a", 1, v, n, &d), 0);
	assert_false(d.recurring || d.misfired);
	/* a value is read to its length, not to a NUL */
	v[n] = '7';
	assert_int_equal(marker_decode("a", 1, v, n, &d), 0);
	assert_int_equal(d.epoch, 1);
	assert_int_equal(marker_decode("a", 1, v, n + 1, &d), -1);
}

static void
test_refused(void **state)
{
	static const char *const bad[] = {
		"",
		"1",
		"2 1 2 3 4 0",			  /* another version */
		"1 1 2 3 4",			  /* a field short */
		"1 1 2 3 4 0 5",		  /* a field too many */
		"1 1 2 3 4 4",			  /* unknown flags */
		"1 1 2 -1 4 0",			  /* a negative attempt */
		"1 1  2 3 4 0",			  /* an empty field */
		"1 1 2 3 4 0 ",			  /* a trailing space */
		"1 x 2 3 4 0",			  /* not a number */
		"1 99999999999999999999 2 3 4 0", /* out of range */
	};
	char longkey[TASK_ID_MAX + 2];
	struct marker d;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
			marker_decode("k", 1, bad[i], strlen(bad[i]), &d), -1);
	assert_int_equal(marker_decode(NULL, 0, "1 1 2 3 4 0", 11, &d), -1);
	assert_int_equal(marker_decode("", 0, "1 1 2 3 4 0", 11, &d), -1);
	assert_int_equal(marker_decode("a\0b", 3, "1 1 2 3 4 0", 11, &d), -1);
	memset(longkey, 'k', sizeof(longkey));
	assert_int_equal(
		marker_decode(longkey, TASK_ID_MAX + 1, "1 1 2 3 4 0", 11, &d),
		-1);
	assert_int_equal(
		marker_decode(longkey, TASK_ID_MAX, "1 1 2 3 4 0", 11, &d), 0);
	assert_int_equal(strlen(d.id), TASK_ID_MAX);
}

/* The worker writes markers there and the manager refuses tasks for it:
 * both name it through marker_topic. */
static void
test_topic(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(marker_topic(buf, sizeof(buf), "", "ha.", "/prophet"),
			 0);
	assert_string_equal(buf, "ha.prophet.fired");
	assert_int_equal(marker_topic(buf, sizeof(buf), "", "", "/a/b c"), 0);
	assert_string_equal(buf, "a.b_c.fired");
	assert_int_equal(marker_topic(buf, sizeof(buf), "", "x.", "/"), 0);
	assert_string_equal(buf, "x.prophet.fired");
	assert_int_equal(marker_topic(buf, sizeof(buf), "own", "x.", "/r"), 0);
	assert_string_equal(buf, "own");
	assert_int_equal(marker_topic(buf, 8, "", "ha.", "/prophet"), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_topic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
