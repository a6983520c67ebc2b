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

#include "assign.h"

#define NSLOTS 16
#define MAXW 12

static char names[MAXW][8];

static void
check_balanced(const char **target, int nslots, const char *const *workers,
	       int nworkers)
{
	int count[MAXW] = {0}, lo = nslots, hi = 0;

	for (int i = 0; i < nslots; i++) {
		int found = -1;

		for (int j = 0; j < nworkers; j++)
			if (target[i] == workers[j])
				found = j;
		assert_true(found >= 0); /* points into workers */
		count[found]++;
	}
	for (int j = 0; j < nworkers; j++) {
		lo = count[j] < lo ? count[j] : lo;
		hi = count[j] > hi ? count[j] : hi;
	}
	assert_true(hi - lo <= 1);
}

static int
moves(const char **before, const char **after, int nslots)
{
	int n = 0;

	for (int i = 0; i < nslots; i++)
		n += before[i] == NULL || after[i] == NULL ||
		     strcmp(before[i], after[i]) != 0;
	return n;
}

/* 3 workers from nothing: 6/5/5; a 4th joins: exactly the fair share
 * (4) moves; one leaves: only its slots move. */
static void
test_join_leave(void **state)
{
	const char *w3[] = {names[0], names[1], names[2]};
	const char *w4[] = {names[0], names[1], names[2], names[3]};
	const char *w3b[] = {names[0], names[2], names[3]};
	const char *none[NSLOTS] = {0}, *a[NSLOTS], *b[NSLOTS], *c[NSLOTS];
	int m;

	(void)state;
	m = assign_compute(NSLOTS, none, w3, 3, a);
	assert_int_equal(m, NSLOTS);
	check_balanced(a, NSLOTS, w3, 3);

	m = assign_compute(NSLOTS, a, w4, 4, b);
	check_balanced(b, NSLOTS, w4, 4);
	assert_int_equal(m, 4);
	assert_int_equal(moves(a, b, NSLOTS), 4);

	/* names[1] leaves: its 4 slots, and nothing else, move. */
	m = assign_compute(NSLOTS, b, w3b, 3, c);
	check_balanced(c, NSLOTS, w3b, 3);
	assert_int_equal(m, 4);
	for (int i = 0; i < NSLOTS; i++)
		if (strcmp(b[i], names[1]) != 0)
			assert_string_equal(b[i], c[i]);
}

static void
test_no_workers(void **state)
{
	const char *h[4] = {names[0], NULL, names[1], NULL}, *t[4];

	(void)state;
	assert_int_equal(assign_compute(4, h, NULL, 0, t), 2);
	for (int i = 0; i < 4; i++)
		assert_null(t[i]);
}

/* The result depends on the set of workers, not their order. */
static void
test_deterministic(void **state)
{
	const char *w[] = {names[2], names[0], names[1]};
	const char *w2[] = {names[1], names[2], names[0]};
	const char *h[NSLOTS], *a[NSLOTS], *b[NSLOTS];

	(void)state;
	for (int i = 0; i < NSLOTS; i++)
		h[i] = i % 5 == 0 ? NULL : names[i % 4];
	assign_compute(NSLOTS, h, w, 3, a);
	assign_compute(NSLOTS, h, w2, 3, b);
	for (int i = 0; i < NSLOTS; i++)
		assert_string_equal(a[i], b[i]);
}

/* Random membership sequences: always balanced, and never more moves than
 * needed: slots without a live holder plus each worker's excess over its
 * quota, with the larger quotas going to those holding the most. */
static void
test_random_sequences(void **state)
{
	const char *h[64], *t[64], *workers[MAXW];
	unsigned seed = 12345;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		int nslots = 1 + (int)(rand_r(&seed) % 64);
		int nw = 1 + (int)(rand_r(&seed) % MAXW);
		int held[MAXW] = {0}, orphans = 0, excess = 0, m;
		int sorted[MAXW];

		for (int j = 0; j < nw; j++)
			workers[j] = names[j];
		for (int i = 0; i < nslots; i++) {
			int r = (int)(rand_r(&seed) % (MAXW + 2));

			h[i] = r < MAXW ? names[r] : NULL;
			if (r < nw)
				held[r]++;
			else
				orphans++;
		}
		m = assign_compute(nslots, h, workers, nw, t);
		check_balanced(t, nslots, workers, nw);
		/* Expected minimum: sort holdings descending; the first
		 * nslots % nw get base+1. */
		for (int j = 0; j < nw; j++)
			sorted[j] = held[j];
		for (int x = 0; x < nw; x++)
			for (int y = x + 1; y < nw; y++)
				if (sorted[y] > sorted[x]) {
					int tmp = sorted[x];

					sorted[x] = sorted[y];
					sorted[y] = tmp;
				}
		for (int j = 0; j < nw; j++) {
			int quota = nslots / nw + (j < nslots % nw);

			excess += sorted[j] > quota ? sorted[j] - quota : 0;
		}
		assert_int_equal(m, orphans + excess);
		assert_int_equal(m, moves(h, t, nslots));
		/* Applying it again changes nothing. */
		{
			const char *t2[64];

			assert_int_equal(
				assign_compute(nslots, t, workers, nw, t2), 0);
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_leave),
		cmocka_unit_test(test_no_workers),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_random_sequences),
	};

	for (int i = 0; i < MAXW; i++)
		snprintf(names[i], sizeof(names[i]), "w%02d", i);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
