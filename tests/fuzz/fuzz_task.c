#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

/*
 * libFuzzer target for everything that parses untrusted input without a
 * server: the task JSON codec and validation (what every submission goes
 * through), the Redis payload codec (against the jansson-tree codec it
 * replaced), slot node JSON, URLs and cron expressions (with their
 * occurrences in a DST zone), the submission hot path (against jansson
 * and task_from_json). A crash, a sanitizer report, a round trip that
 * changes a valid task, a payload verdict unlike jansson's or a task the
 * hot path reads otherwise than the jansson path is a bug.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "callback.h"
#include "cron.h"
#include "payload.h"
#include "payload_ref.h"
#include "slot.h"
#include "task.h"
#include "task_same.h"
#include "tz.h"
#include "url.h"
#include "zknode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_round_trip(const struct task *t)
{
	struct task back;
	size_t len, rlen;
	char *p = payload_encode(t, &len);
	char *r = ref_payload_encode(t, &rlen);

	if (len != rlen || memcmp(p, r, len) != 0)
		abort();
	free(r);
	if (payload_decode(p, len, &back) != 0)
		abort();
	if (back.body_len != t->body_len ||
	    memcmp(back.body, t->body, t->body_len) != 0 ||
	    strcmp(back.topic, t->topic) != 0 || back.due_at != t->due_at)
		abort();
	task_clear(&back);
	free(p);
}

/* The Redis payload decoder takes and refuses what jansson's did. */
static void
check_payload_decode(const uint8_t *data, size_t size)
{
	struct task a, b;
	int ra = payload_decode((const char *)data, size, &a);
	int rb = ref_payload_decode((const char *)data, size, &b);

	if (ra != rb || (ra == 0 && !ref_payload_same(&a, &b)))
		abort();
	if (ra == 0) {
		task_clear(&a);
		task_clear(&b);
	}
}

/*
 * The notifier's side of a callback: a prophet-callback header parsed, and
 * the request headers built from it carry no CR, LF or NUL and have token
 * names (no header injection, whatever the spec said).
 */
static void
check_callback(const char *s, size_t n)
{
	struct callback_spec cb;
	char **hdrs;

	if (callback_spec_parse(s, n, &cb) < 0)
		return;
	hdrs = callback_headers_build(&cb, "id-1", 2, 1796040000000LL, 0, NULL,
				      NULL, NULL);
	for (size_t i = 0; hdrs[i] != NULL; i++) {
		const char *colon = strchr(hdrs[i], ':');

		if (colon == NULL || colon == hdrs[i] ||
		    strpbrk(hdrs[i], "\r\n") != NULL)
			abort();
		for (const char *p = hdrs[i]; p < colon; p++)
			if (*p <= ' ' || *p >= 0x7f)
				abort();
	}
	callback_headers_free(hdrs);
	callback_spec_clear(&cb);
}

/* What the hot path takes, jansson and task_from_json take the same
 * (its own ids are random, so a document without one is read with a
 * default id). */
static void
check_hot_path(const uint8_t *data, size_t size,
	       const struct task_limits *lim)
{
	struct task_error err;
	struct task a, b;
	json_t *in;

	if (!task_from_text((const char *)data, size, lim, 1796040000000LL,
			    "fz:1", &a))
		return;
	in = json_loadb((const char *)data, size,
			JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
	if (in == NULL)
		abort();
	if (json_object_get(in, "id") == NULL)
		json_object_set_new(in, "id", json_string("fz:1"));
	if (task_from_json(in, lim, 1796040000000LL, &b, &err) != 0)
		abort();
	if (strcmp(a.id, b.id) || !task_same_fields(&a, &b))
		abort();
	task_clear(&a);
	task_clear(&b);
	json_decref(in);
}

/* Occurrences are whole seconds, strictly increasing. */
static void
check_cron(const char *s)
{
	char err[256];
	const struct tz *z = tz_get("Europe/Berlin", err, sizeof(err));
	struct cron_error e;
	struct cron c;
	int64_t t = 1796040000123LL;

	if (z == NULL || cron_parse(s, &c, &e) != 0)
		return;
	for (int i = 0; i < 3; i++) {
		int64_t n = cron_next(&c, z, t);

		if (n < 0)
			return;
		if (n <= t || n % 1000 != 0)
			abort();
		t = n;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct task_limits lim = {65536, 315576000000LL, NULL, 0, tz_get};
	struct task_error err;
	struct slot_node n;
	struct task t;
	json_error_t jerr;
	struct url u;
	char why[256];
	char *s;
	json_t *in;

	in = json_loadb((const char *)data, size,
			JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (in != NULL) {
		if (task_from_json(in, &lim, 1796040000000LL, &t, &err) == 0) {
			json_t *out = task_to_json(&t, tz_get);

			if (slot_of(t.id, strlen(t.id), 16) >= 16)
				abort();
			check_round_trip(&t);
			json_decref(out);
			task_clear(&t);
		} else {
			/* The error quotes client names and values: it must
			 * render (the crash of a non-UTF-8 or cut name). */
			json_t *e = task_error_json(&err);
			char *d = e ? json_dumps(e, JSON_COMPACT) : NULL;

			if (err.http < 400 || err.http > 499 || !err.code[0] ||
			    d == NULL)
				abort();
			free(d);
			json_decref(e);
		}
		json_decref(in);
	}
	check_hot_path(data, size, &lim);
	check_payload_decode(data, size);
	check_callback((const char *)data, size);
	slot_node_decode((const char *)data, (int)size, &n);
	s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	if (url_parse(s, &u, why, sizeof(why)) == 0)
		url_clear(&u);
	check_cron(s);
	free(s);
	return 0;
}
