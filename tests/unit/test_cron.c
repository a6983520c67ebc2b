#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cron.h"
#include "tz.h"

/* "YYYY-MM-DDTHH:MM:SS[.mmm]Z" -> ms since the epoch. */
static int64_t
utc(const char *s)
{
	int y, mo, d, h, mi, sec, ms = 0;

	if (sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &y, &mo, &d, &h, &mi, &sec,
		   &ms) < 6)
		abort();
	return (tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 +
		sec) * 1000 +
	       ms;
}

static const struct next_case {
	const char *expr, *zone, *after, *want; /* want NULL: none */
} next_cases[] = {
	/* Plain fields, UTC. */
	{"*/15 * * * * *", "UTC", "2025-06-01T10:00:07.500Z",
	 "2025-06-01T10:00:15Z"},
	{"*/15 * * * * *", "UTC", "2025-06-01T10:00:15Z",
	 "2025-06-01T10:00:30Z"},
	{"0 0 * * *", "UTC", "2025-06-01T00:00:00Z", "2025-06-02T00:00:00Z"},
	{"0 0 * * *", "UTC", "2025-06-01T23:59:59.999Z",
	 "2025-06-02T00:00:00Z"},
	{"5,10-12 3 * * *", "UTC", "2025-06-01T03:10:30Z",
	 "2025-06-01T03:11:00Z"},
	{"0 0 * * MON-FRI", "UTC", "2025-06-07T00:00:00Z",
	 "2025-06-09T00:00:00Z"},
	{"30 9 * * 7", "UTC", "2025-06-02T00:00:00Z", "2025-06-08T09:30:00Z"},
	{"0 0 1 JAN,jul *", "UTC", "2025-02-01T00:00:00Z",
	 "2025-07-01T00:00:00Z"},
	/* Both day fields restricted: either matches (13th or a Friday). */
	{"0 0 13 * FRI", "UTC", "2025-06-01T00:00:00Z", "2025-06-06T00:00:00Z"},
	{"0 0 13 * FRI", "UTC", "2025-06-06T00:00:00Z", "2025-06-13T00:00:00Z"},
	{"0 0 ? * 1", "UTC", "2025-06-01T00:00:00Z", "2025-06-02T00:00:00Z"},
	{"0 0 0 1/10 * *", "UTC", "2025-06-12T00:00:00Z",
	 "2025-06-21T00:00:00Z"},
	{"@hourly", "UTC", "2025-06-01T10:00:00Z", "2025-06-01T11:00:00Z"},
	/* Leap days and ends of months. */
	{"0 0 * * *", "UTC", "2024-02-28T12:00:00Z", "2024-02-29T00:00:00Z"},
	{"0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
	{"0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"},
	{"0 0 31 * *", "UTC", "2025-01-31T00:00:00Z", "2025-03-31T00:00:00Z"},
	{"0 12 30 * *", "UTC", "2025-01-31T00:00:00Z", "2025-03-30T12:00:00Z"},
	{"59 23 28-31 2 *", "UTC", "2023-02-28T23:59:00Z",
	 "2024-02-28T23:59:00Z"},
	{"0 0 30 2 *", "UTC", "2025-01-01T00:00:00Z", NULL},
	/* Half-hour zone. */
	{"0 0 * * *", "Asia/Kolkata", "2025-01-01T00:00:00Z",
	 "2025-01-01T18:30:00Z"},
	/* Europe/Berlin, spring forward 2025-03-30 02:00 CET -> 03:00
	 * CEST: 02:30 does not exist and fires at the end of the gap. */
	{"0 30 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z",
	 "2025-03-30T01:00:00Z"},
	{"0 30 2 * * *", "Europe/Berlin", "2025-03-30T01:00:00Z",
	 "2025-03-31T00:30:00Z"},
	{"0 30 2 * * *", "Europe/Berlin", "2025-03-28T12:00:00Z",
	 "2025-03-29T01:30:00Z"},
	{"* * * * * *", "Europe/Berlin", "2025-03-30T00:59:59Z",
	 "2025-03-30T01:00:00Z"},
	{"* * * * * *", "Europe/Berlin", "2025-03-30T01:00:00Z",
	 "2025-03-30T01:00:01Z"},
	{"0 0 3 * * *", "Europe/Berlin", "2025-03-29T12:00:00Z",
	 "2025-03-30T01:00:00Z"},
	/* Fall back 2025-10-26 03:00 CEST -> 02:00 CET: 02:30 happens
	 * twice and fires once, at the first (CEST) instance. */
	{"0 30 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00Z",
	 "2025-10-26T00:30:00Z"},
	{"0 30 2 * * *", "Europe/Berlin", "2025-10-26T00:30:00Z",
	 "2025-10-27T01:30:00Z"},
	{"0 0 * * * *", "Europe/Berlin", "2025-10-26T00:30:00Z",
	 "2025-10-26T02:00:00Z"},
	{"* * * * * *", "Europe/Berlin", "2025-10-26T00:59:59Z",
	 "2025-10-26T02:00:00Z"},
	/* Beyond the file's transitions (rule from the TZif footer). */
	{"0 30 2 * * *", "Europe/Berlin", "2050-03-26T12:00:00Z",
	 "2050-03-27T01:00:00Z"},
	{"0 0 12 * * *", "Europe/Berlin", "2050-07-01T00:00:00Z",
	 "2050-07-01T10:00:00Z"},
	{"0 0 12 * * *", "Europe/Berlin", "2050-12-01T00:00:00Z",
	 "2050-12-01T11:00:00Z"},
	/* Southern hemisphere, DST across the new year (footer rule). */
	{"0 0 12 * * *", "Australia/Sydney", "2050-01-10T00:00:00Z",
	 "2050-01-10T01:00:00Z"},
	{"0 0 12 * * *", "Australia/Sydney", "2050-07-10T00:00:00Z",
	 "2050-07-10T02:00:00Z"},
	/* America/New_York, spring forward 2025-03-09 02:00 EST -> 03:00
	 * EDT (07:00Z), fall back 2025-11-02 02:00 EDT -> 01:00 EST. */
	{"0 30 2 * * *", "America/New_York", "2025-03-08T12:00:00Z",
	 "2025-03-09T07:00:00Z"},
	{"0 30 2 * * *", "America/New_York", "2025-03-09T07:00:00Z",
	 "2025-03-10T06:30:00Z"},
	{"0 30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z",
	 "2025-11-02T05:30:00Z"},
	{"0 30 1 * * *", "America/New_York", "2025-11-02T05:30:00Z",
	 "2025-11-03T06:30:00Z"},
	{"0 0 9 * * MON", "America/New_York", "2025-11-01T00:00:00Z",
	 "2025-11-03T14:00:00Z"},
	{"0 0 9 * * MON", "America/New_York", "2040-06-01T00:00:00Z",
	 "2040-06-04T13:00:00Z"},
};

static void
test_next(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(next_cases) / sizeof(next_cases[0]);
	     i++) {
		const struct next_case *k = &next_cases[i];
		struct cron c;
		struct cron_error e;
		char err[256];
		const struct tz *z = tz_get(k->zone, err, sizeof(err));
		int64_t got, want = k->want ? utc(k->want) : -1;

		if (z == NULL)
			fail_msg("%s", err);
		if (cron_parse(k->expr, &c, &e) < 0)
			fail_msg("'%s': %s", k->expr, e.message);
		got = cron_next(&c, z, utc(k->after));
		if (got != want)
			fail_msg("'%s' %s after %s: got %lld, want %s (%lld)",
				 k->expr, k->zone, k->after, (long long)got,
				 k->want ? k->want : "none", (long long)want);
	}
}

