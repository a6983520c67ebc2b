#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "refclock.h"

/* A reading: the reference answered ref_ms to a TIME sent at
 * mono t0_us, answered rtt_us later, when the wall clock read wall_ms. */
static int
take(struct refclock_state *s, int64_t ref_ms, int64_t t0_us, int64_t rtt_us,
     int64_t wall_ms)
{
	return refclock_take(s, ref_ms * 1000, t0_us, t0_us + rtt_us,
			     wall_ms * 1000);
}

static void
without_sample_the_wall_clock(void **state)
{
	struct refclock_state s = {0};

	(void)state;
	assert_int_equal(refclock_ref_at(&s, 5000000), -1);
	assert_int_equal(refclock_fire_at(&s, 5000000, 1234), 1234);
	assert_int_equal(refclock_due_at(&s, 5000000, 1234), 1234);
	assert_int_equal(refclock_offset_at(&s, 5000000, 1234), 0);
}

/* The offset is measured at the round trip's midpoint. */
static void
offset_at_midpoint(void **state)
{
	struct refclock_state s = {0};

	(void)state;
	/* Sent at mono 10 s, answered at 10.004 s (wall 1,000,004 ms then,
	 * so 1,000,002 at the midpoint); the reference said 1,000,502. */
	assert_int_equal(take(&s, 1000502, 10000000, 4000, 1000004), 1);
	assert_int_equal(s.offset_ms, 500);
	assert_int_equal(refclock_ref_at(&s, 10002000), 1000502);
	assert_int_equal(refclock_ref_at(&s, 11002000), 1001502);
}

/* A wall clock that jumps forwards after the sample: "now" for firing
 * stays the reference (carried on by the monotonic clock); for a due
 * time it is the later, the wall clock. */
static void
forward_jump_never_early(void **state)
{
	struct refclock_state s = {0};
	int64_t mono = 20000000 + 1000, ref = 2000000;

	(void)state;
	take(&s, ref, 20000000, 2000, ref); /* in step */
	/* 3 s later the wall clock reads 60 s ahead. */
	mono += 3000000;
	assert_int_equal(refclock_fire_at(&s, mono, ref + 3000 + 60000),
			 ref + 3000);
	assert_int_equal(refclock_due_at(&s, mono, ref + 3000 + 60000),
			 ref + 3000 + 60000);
	assert_int_equal(refclock_offset_at(&s, mono, ref + 3000 + 60000),
			 -60000);
}

/* Behind: firing goes by the wall clock (the earlier: late, never
 * early), a relative due time by the reference (never short). */
static void
backward_jump(void **state)
{
	struct refclock_state s = {0};
	int64_t mono = 30001000, ref = 3000000;

	(void)state;
	take(&s, ref, 30000000, 2000, ref);
	assert_int_equal(
		refclock_fire_at(&s, mono + 1000000, ref + 1000 - 20000),
		ref + 1000 - 20000);
	assert_int_equal(
		refclock_due_at(&s, mono + 1000000, ref + 1000 - 20000),
		ref + 1000);
}

/* A slow answer does not replace a fresh precise one; an old one is
 * replaced by anything. */
static void
slow_samples_filtered(void **state)
{
	struct refclock_state s = {0};

	(void)state;
	assert_int_equal(take(&s, 1000, 1000000, 500, 1000), 1);
	/* 1 s later, a 50 ms round trip: kept out. */
	assert_int_equal(take(&s, 9999, 2000000, 50000, 2000), 0);
	assert_int_equal(s.ref_ms, 1000);
	/* 1.5 ms: under the 2 ms floor, kept. */
	assert_int_equal(take(&s, 2000, 2000000, 1500, 2000), 1);
	/* 6 s after the last kept one, a slow one is kept. */
	assert_int_equal(take(&s, 8000, 8001000, 50000, 8000), 1);
	assert_int_equal(s.rtt_us, 50000);
	/* A negative round trip (cannot be) is refused. */
	assert_int_equal(refclock_take(&s, 1, 10, 5, 1), 0);
}

/* A sample older than REFCLOCK_STALE_MS is not used. */
static void
stale_sample_ignored(void **state)
{
	struct refclock_state s = {0};
	int64_t later = 1000 + (int64_t)REFCLOCK_STALE_MS * 1000 + 1000;

	(void)state;
	take(&s, 5000, 0, 2000, 5000);
	assert_int_equal(refclock_ref_at(&s, later), -1);
	assert_int_equal(refclock_fire_at(&s, later, 42), 42);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(without_sample_the_wall_clock),
		cmocka_unit_test(offset_at_midpoint),
		cmocka_unit_test(forward_jump_never_early),
		cmocka_unit_test(backward_jump),
		cmocka_unit_test(slow_samples_filtered),
		cmocka_unit_test(stale_sample_ignored),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
