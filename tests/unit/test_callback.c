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

#include <jansson.h>

#include "callback.h"
#include "whsign.h"
#include "payload.h"
#include "task.h"
#include "tbucket.h"
#include "xmalloc.h"

/* Without jitter the delays double from the base up to the cap. */
static void
test_backoff_doubles_and_caps(void **state)
{
	assert_int_equal(callback_backoff_ms("a", 2, 200, 10000, 0), 200);
	assert_int_equal(callback_backoff_ms("a", 3, 200, 10000, 0), 400);
	assert_int_equal(callback_backoff_ms("a", 4, 200, 10000, 0), 800);
	assert_int_equal(callback_backoff_ms("a", 7, 200, 10000, 0), 6400);
	assert_int_equal(callback_backoff_ms("a", 8, 200, 10000, 0), 10000);
	assert_int_equal(callback_backoff_ms("a", 100, 200, 10000, 0), 10000);
	assert_int_equal(callback_backoff_ms("a", 2, 5000, 3000, 0), 3000);
}

/* Jitter stays within [d - d*pct/100, d], is the same for the same
 * (id, attempt) and spreads over ids. */
static void
test_backoff_jitter(void **state)
{
	int64_t lo = 1000000, hi = 0;
	char id[32];

	for (int i = 0; i < 2000; i++) {
		int64_t d;

		snprintf(id, sizeof(id), "task-%d", i);
		d = callback_backoff_ms(id, 3, 1000, 600000, 30);
		assert_true(d >= 1400 && d <= 2000);
		assert_int_equal(d,
				 callback_backoff_ms(id, 3, 1000, 600000, 30));
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
	}
	assert_true(lo < 1450);
	assert_true(hi > 1950);
	/* jitter 100%: anywhere in [0, d] */
	assert_true(callback_backoff_ms("x", 2, 1000, 100000, 100) <= 1000);
}

static void
test_retry_id(void **state)
{
	char buf[TASK_ID_MAX + 32], longid[TASK_ID_MAX + 1];

	callback_retry_id("order-7", 2, buf, sizeof(buf));
	assert_string_equal(buf, "cbr:order-7:2");
	assert_true(task_id_valid(buf, strlen(buf)));
	memset(longid, 'a', TASK_ID_MAX);
	longid[TASK_ID_MAX] = '\0';
	callback_retry_id(longid, 5, buf, sizeof(buf));
	assert_true(strlen(buf) <= TASK_ID_MAX);
	assert_true(task_id_valid(buf, strlen(buf)));
	assert_int_equal(strncmp(buf, "cbr:h", 5), 0);
	assert_string_equal(buf + strlen(buf) - 2, ":5");
	/* deterministic, and differs with the attempt */
	{
		char again[sizeof(buf)], other[sizeof(buf)];

		callback_retry_id(longid, 5, again, sizeof(again));
		callback_retry_id(longid, 6, other, sizeof(other));
		assert_string_equal(buf, again);
		assert_string_not_equal(buf, other);
	}
}

static void
test_origin(void **state)
{
	/* url, then origin and host, or NULL for a URL refused (-1). The
	 * host is the one libcurl connects to, not the text: percent-decoded,
	 * numeric IPv4 forms normalised, a fragment or query not part of the
	 * authority, characters libcurl refuses in a host refused. */
	static const char *const cases[][3] = {
		{"http://Example.COM/x?y", "example.com:80", "example.com"},
		{"https://u:p@host.io:8443", "host.io:8443", "host.io"},
		{"http://[::1]:9000/cb", "[::1]:9000", "::1"},
		/* a '@' in the path is not userinfo */
		{"http://a.b/x@evil.com", "a.b:80", "a.b"},
		{"http://evil.com@good.com/", "good.com:80", "good.com"},
		{"ftp://x", NULL, NULL},
		{"http://:80/", NULL, NULL},
		{"http://h:99999/", NULL, NULL},
		{"http://h:8x/", NULL, NULL},
		{"http://h:0/", NULL, NULL},
		{"http://ex%61mple.com/", "example.com:80", "example.com"},
		{"http://0x7f.1:8080/", "127.0.0.1:8080", "127.0.0.1"},
		{"http://evil.com#@good.com/", "evil.com:80", "evil.com"},
		{"http://evil.com\\.good.com/", NULL, NULL},
		{"http://evil.com%2f.good.com/", NULL, NULL},
		{"HTTPS://X.io", "x.io:443", "x.io"},
	};
	char o[300], h[300];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = callback_url_origin(cases[i][0], o, sizeof(o), h,
					     sizeof(h));

		if (cases[i][1] == NULL) {
			if (rc != -1)
				fail_msg("%s: accepted as %s", cases[i][0], o);
			continue;
		}
		if (rc != 0)
			fail_msg("%s: refused", cases[i][0]);
		assert_string_equal(o, cases[i][1]);
		assert_string_equal(h, cases[i][2]);
	}
}

