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

/* The /workers/<id> node: the contract's members in order, metrics_tls only
 * when true, a hostname that is not UTF-8 replaced, and back. */
static void
test_worker_node(void **state)
{
	struct worker_node n = {.pid = 20111, .started_at = 1796051438444};
	struct worker_node m;
	char *s;

	(void)state;
	strcpy(n.id, "p2-7071");
	strcpy(n.host, "vm");
	strcpy(n.version, "0.1.0");
	strcpy(n.metrics, "127.0.0.1:51063");
	s = worker_node_encode(&n);
	assert_string_equal(s, "{\"id\":\"p2-7071\",\"host\":\"vm\",\"pid\":"
			       "20111,\"started_at\":1796051438444,"
			       "\"version\":\"0.1.0\",\"metrics\":"
			       "\"127.0.0.1:51063\"}");
	assert_int_equal(worker_node_decode(s, (int)strlen(s), &m), 0);
	assert_string_equal(m.id, n.id);
	assert_string_equal(m.host, n.host);
	assert_int_equal(m.pid, n.pid);
	assert_int_equal(m.started_at, n.started_at);
	assert_string_equal(m.version, n.version);
	assert_string_equal(m.metrics, n.metrics);
	assert_false(m.metrics_tls);
	free(s);
	n.metrics_tls = 1;
	strcpy(n.host, "h\xff");
	s = worker_node_encode(&n);
	assert_non_null(strstr(s, "\"host\":\"h\xef\xbf\xbd\""));
	assert_non_null(strstr(s, ",\"metrics_tls\":true}"));
	assert_int_equal(worker_node_decode(s, (int)strlen(s), &m), 0);
	assert_true(m.metrics_tls);
	free(s);
	/* Only the id is required; members of another type read as empty. */
	s = "{\"id\":\"w\",\"metrics\":5,\"pid\":\"x\"}";
	assert_int_equal(worker_node_decode(s, (int)strlen(s), &m), 0);
	assert_string_equal(m.id, "w");
	assert_string_equal(m.metrics, "");
	assert_int_equal(m.pid, 0);
	s = "{\"host\":\"vm\"}";
	assert_int_equal(worker_node_decode(s, (int)strlen(s), &m), -1);
	s = "{\"id\":\"\"}";
	assert_int_equal(worker_node_decode(s, (int)strlen(s), &m), -1);
	assert_int_equal(worker_node_decode("[1]", 3, &m), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_nulls),
		cmocka_unit_test(test_rejects),
		cmocka_unit_test(test_worker_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
