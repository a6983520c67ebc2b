#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>

#include "metrics.h"
#include "xmalloc.h"

static char *
render(void)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	char *s;

	metrics_render(b);
	n = evbuffer_get_length(b);
	s = xmalloc(n + 1);
	evbuffer_remove(b, s, n);
	s[n] = '\0';
	evbuffer_free(b);
	return s;
}

/* Label sets are written as they are, and an index without one is left
 * out: series come and go (the pull groups of a manager). */
static void
test_label_sets(void **state)
{
	const char *sets[3] = {"group=\"a\",topic=\"t\"", NULL,
			       "group=\"c\",topic=\"t\""};
	struct metric *m = metrics_register(METRIC_GAUGE, "x_lag_messages",
					    "lag", "group", 3);
	char *s;

	(void)state;
	metric_set_label_sets(m, sets);
	metric_vec_set(m, 0, 4);
	metric_vec_set(m, 1, 5);
	metric_vec_set(m, 2, 6);
	s = render();
	assert_non_null(
		strstr(s, "x_lag_messages{group=\"a\",topic=\"t\"} 4\n"));
	assert_null(strstr(s, " 5\n"));
	assert_non_null(
		strstr(s, "x_lag_messages{group=\"c\",topic=\"t\"} 6\n"));
	xfree(s);
	sets[0] = NULL;
	sets[1] = "group=\"b\",topic=\"t\"";
	s = render();
	assert_null(strstr(s, "group=\"a\""));
	assert_non_null(
		strstr(s, "x_lag_messages{group=\"b\",topic=\"t\"} 5\n"));
	xfree(s);
	metric_set_label_sets(m, NULL);
	s = render();
	assert_non_null(strstr(s, "x_lag_messages{group=\"1\"} 5\n"));
	xfree(s);
	metrics_free_all();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_label_sets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