static void
test_allow_list(void **state)
{
	assert_true(callback_host_allowed("", "anything.example"));
	assert_true(callback_host_allowed("a.com, b.com", "B.COM"));
	assert_false(callback_host_allowed("a.com,b.com", "c.com"));
	assert_false(callback_host_allowed("a.com", "xa.com"));
	assert_true(callback_host_allowed(".corp.io", "corp.io"));
	assert_true(callback_host_allowed(".corp.io", "api.corp.io"));
	assert_false(callback_host_allowed(".corp.io", "evilcorp.io"));
	assert_false(callback_host_allowed("127.0.0.1", "127.0.0.2"));
}

static void
test_spec_parse(void **state)
{
	struct callback_spec cb;
	const char *s = "{\"url\":\"https://x.io/cb\",\"method\":\"PUT\","
			"\"headers\":{\"A\":\"1\"},\"timeout_ms\":1500,"
			"\"max_attempts\":3}";

	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	assert_string_equal(cb.url, "https://x.io/cb");
	assert_string_equal(cb.method, "PUT");
	assert_int_equal(cb.timeout_ms, 1500);
	assert_int_equal(cb.max_attempts, 3);
	callback_spec_clear(&cb);
	s = "{\"url\":\"http://x\"}";
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	assert_string_equal(cb.method, "POST");
	assert_int_equal(cb.max_attempts, 0);
	callback_spec_clear(&cb);
	s = "{\"url\":\"file:///etc/passwd\"}";
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), -1);
	s = "{\"url\":\"http://x\",\"method\":\"TRACE\"}";
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), -1);
	s = "not json";
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), -1);
}

/* The worker's header round-trips through the notifier's parser. */
static void
test_header_round_trip(void **state)
{
	json_t *c = json_pack("{s:s, s:s, s:{s:s}}", "url", "http://h:1/p",
			      "method", "DELETE", "headers", "K", "v");
	char *h = callback_header_encode(c, 7);
	struct callback_spec cb;
	json_t *back;

	assert_int_equal(callback_spec_parse(h, strlen(h), &cb), 0);
	assert_string_equal(cb.method, "DELETE");
	assert_int_equal(cb.max_attempts, 7);
	back = callback_spec_json(&cb);
	assert_string_equal(json_string_value(json_object_get(back, "url")),
			    "http://h:1/p");
	assert_null(json_object_get(back, "max_attempts"));
	json_decref(back);
	callback_spec_clear(&cb);
	free(h);
	json_decref(c);
}

static int
has(char **h, const char *line)
{
	for (size_t i = 0; h[i] != NULL; i++)
		if (!strcmp(h[i], line))
			return 1;
	return 0;
}

static size_t
count(char **h)
{
	size_t i = 0;

	while (h[i] != NULL)
		i++;
	return i;
}

