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

#include "zknode.h"

static void
test_round_trip(void **state)
{
	struct slot_node n = {
		.slot = 7, .epoch = 42, .updated_at = 1796042152551};
	struct slot_node m;
	char *s;

	(void)state;
	strcpy(n.owner, "w1");
	strcpy(n.requested, "host-b_2");
	s = slot_node_encode(&n);
	assert_string_equal(s, "{\"slot\":7,\"owner\":\"w1\",\"requested\":"
			       "\"host-b_2\",\"epoch\":42,\"updated_at\":"
			       "1796042152551}");
	assert_int_equal(slot_node_decode(s, (int)strlen(s), &m), 0);
	assert_int_equal(m.slot, 7);
	assert_string_equal(m.owner, "w1");
	assert_string_equal(m.requested, "host-b_2");
	assert_int_equal(m.epoch, 42);
	assert_int_equal(m.updated_at, 1796042152551);
	free(s);
}

/* The manager writes owner/requested as null on creation. */
static void
test_nulls(void **state)
{
	const char *s = "{\"slot\":3,\"owner\":null,\"requested\":null,"
			"\"epoch\":0,\"updated_at\":1}";
	struct slot_node n;
	char *out;

	(void)state;
	assert_int_equal(slot_node_decode(s, (int)strlen(s), &n), 0);
	assert_string_equal(n.owner, "");
	assert_string_equal(n.requested, "");
	out = slot_node_encode(&n);
	assert_string_equal(out, s);
	free(out);
}

static void
test_rejects(void **state)
{
	static const char *const bad[] = {"",
					  "null",
					  "[]",
					  "{\"slot\":1}",
					  "{\"epoch\":1}",
					  "{\"slot\":\"1\",\"epoch\":1}",
					  "{\"slot\":1,\"epoch\":1,"
					  "\"owner\":5}",
					  "not json"};
	struct slot_node n;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
			slot_node_decode(bad[i], (int)strlen(bad[i]), &n), -1);
	assert_int_equal(slot_node_decode(NULL, 0, &n), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_nulls),
		cmocka_unit_test(test_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
