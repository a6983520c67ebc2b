#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "promtext.h"

/* As metrics_render() writes it, between other metrics. */
static const char sample[] =
	"# HELP prophet_tasks_fired_total Tasks claimed\n"
	"# TYPE prophet_tasks_fired_total counter\n"
	"prophet_tasks_fired_total 12\n"
	"# HELP prophet_fire_lateness_seconds Publish time minus due time\n"
	"# TYPE prophet_fire_lateness_seconds histogram\n"
	"prophet_fire_lateness_seconds_bucket{le=\"0.001\"} 2\n"
	"prophet_fire_lateness_seconds_bucket{le=\"0.01\"} 7\n"
	"prophet_fire_lateness_seconds_bucket{le=\"1\"} 11\n"
	"prophet_fire_lateness_seconds_bucket{le=\"+Inf\"} 12\n"
	"prophet_fire_lateness_seconds_sum 1.625\n"
	"prophet_fire_lateness_seconds_count 12\n"
	"prophet_fire_lateness_seconds_other 5\n"
	"prophet_slot_epoch{slot=\"0\"} 3\n";

static void
test_parse(void **state)
{
	struct promtext_hist h;

	(void)state;
	assert_int_equal(promtext_histogram(sample, strlen(sample),
					    "prophet_fire_lateness_seconds",
					    &h),
			 0);
	assert_int_equal(h.nbuckets, 4);
	assert_true(h.le[0] == 0.001 && h.le[2] == 1 && isinf(h.le[3]));
	assert_true(h.count[0] == 2 && h.count[1] == 7 && h.count[3] == 12);
	assert_true(h.sum == 1.625 && h.total == 12);
}

/* A name that is only a prefix of the histogram's does not match it. */
static void
test_not_found(void **state)
{
	struct promtext_hist h;

	(void)state;
	assert_int_equal(promtext_histogram(sample, strlen(sample),
					    "prophet_fire_lateness", &h),
			 -1);
	assert_int_equal(promtext_histogram(sample, strlen(sample),
					    "prophet_tasks_fired_total", &h),
			 -1);
	assert_int_equal(promtext_histogram("", 0, "x", &h), -1);
}

static void
test_malformed(void **state)
{
	static const char *const bad[] = {
		/* no +Inf bucket */
		"h_bucket{le=\"1\"} 1\nh_count 1\n",
		/* bounds not ascending */
		"h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
		"h_bucket{le=\"+Inf\"} 1\nh_count 1\n",
		/* not a number */
		"h_bucket{le=\"1\"} x\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
		/* another label */
		"h_bucket{le=\"1\",a=\"b\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
		"h_count 1\n",
		/* no _count */
		"h_bucket{le=\"+Inf\"} 1\n",
	};
	struct promtext_hist h;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(
			promtext_histogram(bad[i], strlen(bad[i]), "h", &h),
			-1);
}

/* Text that is not NUL-terminated is read only up to len. */
static void
test_len_bound(void **state)
{
	static const char t[] = "h_bucket{le=\"+Inf\"} 4\nh_count 4\nh_sum 9";
	struct promtext_hist h;

	(void)state;
	assert_int_equal(
		promtext_histogram(t, strlen(t) - strlen("h_sum 9"), "h", &h),
		0);
	assert_true(h.total == 4 && h.sum == 0);
}

static void
test_add(void **state)
{
	struct promtext_hist a, b;

	(void)state;
	assert_int_equal(promtext_histogram(sample, strlen(sample),
					    "prophet_fire_lateness_seconds",
					    &a),
			 0);
	b = a;
	assert_int_equal(promtext_hist_add(&a, &b), 0);
	assert_true(a.count[1] == 14 && a.total == 24 && a.sum == 3.25);
	b.le[1] = 0.02;
	assert_int_equal(promtext_hist_add(&a, &b), -1);
	assert_true(a.total == 24);
}

/* Parsed, but not counts: NaN, infinities, fractions, negatives. */
static void
test_counts(void **state)
{
	static const char *const bad[] = {
		"h_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum NaN\n",
		"h_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum +Inf\n",
		"h_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 1e400\n",
		"h_bucket{le=\"+Inf\"} NaN\nh_count 1\n",
		"h_bucket{le=\"1\"} -1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
		"h_bucket{le=\"+Inf\"} 1.5\nh_count 1\n",
		"h_bucket{le=\"+Inf\"} 1\nh_count Inf\n",
		"h_bucket{le=\"+Inf\"} 1e17\nh_count 1\n",
	};
	struct promtext_hist h;

	(void)state;
	assert_int_equal(promtext_histogram(sample, strlen(sample),
					    "prophet_fire_lateness_seconds",
					    &h),
			 0);
	assert_int_equal(promtext_hist_counts(&h), 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(
			promtext_histogram(bad[i], strlen(bad[i]), "h", &h), 0);
		assert_int_equal(promtext_hist_counts(&h), 0);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_not_found),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_len_bound),
		cmocka_unit_test(test_add),
		cmocka_unit_test(test_counts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