static void
test_headers_build(void **state)
{
	struct callback_spec cb;
	const char *s = "{\"url\":\"http://x\",\"headers\":{"
			"\"Authorization\":\"Bearer t\","
			"\"X-Prophet-Id\":\"spoof\","
			"\"Bad\":\"a\\r\\nInjected: 1\","
			"\"Bad Name\":\"v\","
			"\"Content-Type\":\"application/json\"}}";
	char **h;

	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	h = callback_headers_build(&cb, "job-9", 2, 1700000000000, 0, NULL,
				   NULL, NULL);
	assert_true(has(h, "Authorization: Bearer t"));
	assert_true(has(h, "Content-Type: application/json"));
	assert_true(has(h, "X-Prophet-Id: job-9"));
	assert_true(has(h, "X-Prophet-Attempt: 2"));
	assert_true(has(h, "X-Prophet-Due-At: 1700000000000"));
	assert_false(has(h, "X-Prophet-Id: spoof"));
	/* one-shot: the key is the id and the due time */
	assert_true(has(h, "Idempotency-Key: job-9:1700000000000"));
	assert_int_equal(count(h), 6);
	callback_headers_free(h);
	callback_spec_clear(&cb);

	/* a body method gets a default content type, GET does not */
	callback_spec_route("http://x/", &cb);
	h = callback_headers_build(&cb, "a", 1, 5, 0, NULL, NULL, NULL);
	assert_true(has(h, "Content-Type: application/octet-stream"));
	assert_int_equal(count(h), 5);
	callback_headers_free(h);
	xfree(cb.method);
	cb.method = xstrdup("GET");
	/* recurring: the key is the id and the occurrence, whatever the
	 * attempt */
	h = callback_headers_build(&cb, "a", 3, 5, 1800000000000, NULL, NULL,
				   NULL);
	assert_true(has(h, "Idempotency-Key: a:1800000000000"));
	assert_int_equal(count(h), 4);
	callback_headers_free(h);
	callback_spec_clear(&cb);

	/* the task's trace context replaces the spec's headers of its names */
	s = "{\"url\":\"http://x\",\"method\":\"GET\",\"headers\":{"
	    "\"TraceParent\":\"spoof\",\"tracestate\":\"spoof=1\"}}";
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	h = callback_headers_build(
		&cb, "a", 1, 5, 0,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"k=v", NULL);
	assert_true(has(
		h, "traceparent: "
		   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	assert_true(has(h, "tracestate: k=v"));
	assert_false(has(h, "TraceParent: spoof"));
	assert_int_equal(count(h), 6);
	callback_headers_free(h);
	/* without one, the spec's headers go as they are */
	h = callback_headers_build(&cb, "a", 1, 5, 0, NULL, NULL, NULL);
	assert_true(has(h, "TraceParent: spoof"));
	assert_int_equal(count(h), 6);
	callback_headers_free(h);
	callback_spec_clear(&cb);
}

/* The Standard Webhooks reference vector (their test suite's), and a
 * second key: one signature each, space-separated. */
static void
test_signing_vector(void **state)
{
	struct whsign ks;
	char err[200], *sig;
	const char *body = "{\"test\": 2432232314}";

	assert_int_equal(whsign_parse(&ks,
				      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
				      err, sizeof(err)),
			 0);
	assert_int_equal(ks.n, 1);
	assert_int_equal(ks.len[0], 24);
	sig = whsign_header(&ks, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
			    body, strlen(body));
	assert_string_equal(sig,
			    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	xfree(sig);
	/* the same key second: its signature second, unchanged */
	assert_int_equal(
		whsign_parse(
			&ks,
			"  whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
			" whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ",
			err, sizeof(err)),
		0);
	assert_int_equal(ks.n, 2);
	assert_int_equal(ks.len[0], 32);
	sig = whsign_header(&ks, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
			    body, strlen(body));
	assert_int_equal(strlen(sig), 48 + 47);
	assert_string_equal(sig + 48,
			    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	assert_memory_equal(sig, "v1,", 3);
	assert_int_equal(sig[47], ' ');
	xfree(sig);
	whsign_wipe(&ks);
	assert_int_equal(ks.n, 0);
}

/* Keys that are refused, each with a reason that names no key bytes. */
static void
test_signing_keys_refused(void **state)
{
	static const char *const bad[] = {
		"", "   ",
		/* no prefix */
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_",
		/* not base64: a character, the length, padding inside */
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS!",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
		"whsec_MfKQ9r8GKYqrTwjU=D8ILPZIo2LaLaSw",
		/* 18 bytes: too short */
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZI",
		/* 66 bytes: too long */
		"whsec_"
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		"AAAAAAAAAA"
		"AAAAAAAAAAAAAAAA",
		/* five keys */
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		/* a good key, then a bad one */
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_xyz", NULL};
	struct whsign ks;
	char err[200];

	for (size_t i = 0; bad[i] != NULL; i++) {
		err[0] = '\0';
		assert_int_equal(whsign_parse(&ks, bad[i], err, sizeof(err)),
				 -1);
		assert_true(err[0] != '\0');
		assert_null(strstr(err, "MfKQ"));
		assert_int_equal(ks.n, 0);
	}
	/* 64 bytes is the most */
	assert_int_equal(
		whsign_parse(
			&ks,
			"whsec_"
			"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
			err, sizeof(err)),
		0);
	assert_int_equal(ks.len[0], 64);
}

/* Signed headers: webhook-id is the Idempotency-Key Prophet makes (also
 * when the spec sets its own), the spec's webhook-* are replaced, and
 * GET signs no body. */
static void
test_headers_signed(void **state)
{
	struct callback_spec cb;
	struct whsign ks;
	struct callback_signing sign = {&ks, 1614265330,
					"{\"test\": 2432232314}", 20};
	const char *s = "{\"url\":\"http://x\",\"headers\":{"
			"\"Webhook-Signature\":\"v1,forged\","
			"\"webhook-id\":\"forged\","
			"\"Idempotency-Key\":\"own\"}}";
	char err[200], **h, *want;

	assert_int_equal(whsign_parse(&ks,
				      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
				      err, sizeof(err)),
			 0);
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	h = callback_headers_build(&cb, "job-9", 2, 1700000000000, 0, NULL,
				   NULL, &sign);
	assert_true(has(h, "Idempotency-Key: own"));
	assert_true(has(h, "webhook-id: job-9:1700000000000"));
	assert_true(has(h, "webhook-timestamp: 1614265330"));
	assert_false(has(h, "Webhook-Signature: v1,forged"));
	assert_false(has(h, "webhook-id: forged"));
	want = whsign_header(&ks, "job-9:1700000000000", 1614265330, sign.body,
			     sign.body_len);
	{
		char line[200];

		snprintf(line, sizeof(line), "webhook-signature: %s", want);
		assert_true(has(h, line));
	}
	xfree(want);
	/* Idempotency-Key, Content-Type, X-Prophet-* x3, webhook-* x3 */
	assert_int_equal(count(h), 8);
	callback_headers_free(h);
	/* GET: the body is not sent, so not signed */
	xfree(cb.method);
	cb.method = xstrdup("GET");
	h = callback_headers_build(&cb, "job-9", 2, 1700000000000, 0, NULL,
				   NULL, &sign);
	want = whsign_header(&ks, "job-9:1700000000000", 1614265330, "", 0);
	{
		char line[200];

		snprintf(line, sizeof(line), "webhook-signature: %s", want);
		assert_true(has(h, line));
	}
	xfree(want);
	callback_headers_free(h);
	/* no keys: unsigned, the spec's webhook-* headers go as they are */
	ks.n = 0;
	h = callback_headers_build(&cb, "job-9", 2, 1700000000000, 0, NULL,
				   NULL, &sign);
	assert_true(has(h, "Webhook-Signature: v1,forged"));
	assert_true(has(h, "webhook-id: forged"));
	callback_headers_free(h);
	callback_spec_clear(&cb);
	whsign_wipe(&ks);
}

/* Framing and hop-by-hop headers, names that are not tokens, values
 * that would inject headers. */
static void
test_header_refused(void **state)
{
	static const char *const framing[] = {"Host",
					      "host",
					      "HOST",
					      "Content-Length",
					      "Transfer-Encoding",
					      "Connection",
					      "Keep-Alive",
					      "Upgrade",
					      "TE",
					      "Trailer",
					      "Expect",
					      "Proxy-Authorization",
					      "proxy-connection",
					      "HTTP2-Settings",
					      NULL};
	static const char *const bad_names[] = {
		"Bad Name", "a:b", "a\"b", "(x)", "x/y", "h\xc3\xa9",
		"a\tb",	    "",	   "[x]",  "a,b", "a;b", "a=b",
		"a@b",	    "{x}", "a?",   NULL};
	static const char *const fine[] = {
		"X-Ok",	    "Authorization", "Content-Type",
		"Hostname", "Trailers",	     "Tea",
		"X-Proxy",  "Accept",	     "!#$%&'*+-.^_`|~09azAZ",
		NULL};

	(void)state;
	for (int i = 0; framing[i]; i++)
		if (callback_header_refused(framing[i], "v", 1) == NULL)
			fail_msg("%s accepted", framing[i]);
	for (int i = 0; bad_names[i]; i++)
		if (callback_header_refused(bad_names[i], "v", 1) == NULL)
			fail_msg("name '%s' accepted", bad_names[i]);
	for (int i = 0; fine[i]; i++)
		if (callback_header_refused(fine[i], "v", 1) != NULL)
			fail_msg("%s refused", fine[i]);
	assert_non_null(callback_header_refused("X", "a\r\nInjected: 1", 15));
	assert_non_null(callback_header_refused("X", "a\nb", 3));
	assert_non_null(callback_header_refused("X", "a\rb", 3));
	assert_non_null(callback_header_refused("X", "a\0b", 3));
	assert_non_null(callback_header_refused("X", "\x01", 1));
	assert_non_null(callback_header_refused("X", "\x7f", 1));
	assert_null(callback_header_refused("X", "tab\there", 8));
	assert_null(callback_header_refused("X", "h\xc3\xa9llo", 6));
	assert_null(callback_header_refused("X", "", 0));
}

/* The notifier drops what the API refuses (older tasks, messages
 * produced straight to Kafka). */
static void
test_spec_sanitize(void **state)
{
	struct callback_spec cb;
	const char *s = "{\"url\":\"http://x\",\"headers\":{"
			"\"X-Ok\":\"1\",\"Host\":\"internal\","
			"\"Bad Name\":\"v\",\"X-Num\":5,"
			"\"X-Inj\":\"a\\r\\nB: c\",\"X-Also\":\"2\"}}";
	char first[64], **h;

	(void)state;
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	assert_int_equal(callback_spec_sanitize(&cb, first, sizeof(first)), 4);
	assert_string_equal(first, "Host");
	assert_int_equal(json_object_size(cb.headers), 2);
	assert_string_equal(
		json_string_value(json_object_get(cb.headers, "X-Ok")), "1");
	assert_string_equal(
		json_string_value(json_object_get(cb.headers, "X-Also")), "2");
	assert_int_equal(callback_spec_sanitize(&cb, first, sizeof(first)), 0);
	assert_string_equal(first, "");
	callback_spec_clear(&cb);
	/* even unsanitized, the request never carries them */
	assert_int_equal(callback_spec_parse(s, strlen(s), &cb), 0);
	h = callback_headers_build(&cb, "id", 1, 5, 0, NULL, NULL, NULL);
	assert_true(has(h, "X-Ok: 1"));
	assert_true(has(h, "X-Also: 2"));
	assert_false(has(h, "Host: internal"));
	assert_int_equal(count(h), 7);
	callback_headers_free(h);
	callback_spec_clear(&cb);
	callback_spec_route("http://x/", &cb);
	assert_int_equal(callback_spec_sanitize(&cb, first, sizeof(first)), 0);
	callback_spec_clear(&cb);
}

#define KEY_BYTES                                                          \
	"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f" \
	"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f"

static void
sample_retry(struct callback_spec *cb, struct callback_retry *r)
{
	const char *s = "{\"url\":\"http://h/x\",\"headers\":{"
			"\"X-B\":\"2\",\"X-A\":\"1\"},\"max_attempts\":5}";

	assert_int_equal(callback_spec_parse(s, strlen(s), cb), 0);
	*r = (struct callback_retry){.id = "cbr:job-1:2",
				     .of = "job-1",
				     .attempt = "2",
				     .due_at = "1700000000000",
				     .topic = "orders",
				     .occurrence = NULL,
				     .cb = cb,
				     .body = "hi",
				     .body_len = 2};
}

/* The signed bytes, written out (docs/security.md), and their HMAC as
 * Python's hmac module computes it. */
static void
test_retry_canon_and_sign(void **state)
{
	static const char want[] = "16:prophet-retry-v1\n11:cbr:job-1:2\n"
				   "5:job-1\n1:2\n13:1700000000000\n"
				   "6:orders\n0:\n10:http://h/x\n4:POST\n"
				   "1:0\n1:5\n1:2\n3:X-A\n1:1\n3:X-B\n1:2\n"
				   "2:hi\n";
	struct callback_spec cb;
	struct callback_retry r;
	char sig[CALLBACK_SIG_LEN + 1], *c;
	size_t len;

	(void)state;
	sample_retry(&cb, &r);
	c = callback_retry_canon(&r, &len);
	assert_int_equal(len, sizeof(want) - 1);
	assert_memory_equal(c, want, len);
	xfree(c);
	callback_retry_sign(KEY_BYTES, 32, &r, sig, sizeof(sig));
	assert_string_equal(sig, "v1:9e9f78a082eb38aa907b01c6f9161e01b552fc73"
				 "b04982128d93f4267a2a209f");
	assert_true(callback_retry_verify(KEY_BYTES, 32, &r, sig));
	callback_spec_clear(&cb);
}

/* Any change to what the signature covers, or to the key, breaks it. */
static void
test_retry_verify_tampered(void **state)
{
	struct callback_spec cb;
	struct callback_retry r, t;
	char sig[CALLBACK_SIG_LEN + 1], bad[CALLBACK_SIG_LEN + 1];
	json_t *hv;

	(void)state;
	sample_retry(&cb, &r);
	callback_retry_sign(KEY_BYTES, 32, &r, sig, sizeof(sig));
	assert_false(callback_retry_verify("another key", 11, &r, sig));
	assert_false(callback_retry_verify(KEY_BYTES, 32, &r, NULL));
	assert_false(callback_retry_verify(KEY_BYTES, 32, &r, ""));
	assert_false(callback_retry_verify(KEY_BYTES, 32, &r, "v1:00"));
	snprintf(bad, sizeof(bad), "%s", sig);
	bad[10] = bad[10] == 'a' ? 'b' : 'a';
	assert_false(callback_retry_verify(KEY_BYTES, 32, &r, bad));
#define CHANGED(field, value)                                                \
	do {                                                                 \
		t = r;                                                       \
		t.field = value;                                             \
		assert_false(callback_retry_verify(KEY_BYTES, 32, &t, sig)); \
	} while (0)
	CHANGED(id, "cbr:job-1:3");
	CHANGED(of, "job-2");
	CHANGED(attempt, "3");
	CHANGED(due_at, "1700000000001");
	CHANGED(topic, "billing");
	CHANGED(occurrence, "7");
	CHANGED(body, "ho");
	CHANGED(body_len, 1);
#undef CHANGED
	/* a field's bytes cannot move into its neighbour */
	t = r;
	t.of = "job-12";
	t.attempt = "";
	assert_false(callback_retry_verify(KEY_BYTES, 32, &t, sig));
#define SPEC_CHANGED(stmt, undo)                                             \
	do {                                                                 \
		stmt;                                                        \
		assert_false(callback_retry_verify(KEY_BYTES, 32, &r, sig)); \
		undo;                                                        \
		assert_true(callback_retry_verify(KEY_BYTES, 32, &r, sig));  \
	} while (0)
	SPEC_CHANGED(cb.timeout_ms = 10, cb.timeout_ms = 0);
	SPEC_CHANGED(cb.max_attempts = 6, cb.max_attempts = 5);
	SPEC_CHANGED(cb.url[7] = 'g', cb.url[7] = 'h');
	SPEC_CHANGED(cb.method[0] = 'Q', cb.method[0] = 'P');
	SPEC_CHANGED(json_object_set_new(cb.headers, "X-C", json_string("3")),
		     json_object_del(cb.headers, "X-C"));
	hv = json_object_get(cb.headers, "X-A");
	SPEC_CHANGED(json_string_set(hv, "9"), json_string_set(hv, "1"));
	SPEC_CHANGED(json_object_set_new(cb.headers, "X-A", json_integer(1)),
		     json_object_set_new(cb.headers, "X-A", json_string("1")));
#undef SPEC_CHANGED
	callback_spec_clear(&cb);
}

/*
 * The notifier signs the spec it holds (max_attempts resolved); the
 * manager and later the notifier check the spec as the retry task
 * carries it through the API, the DB and the worker's header: the same
 * signed bytes, whatever order the headers come in.
 */
static void
test_retry_spec_round_trip(void **state)
{
	const char *s = "{\"url\":\"https://h:8443/p?q=1\",\"method\":"
			"\"PUT\",\"headers\":{\"Z\":\"z\",\"A\":\"a\","
			"\"M\":\"\"},\"timeout_ms\":2500}";
	struct callback_spec held, carried;
	struct callback_retry r1, r2;
	char *hdr, *c1, *c2;
	size_t l1, l2;
	json_t *submitted;

	(void)state;
	assert_int_equal(callback_spec_parse(s, strlen(s), &held), 0);
	held.max_attempts = 7;
	submitted = callback_spec_json(&held);
	hdr = callback_header_encode(submitted, 7);
	assert_int_equal(callback_spec_parse(hdr, strlen(hdr), &carried), 0);
	r1 = (struct callback_retry){"cbr:x:2", "x",   "2", "5", "t",
				     NULL,	&held, "b", 1};
	r2 = r1;
	r2.cb = &carried;
	r2.occurrence = "";
	c1 = callback_retry_canon(&r1, &l1);
	c2 = callback_retry_canon(&r2, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(c1, c2, l1);
	xfree(c1);
	xfree(c2);
	xfree(hdr);
	json_decref(submitted);
	callback_spec_clear(&held);
	callback_spec_clear(&carried);
}

static void
test_tbucket(void **state)
{
	struct tbucket b;
	int got = 0;

	tbucket_init(&b, 10, 3, 1000);
	/* the burst at once, then nothing until a token refills */
	for (int i = 0; i < 10; i++)
		got += tbucket_take(&b, 1000);
	assert_int_equal(got, 3);
	assert_int_equal(tbucket_wait_ms(&b, 1000), 100);
	assert_false(tbucket_take(&b, 1050));
	assert_int_equal(tbucket_wait_ms(&b, 1050), 50);
	assert_true(tbucket_take(&b, 1100));
	/* over 10 s at most rate * 10 s + burst */
	got = 0;
	for (int64_t t = 1100; t <= 11100; t += 7)
		got += tbucket_take(&b, t);
	assert_true(got >= 99 && got <= 101);
	/* a long pause saves no more than the burst */
	got = 0;
	for (int i = 0; i < 10; i++)
		got += tbucket_take(&b, 100000);
	assert_int_equal(got, 3);
	/* rate 0: unlimited */
	tbucket_init(&b, 0, 1, 0);
	for (int i = 0; i < 1000; i++)
		assert_true(tbucket_take(&b, 0));
	assert_int_equal(tbucket_wait_ms(&b, 0), 0);
}

/* The callback and max_attempts travel in the Redis payload. */
static void
test_payload_carries_callback(void **state)
{
	struct task t, back;
	char *s;
	size_t len;

	memset(&t, 0, sizeof(t));
	t.topic = xstrdup("t");
	t.body = xstrdup("b");
	t.body_len = 1;
	t.due_at = 5;
	t.callback = json_pack("{s:s}", "url", "http://x/");
	t.max_attempts = 4;
	s = payload_encode(&t, &len);
	assert_int_equal(payload_decode(s, len, &back), 0);
	assert_non_null(back.callback);
	assert_string_equal(
		json_string_value(json_object_get(back.callback, "url")),
		"http://x/");
	assert_int_equal(back.max_attempts, 4);
	free(s);
	task_clear(&back);
	task_clear(&t);
}

/* Submit-time allow-list. */
static void
test_submit_allow_list(void **state)
{
	struct task_limits lim = {65536, 315576000000LL, "cb.local, .corp", 0,
				  NULL};
	struct task t;
	struct task_error err;
	json_t *in = json_pack("{s:s, s:s, s:i, s:{s:s}}", "topic", "t", "body",
			       "b", "delay_ms", 10, "callback", "url",
			       "http://cb.local:81/x");

	assert_int_equal(task_from_json(in, &lim, 1000, &t, &err), 0);
	task_clear(&t);
	json_object_set_new(in, "callback",
			    json_pack("{s:s}", "url", "http://a.corp/x"));
	assert_int_equal(task_from_json(in, &lim, 1000, &t, &err), 0);
	task_clear(&t);
	json_object_set_new(
		in, "callback",
		json_pack("{s:s}", "url", "http://169.254.169.254/"));
	assert_int_equal(task_from_json(in, &lim, 1000, &t, &err), -1);
	assert_int_equal(err.http, 400);
	assert_string_equal(err.field, "callback.url");
	lim.callback_hosts = "";
	assert_int_equal(task_from_json(in, &lim, 1000, &t, &err), 0);
	task_clear(&t);
	json_decref(in);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backoff_doubles_and_caps),
		cmocka_unit_test(test_backoff_jitter),
		cmocka_unit_test(test_retry_id),
		cmocka_unit_test(test_origin),
		cmocka_unit_test(test_allow_list),
		cmocka_unit_test(test_spec_parse),
		cmocka_unit_test(test_header_round_trip),
		cmocka_unit_test(test_headers_build),
		cmocka_unit_test(test_header_refused),
		cmocka_unit_test(test_signing_vector),
		cmocka_unit_test(test_signing_keys_refused),
		cmocka_unit_test(test_headers_signed),
		cmocka_unit_test(test_spec_sanitize),
		cmocka_unit_test(test_retry_canon_and_sign),
		cmocka_unit_test(test_retry_verify_tampered),
		cmocka_unit_test(test_retry_spec_round_trip),
		cmocka_unit_test(test_tbucket),
		cmocka_unit_test(test_payload_carries_callback),
		cmocka_unit_test(test_submit_allow_list),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
