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

#include "redis.h"

/*
 * The main connection's reply objects (common/redis.c): one allocation
 * each, the same shapes hiredis' own functions make. Read through a
 * hiredis reader built with them; under ASan a wrong free or a leak of
 * any element fails the run.
 */

static redisReader *
reader(void)
{
	redisReader *rd = redisReaderCreateWithFunctions(
		(redisReplyObjectFunctions *)redis_reply_functions());

	assert_non_null(rd);
	return rd;
}

static redisReply *
read_all(redisReader *rd, const char *buf, size_t len)
{
	void *reply = NULL;

	assert_int_equal(redisReaderFeed(rd, buf, len), REDIS_OK);
	assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
	assert_non_null(reply);
	return reply;
}

static void
test_nested(void **state)
{
	static const char in[] = "*6\r\n$3\r\nabc\r\n:-7\r\n$-1\r\n"
				 "*2\r\n+OK\r\n-ERR no\r\n$0\r\n\r\n"
				 "$4\r\na\0bc\r\n";
	redisReader *rd = reader();
	redisReply *r = read_all(rd, in, sizeof(in) - 1), *e;

	(void)state;
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 6);
	e = r->element[0];
	assert_int_equal(e->type, REDIS_REPLY_STRING);
	assert_int_equal(e->len, 3);
	assert_string_equal(e->str, "abc");
	assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
	assert_true(r->element[1]->integer == -7);
	assert_int_equal(r->element[2]->type, REDIS_REPLY_NIL);
	assert_null(r->element[2]->str);
	e = r->element[3];
	assert_int_equal(e->type, REDIS_REPLY_ARRAY);
	assert_int_equal(e->elements, 2);
	assert_int_equal(e->element[0]->type, REDIS_REPLY_STATUS);
	assert_string_equal(e->element[0]->str, "OK");
	assert_int_equal(e->element[1]->type, REDIS_REPLY_ERROR);
	assert_string_equal(e->element[1]->str, "ERR no");
	assert_int_equal(r->element[4]->len, 0);
	assert_string_equal(r->element[4]->str, "");
	e = r->element[5];
	assert_int_equal(e->len, 4);
	assert_memory_equal(e->str, "a\0bc", 5); /* terminated too */
	redis_reply_functions()->freeObject(r);
	redisReaderFree(rd);
}

static void
test_empty_and_nil_arrays(void **state)
{
	redisReader *rd = reader();
	redisReply *r = read_all(rd, "*0\r\n", 4);

	(void)state;
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 0);
	assert_null(r->element);
	redis_reply_functions()->freeObject(r);
	r = read_all(rd, "*-1\r\n", 5);
	assert_int_equal(r->type, REDIS_REPLY_NIL);
	redis_reply_functions()->freeObject(r);
	redisReaderFree(rd);
}

/* A reply split at every byte is the same reply, made once. */
static void
test_byte_by_byte(void **state)
{
	static const char in[] =
		"*3\r\n$5\r\nhello\r\n:42\r\n*1\r\n$1\r\nx\r\n";
	redisReader *rd = reader();
	void *reply = NULL;
	redisReply *r;

	(void)state;
	for (size_t i = 0; i + 1 < sizeof(in) - 1; i++) {
		assert_int_equal(redisReaderFeed(rd, in + i, 1), REDIS_OK);
		assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_OK);
		assert_null(reply);
	}
	r = read_all(rd, in + sizeof(in) - 2, 1);
	assert_int_equal(r->elements, 3);
	assert_string_equal(r->element[0]->str, "hello");
	assert_true(r->element[1]->integer == 42);
	assert_string_equal(r->element[2]->element[0]->str, "x");
	redis_reply_functions()->freeObject(r);
	redisReaderFree(rd);
}

/* A protocol error half way through an array: the reader frees the part
 * made so far through the same functions. */
static void
test_error_mid_array(void **state)
{
	static const char in[] = "*3\r\n$1\r\na\r\n*2\r\n:1\r\n?bad\r\n";
	redisReader *rd = reader();
	void *reply = NULL;

	(void)state;
	assert_int_equal(redisReaderFeed(rd, in, sizeof(in) - 1), REDIS_OK);
	assert_int_equal(redisReaderGetReply(rd, &reply), REDIS_ERR);
	assert_null(reply);
	redisReaderFree(rd);
}

/* A claim reply's shape, large: 1,000 (attempt, payload) pairs. */
static void
test_large(void **state)
{
	size_t cap = 64 * 1024, n = 0;
	char *buf = malloc(cap);
	redisReader *rd = reader();
	redisReply *r;

	(void)state;
	assert_non_null(buf);
	n += (size_t)snprintf(buf + n, cap - n, "*2000\r\n");
	for (int i = 0; i < 1000; i++)
		n += (size_t)snprintf(buf + n, cap - n,
				      ":%d\r\n$10\r\npayload%03d\r\n", i, i);
	r = read_all(rd, buf, n);
	assert_int_equal(r->elements, 2000);
	for (int i = 0; i < 1000; i++) {
		char want[16];

		snprintf(want, sizeof(want), "payload%03d", i);
		assert_true(r->element[2 * i]->integer == i);
		assert_string_equal(r->element[2 * i + 1]->str, want);
	}
	redis_reply_functions()->freeObject(r);
	redisReaderFree(rd);
	free(buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nested),
		cmocka_unit_test(test_empty_and_nil_arrays),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_error_mid_array),
		cmocka_unit_test(test_large),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
