#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "slot.h"
#include "task.h"

/* FNV-1a 32 written out from its definition, independent of slot.c. */
static uint32_t
ref_fnv1a(const char *s, size_t len)
{
	const uint32_t offset_basis = 0x811c9dc5u;
	const uint32_t prime = 0x01000193u;
	uint32_t h = offset_basis;

	for (size_t i = 0; i < len; i++) {
		h = h ^ (uint8_t)s[i];
		h = h * prime;
	}
	return h;
}

/* murmur3's fmix32, also from its definition. */
static uint32_t
ref_fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static void
test_known_vectors(void **state)
{
	(void)state;

	assert_int_equal(slot_hash("", 0), 2166136261u);
	assert_int_equal(slot_hash("", 0), 0x811c9dc5u);
	assert_int_equal(slot_hash("a", 1), 0xe40c292cu);
	assert_int_equal(slot_hash("foobar", 6), 0xbf9cf968u);
	/* len, not the NUL, ends the id. */
	assert_int_equal(slot_hash("foobarbaz", 6), 0xbf9cf968u);
	assert_int_equal(slot_hash("a\0b", 3), ref_fnv1a("a\0b", 3));
	assert_int_not_equal(slot_hash("a\0b", 3), slot_hash("a", 1));
}

/*
 * Slots are stored with every task: these literal values were computed
 * once and must never change.
 */
static void
test_pinned_slots(void **state)
{
	static const struct {
		const char *id;
		uint32_t hash;
		int slot16;
	} pinned[] = {
		{"a", 0xe40c292cu, 3},
		{"b", 0xe70c2de5u, 2},
		{"order-1", 0x2b7fcd6du, 12},
		{"order-2", 0x287fc8b4u, 0},
		{"user:42", 0x2f6b7b82u, 2},
		{"task.2024-01-01", 0x67a68ce2u, 1},
		{"prophet", 0x1d3266e1u, 11},
		{"job:000001", 0x71efbc75u, 8},
		{"01HZX3KQ7B8M9N0P1Q2R3S4T5V", 0x96dd900fu, 2},
		{"\xc3\xa9", 0x1e9de8c1u, 7},
	};

	(void)state;

	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
		const char *id = pinned[i].id;

		assert_int_equal(slot_hash(id, strlen(id)), pinned[i].hash);
		assert_int_equal(slot_of(id, strlen(id), 16), pinned[i].slot16);
	}
	assert_int_equal(slot_of("order-1", 7, 10), 2);
	assert_int_equal(slot_of("order-1", 7, 1000), 732);
	assert_int_equal(slot_of("prophet", 7, 7), 3);
	assert_int_equal(slot_of("01HZX3KQ7B8M9N0P1Q2R3S4T5V", 26, 1000), 578);
}

static void
test_matches_reference(void **state)
{
	static const char *const ids[] = {
		"",
		"0",
		"x",
		"order-12345",
		"ORDER-12345",
		"tenant.7:invoice:2024-06-30",
		"a_b.c:d-e",
		"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"
		"z",
		"\xff\x80\x7f",
	};
	char gen[27];

	(void)state;

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		size_t n = strlen(ids[i]);
		uint32_t want = ref_fnv1a(ids[i], n);

		assert_int_equal(slot_hash(ids[i], n), want);
		assert_int_equal(slot_of(ids[i], n, 16),
				 (int)(ref_fmix32(want) % 16));
		/* Stable: the same answer every time. */
		assert_int_equal(slot_of(ids[i], n, 16),
				 slot_of(ids[i], n, 16));
	}
	for (int i = 0; i < 1000; i++) {
		task_id_generate(gen, INT64_C(1700000000000) + i);
		assert_int_equal(slot_hash(gen, 26), ref_fnv1a(gen, 26));
	}
}

/* Ids that differ only in the high bits of a byte ('a', 'A', 'q') must
 * still spread over a power-of-two slot count. */
static void
test_high_bits_spread(void **state)
{
	static const char chars[] = "abcdefghijklmnopqrstuvwxyz"
				    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	int hit[16] = {0}, distinct = 0;

	(void)state;

	for (size_t i = 0; i < sizeof(chars) - 1; i++)
		hit[slot_of(&chars[i], 1, 16)]++;
	for (int i = 0; i < 16; i++)
		distinct += hit[i] > 0;
	assert_true(distinct >= 13);
	assert_int_not_equal(slot_of("a", 1, 16), slot_of("A", 1, 16));
}

static void
test_range(void **state)
{
	static const char *const ids[] = {
		"", "a", "foobar", "order-1", "\xff\xff\xff\xff", "user:42"};
	char gen[27];

	(void)state;

	for (int nslots = 1; nslots <= 1024; nslots++) {
		for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
			size_t n = strlen(ids[i]);
			int s = slot_of(ids[i], n, nslots);

			assert_in_range(s, 0, nslots - 1);
			assert_int_equal(
				s, (int)(ref_fmix32(ref_fnv1a(ids[i], n)) %
					 (uint32_t)nslots));
		}
		for (int i = 0; i < 16; i++) {
			task_id_generate(gen, INT64_C(1700000000000));
			assert_in_range(slot_of(gen, 26, nslots), 0,
					nslots - 1);
		}
	}
	assert_int_equal(slot_of("foobar", 6, 1), 0);
}

static void
test_distribution(void **state)
{
	enum { NSLOTS = 16, PER = 10000, N = NSLOTS * PER };
	int count[NSLOTS] = {0};
	char gen[27];

	(void)state;

	for (int i = 0; i < N; i++) {
		task_id_generate(gen, INT64_C(1700000000000) + i / 100);
		count[slot_of(gen, 26, NSLOTS)]++;
	}
	for (int s = 0; s < NSLOTS; s++)
		if (count[s] < PER * 95 / 100 || count[s] > PER * 105 / 100)
			fail_msg("slot %d got %d of %d ids", s, count[s], N);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_vectors),
		cmocka_unit_test(test_pinned_slots),
		cmocka_unit_test(test_high_bits_spread),
		cmocka_unit_test(test_matches_reference),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_distribution),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
