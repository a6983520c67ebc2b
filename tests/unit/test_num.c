#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "keys.h"
#include "num.h"

/* num_format_ll writes what snprintf("%lld") writes, length included. */
static void
check(long long v)
{
	char got[NUM_LL_MAX + 8], want[64];
	long long back;
	size_t n;

	memset(got, 'x', sizeof(got));
	n = num_format_ll(got, v);
	snprintf(want, sizeof(want), "%lld", v);
	assert_string_equal(got, want);
	assert_int_equal(n, strlen(want));
	assert_true(n + 1 <= NUM_LL_MAX);
	back = ~v; /* anything but v */
	assert_int_equal(num_parse_ll(want, n, &back), 0);
	assert_true(back == v);
}

static void
test_edges(void **state)
{
	static const long long v[] = {0,
				      1,
				      -1,
				      9,
				      10,
				      -10,
				      99,
				      100,
				      1735689600123LL,
				      -1735689600123LL,
				      LLONG_MAX,
				      LLONG_MIN,
				      LLONG_MAX - 1,
				      LLONG_MIN + 1};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		check(v[i]);
}

/* Every power of ten and its neighbours, both signs, and random values. */
static void
test_sweep(void **state)
{
	long long p = 1;

	for (int i = 0; i < 19; i++) {
		check(p - 1);
		check(p);
		check(p + 1);
		check(-p + 1);
		check(-p);
		check(-p - 1);
		if (i < 18) /* 10^19 does not fit */
			p *= 10;
	}
	srandom(7);
	for (int i = 0; i < 100000; i++) {
		long long r = ((long long)random() << 32) ^ random();

		check(i % 2 ? r : -r);
		check(r >> (i % 63));
	}
}

/* Anything but an optional '-' and digits, or out of range, is refused
 * and leaves the value alone; a length stops the read. */
static void
test_parse_refuses(void **state)
{
	static const char *bad[] = {"",
				    "-",
				    "+1",
				    " 1",
				    "1 ",
				    "1.5",
				    "1e3",
				    "12a",
				    "--1",
				    "0x10",
				    "9223372036854775808",
				    "-9223372036854775809",
				    "99999999999999999999"};
	long long v = 42;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(num_parse_ll(bad[i], strlen(bad[i]), &v), -1);
		assert_true(v == 42);
	}
	assert_int_equal(num_parse_ll("1234", 2, &v), 0);
	assert_true(v == 12);
	assert_int_equal(num_parse_ll("-0", 2, &v), 0);
	assert_true(v == 0);
}

/* The slot key names are what snprintf made of them before, cut alike. */
static void
test_rkey_slot(void **state)
{
	char got[RKEY_MAX], want[RKEY_MAX];

	for (int slot = 0; slot < 20000; slot += slot < 64 ? 1 : 97) {
		rkey_due(got, sizeof(got), slot);
		snprintf(want, sizeof(want), "{prophet:%d}:due", slot);
		assert_string_equal(got, want);
		rkey_inflight(got, sizeof(got), slot);
		snprintf(want, sizeof(want), "{prophet:%d}:inflight", slot);
		assert_string_equal(got, want);
		rkey_hprefix(got, sizeof(got), slot);
		snprintf(want, sizeof(want), "{prophet:%d}:held:", slot);
		assert_string_equal(got, want);
	}
	snprintf(want, sizeof(want), "{prophet:%d}:cancelled", 12345);
	for (size_t len = 1; len < 30; len++) {
		size_t n = len - 1 < strlen(want) ? len - 1 : strlen(want);

		memset(got, 'x', sizeof(got));
		rkey_cancelled(got, len, 12345);
		assert_int_equal(strlen(got), n);
		assert_memory_equal(got, want, n);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_sweep),
		cmocka_unit_test(test_parse_refuses),
		cmocka_unit_test(test_rkey_slot),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