static const struct bad_case {
	const char *expr, *field;
} bad_cases[] = {
	{"* * * *", "cron"},
	{"* * * * * * *", "cron"},
	{"", "cron"},
	{"@reboot", "cron"},
	{"0 0 L * *", "day_of_month"},
	{"0 0 15W * *", "day_of_month"},
	{"0 0 * * 5#3", "day_of_week"},
	{"0 0 * * 5L", "day_of_week"},
	{"61 * * * *", "minute"},
	{"60 * * * * *", "second"},
	{"0 24 * * *", "hour"},
	{"0 0 0 * *", "day_of_month"},
	{"0 0 * 13 *", "month"},
	{"0 0 * FOO *", "month"},
	{"0 0 * * 8", "day_of_week"},
	{"0 0 5-1 * *", "day_of_month"},
	{"0 */0 * * *", "hour"},
	{"0 */x * * *", "hour"},
	{"0 1,,2 * * *", "hour"},
	{"? * * * *", "minute"},
	{"0 0 * * MON-", "day_of_week"},
};

static void
test_reject(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		struct cron c;
		struct cron_error e;
		const char *want;

		if (cron_parse(bad_cases[i].expr, &c, &e) == 0)
			fail_msg("'%s' was accepted", bad_cases[i].expr);
		if (strcmp(e.field, bad_cases[i].field) != 0)
			fail_msg("'%s': field %s, want %s (%s)",
				 bad_cases[i].expr, e.field, bad_cases[i].field,
				 e.message);
		assert_true(strlen(e.message) > 0);
		/* Quoted after "cron ": the message names the part once
		 * ("cron expression: ...", not "cron cron: ..."). */
		want = strcmp(e.field, "cron") ? e.field : "expression";
		if (strncmp(e.message, want, strlen(want)) != 0 ||
		    e.message[strlen(want)] != ':')
			fail_msg("'%s': message %s", bad_cases[i].expr,
				 e.message);
	}
}

static void
test_accept(void **state)
{
	static const char *const ok[] = {
		"0 0 * * WED-FRI", "*/1 * * * * *",  "0 0 ? * SUN",
		"0-59/20 * * * *", "0 0 1-31/2 * *", "@daily",
		"@Weekly",	   "  0 0 * * *  ",  "0 0 * jan-DEC *"};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct cron c;
		struct cron_error e;

		if (cron_parse(ok[i], &c, &e) < 0)
			fail_msg("'%s' rejected: %s", ok[i], e.message);
	}
}

static void
test_zone_names(void **state)
{
	static const char *const bad[] = {"../etc/passwd",  "Europe/../UTC",
					  "/etc/localtime", "Nope/Nowhere",
					  "Europe",	    "",
					  "Europe//Berlin"};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (tz_get(bad[i], err, sizeof(err)) != NULL)
			fail_msg("zone '%s' was accepted", bad[i]);
	assert_non_null(tz_get("America/New_York", err, sizeof(err)));
	/* Cached: the same object again. */
	assert_ptr_equal(tz_get("UTC", err, sizeof(err)),
			 tz_get("UTC", err, sizeof(err)));
}

/* A malformed file never crashes the parser. */
static void
test_tzif_garbage(void **state)
{
	unsigned char buf[200];
	char err[128];

	(void)state;
	srand(7);
	for (int round = 0; round < 2000; round++) {
		size_t n = (size_t)(rand() % (int)sizeof(buf));

		for (size_t i = 0; i < n; i++)
			buf[i] = (unsigned char)rand();
		if (n >= 5)
			memcpy(buf, "TZif2", 5);
		tz_destroy(tz_parse("x", buf, n, err, sizeof(err)));
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_next),
		cmocka_unit_test(test_reject),
		cmocka_unit_test(test_accept),
		cmocka_unit_test(test_zone_names),
		cmocka_unit_test(test_tzif_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
