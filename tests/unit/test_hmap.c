#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hmap.h"

#define NKEYS 20000

static char keys[NKEYS][32];

static void
make_keys(void)
{
	for (int i = 0; i < NKEYS; i++)
		snprintf(keys[i], sizeof(keys[i]), "01M8P78NKZ%08dQ%d", i,
			 i % 7);
}

/* Random puts and deletes against a plain array: the map holds exactly
 * what the array does, through every grow and shrink. */
static void
test_matches_reference(void **state)
{
	struct hmap *m = hmap_create();
	static int present[NKEYS];
	size_t n = 0;

	make_keys();
	memset(present, 0, sizeof(present));
	srand(7);
	for (int round = 0; round < 6; round++) {
		/* Fill up, then drain to a few: grows, then shrinks. */
		int fill = round % 2 == 0;

		for (int op = 0; op < 3 * NKEYS; op++) {
			int i = rand() % NKEYS;
			int put = fill ? rand() % 4 != 0 : rand() % 10 == 0;

			if (put) {
				void *old = hmap_put(m, keys[i], keys[i]);

				assert_ptr_equal(old,
						 present[i] ? keys[i] : NULL);
				n += !present[i];
				present[i] = 1;
			} else {
				void *old = hmap_del(m, keys[i]);

				assert_ptr_equal(old,
						 present[i] ? keys[i] : NULL);
				n -= present[i];
				present[i] = 0;
			}
			assert_int_equal(hmap_count(m), n);
			/* Load stays within [1/4, 1] above the minimum. */
			assert_true(n <= hmap_buckets(m));
			assert_true(hmap_buckets(m) == 64 ||
				    n >= hmap_buckets(m) / 4);
		}
		for (int i = 0; i < NKEYS; i++)
			assert_ptr_equal(hmap_get(m, keys[i]),
					 present[i] ? keys[i] : NULL);
	}
	hmap_destroy(m);
}

static void
test_grows_and_shrinks(void **state)
{
	struct hmap *m = hmap_create();
	int other = 0;

	make_keys();
	assert_int_equal(hmap_buckets(m), 64);
	for (int i = 0; i < NKEYS; i++)
		assert_null(hmap_put(m, keys[i], keys[i]));
	assert_int_equal(hmap_count(m), NKEYS);
	assert_int_equal(hmap_buckets(m), 32768);
	/* Replacing keeps the count and hands back the old value. */
	assert_ptr_equal(hmap_put(m, keys[5], &other), keys[5]);
	assert_ptr_equal(hmap_get(m, keys[5]), &other);
	assert_int_equal(hmap_count(m), NKEYS);
	for (int i = 0; i < NKEYS; i++)
		if (i != 5)
			assert_ptr_equal(hmap_del(m, keys[i]), keys[i]);
	assert_null(hmap_del(m, keys[6]));
	assert_int_equal(hmap_count(m), 1);
	/* Back to the initial size, not below. */
	assert_int_equal(hmap_buckets(m), 64);
	assert_ptr_equal(hmap_get(m, keys[5]), &other);
	assert_ptr_equal(hmap_del(m, keys[5]), &other);
	assert_int_equal(hmap_count(m), 0);
	assert_int_equal(hmap_buckets(m), 64);
	hmap_destroy(m);
	hmap_destroy(NULL);
}

struct order {
	char (*seen)[32];
	size_t n;
};

static void
record(const char *key, void *value, void *arg)
{
	struct order *o = arg;

	snprintf(o->seen[o->n++], 32, "%s", key);
}

/* The order of foreach follows the hash: the first 200 of 1,000 keys in
 * it, written to buf. */
static void
map_order(char (*buf)[32])
{
	struct hmap *m = hmap_create();
	char(*all)[32] = calloc(1000, 32);
	struct order o = {all, 0};

	for (int i = 0; i < 1000; i++)
		hmap_put(m, keys[i], keys[i]);
	hmap_foreach(m, record, &o);
	assert_int_equal(o.n, 1000);
	memcpy(buf, all, 200 * 32);
	free(all);
	hmap_destroy(m);
}

/* Two maps, and two processes, put the same keys in different buckets:
 * the hash is keyed at random. */
static void
test_seeded(void **state)
{
	static char a[200][32], b[200][32], c[200][32];
	int fds[2];
	pid_t pid;
	size_t got = 0;

	make_keys();
	map_order(a);
	map_order(b);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		map_order(c);
		_exit(write(fds[1], c, sizeof(c)) == (ssize_t)sizeof(c) ? 0
									: 1);
	}
	close(fds[1]);
	while (got < sizeof(c)) {
		ssize_t r = read(fds[0], (char *)c + got, sizeof(c) - got);

		assert_true(r > 0);
		got += (size_t)r;
	}
	close(fds[0]);
	waitpid(pid, NULL, 0);
	assert_memory_not_equal(a, c, sizeof(a));
	assert_memory_not_equal(b, c, sizeof(b));
}

/* Keys of every length up to a few words (the tail bytes of SipHash's
 * last word) and keys that differ in one byte only. */
static void
test_key_lengths(void **state)
{
	struct hmap *m = hmap_create();
	static char k[40][41];

	for (int i = 0; i < 40; i++) {
		memset(k[i], 'x', (size_t)i);
		k[i][i] = '\0';
		assert_null(hmap_put(m, k[i], k[i]));
	}
	for (int i = 0; i < 40; i++)
		assert_ptr_equal(hmap_get(m, k[i]), k[i]);
	assert_null(hmap_get(m, "xxxxxxxxy"));
	assert_ptr_equal(hmap_get(m, ""), k[0]);
	hmap_destroy(m);
}

/* A set of copies: made on the first add, one entry per distinct key
 * (the caller's buffer may change after), freed whole. Leaks show under
 * the sanitizer build. */
static void
test_string_set(void **state)
{
	struct hmap *set = NULL;
	char buf[32];

	hmap_set_free(&set);
	assert_null(set);
	for (int i = 0; i < 300; i++) {
		snprintf(buf, sizeof(buf), "task-%d", i % 100);
		hmap_set_add(&set, buf);
	}
	snprintf(buf, sizeof(buf), "overwritten");
	assert_non_null(set);
	assert_int_equal(hmap_count(set), 100);
	assert_string_equal(hmap_get(set, "task-42"), "task-42");
	assert_null(hmap_get(set, "task-100"));
	hmap_set_free(&set);
	assert_null(set);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_reference),
		cmocka_unit_test(test_grows_and_shrinks),
		cmocka_unit_test(test_seeded),
		cmocka_unit_test(test_key_lengths),
		cmocka_unit_test(test_string_set),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
