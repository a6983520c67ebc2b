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

#include "http.h"
#include "httpgate.h"

static int
parse(const char *s, struct httpgate_head *h, struct httpgate_error *e)
{
	size_t from = 0, end = httpgate_head_end(s, strlen(s), &from);

	assert_int_equal(end, strlen(s));
	return httpgate_parse(s, end, h, e);
}

static void
refused(const char *s, int status)
{
	struct httpgate_head h;
	struct httpgate_error e;

	assert_int_equal(parse(s, &h, &e), -1);
	assert_int_equal(e.status, status);
	assert_non_null(e.code);
	assert_non_null(e.message);
}

static void
test_head_end_trickled(void **state)
{
	const char *s = "GET / HTTP/1.1\r\nHost: x\r\n\r\nNEXT";
	size_t from = 0, n = strlen(s) - 4, end = 0;

	/* Byte by byte, scanning resumes where it stopped. */
	for (size_t i = 1; i <= n && end == 0; i++)
		end = httpgate_head_end(s, i, &from);
	assert_int_equal(end, n);
	from = 0;
	assert_int_equal(httpgate_head_end("GET / HTTP/1.0\n\nx", 17, &from),
			 16);
	from = 0;
	assert_int_equal(
		httpgate_head_end("GET / HTTP/1.1\r\nA: b\r\n", 22, &from), 0);
}

static void
test_good_heads(void **state)
{
	struct httpgate_head h;
	struct httpgate_error e;

	assert_int_equal(parse("POST /v1/tasks?x=1 HTTP/1.1\r\nHost: a:1\r\n"
			       "Content-Length: 12\r\nAuthorization:  Bearer "
			       "t  \r\nContent-Type: application/json\r\n"
			       "Origin: http://a:1\r\n\r\n",
			       &h, &e),
			 0);
	assert_string_equal(h.method, "POST");
	assert_int_equal(h.path_len, 9);
	assert_memory_equal(h.path, "/v1/tasks", 9);
	assert_int_equal(h.content_length, 12);
	assert_int_equal(h.authorization.len, 8);
	assert_memory_equal(h.authorization.s, "Bearer t", 8);
	assert_int_equal(h.minor, 1);
	assert_false(h.close);
	assert_int_equal(parse("GET http://host/p/q HTTP/1.0\n\n", &h, &e), 0);
	assert_memory_equal(h.path, "/p/q", 4);
	assert_true(h.close);
	assert_int_equal(
		parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &h,
		      &e),
		0);
	assert_false(h.close);
	assert_int_equal(
		parse("GET / HTTP/1.1\r\nX: \xc3\xa9\xff\r\n\r\n", &h, &e),
		0); /* obs-text in values is allowed */
	assert_int_equal(parse("POST / HTTP/1.1\r\nExpect: 100-Continue\r\n"
			       "Content-Length: 0\r\n\r\n",
			       &h, &e),
			 0);
}

static void
test_bad_heads(void **state)
{
	refused("GET /\xff HTTP/1.1\r\n\r\n", 400);
	refused("GET /a b HTTP/1.1\r\n\r\n", 400);
	refused("GET / HTTP/1.1 \r\n\r\n", 400);
	refused("GET  / HTTP/1.1\r\n\r\n", 400);
	refused("GET / HTTP/2.0\r\n\r\n", 505);
	refused("GET / HTCPCP/1.0\r\n\r\n", 400);
	refused("BREW / HTTP/1.1\r\n\r\n", 501);
	refused("G(T / HTTP/1.1\r\n\r\n", 400);
	refused("GET * HTTP/1.1\r\n\r\n", 400);
	refused("GET ftp://x/ HTTP/1.1\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nNo-Colon\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\n: empty\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400);
	refused("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1"
		"\r\n\r\n",
		400);
	refused("GET / HTTP/1.1\r\nAuthorization: Bearer a\r\n"
		"authorization: Bearer b\r\n\r\n",
		400);
	refused("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400);
	refused("GET / HTTP/1.1\r\nOrigin: http://a\r\nOrigin: null\r\n\r\n",
		400);
	refused("GET / HTTP/1.1\r\nSec-Fetch-Site: none\r\n"
		"Sec-Fetch-Site: cross-site\r\n\r\n",
		400);
	refused("POST / HTTP/1.1\r\nContent-Type: application/json\r\n"
		"Content-Type: text/plain\r\n\r\n",
		400);
	refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
	refused("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400);
	refused("POST / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n"
		"\r\n",
		413);
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		411);
	refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
	refused("POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417);
	refused("HEAD / HTTP/1.1\r\nContent-Length: 2\r\n\r\n", 400);
	refused("\r\n\r\n", 400);
}

static void
noop(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)ctx;
	(void)req;
	(void)a;
	(void)n;
}

static const struct http_route routes[] = {
	{EVHTTP_REQ_POST, "/v1/tasks", 1, HTTP_SHAPE_NATIVE, 0, noop},
	{EVHTTP_REQ_GET, "/v1/tasks", 2, HTTP_SHAPE_NATIVE, 0, noop},
	{EVHTTP_REQ_GET, "/v1/tasks/{}", 2, HTTP_SHAPE_NATIVE, 0, noop},
	{EVHTTP_REQ_POST, "/v1/tasks/batch", 1, HTTP_SHAPE_NATIVE, 0, noop},
	{EVHTTP_REQ_POST, "/v1/tasks/{}/restore", 4, HTTP_SHAPE_NATIVE, 0,
	 noop},
	{EVHTTP_REQ_GET, "/delete", 1, HTTP_SHAPE_MYKIT, 0, noop},
};
#define NR (sizeof(routes) / sizeof(routes[0]))

static const struct http_route *
find(const char *path, unsigned m, const struct http_route **any)
{
	return http_route_find(routes, NR, path, strlen(path), m, any);
}

static void
test_routes(void **state)
{
	const struct http_route *any;

	assert_ptr_equal(find("/v1/tasks", EVHTTP_REQ_POST, &any), &routes[0]);
	assert_ptr_equal(find("/v1/tasks", EVHTTP_REQ_GET, &any), &routes[1]);
	assert_ptr_equal(find("/v1/tasks", EVHTTP_REQ_HEAD, &any), &routes[1]);
	assert_null(find("/v1/tasks", EVHTTP_REQ_PUT, &any));
	assert_ptr_equal(any, &routes[0]); /* a 405, not a 404 */
	assert_ptr_equal(find("/v1/tasks/abc", EVHTTP_REQ_GET, &any),
			 &routes[2]);
	/* A literal path wins over a {} segment: 405, not "task batch". */
	assert_null(find("/v1/tasks/batch", EVHTTP_REQ_GET, &any));
	assert_ptr_equal(any, &routes[3]);
	assert_ptr_equal(find("/v1/tasks/a%2Fb/restore", EVHTTP_REQ_POST, &any),
			 &routes[4]);
	assert_null(find("/v1/tasks/", EVHTTP_REQ_GET, &any));
	assert_null(any);
	assert_null(find("/v1/tasks/a/b", EVHTTP_REQ_GET, &any));
	assert_null(any);
	assert_null(find("/v1/taskss", EVHTTP_REQ_GET, &any));
	assert_null(find("/delete/", EVHTTP_REQ_GET, &any));
	assert_ptr_equal(find("/delete", EVHTTP_REQ_GET, &any), &routes[5]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_head_end_trickled),
		cmocka_unit_test(test_good_heads),
		cmocka_unit_test(test_bad_heads),
		cmocka_unit_test(test_routes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
