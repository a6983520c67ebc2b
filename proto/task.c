#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "callback.h"
#include "cron.h"
#include "hash.h"
#include "num.h"
#include "task.h"
#include "trace.h"
#include "utf8.h"
#include "xmalloc.h"

static const char *const status_names[TASK__STATUS_COUNT] = {
	"scheduled", "firing", "delivered", "cancelled", "expired"};
static const char *const cb_status_names[TASK__CB_COUNT] = {
	"none", "ok", "retrying", "failed"};

static const char *const misfire_names[TASK__MISFIRE_COUNT] = {
	"", "fire_once", "fire_all", "skip"};

static const char *const known_fields[] = {
	"id",		"topic",      "body",	 "due_at",
	"delay_ms",	"key",	      "headers", "callback",
	"max_attempts", "ttl_ms",     "cron",	 "timezone",
	"misfire",	"start_at",   "end_at",	 "max_occurrences",
	"traceparent",	"tracestate", NULL};

/* Fields that only make sense with cron. */
static const char *const cron_fields[] = {
	"timezone", "misfire", "start_at", "end_at", "max_occurrences", NULL};

const char *
task_misfire_name(enum task_misfire m)
{
	return (unsigned)m < TASK__MISFIRE_COUNT ? misfire_names[m] : "";
}

int
task_misfire_parse(const char *s, enum task_misfire *out)
{
	for (int i = 1; i < TASK__MISFIRE_COUNT; i++) {
		if (!strcmp(s, misfire_names[i])) {
			*out = (enum task_misfire)i;
			return 0;
		}
	}
	return -1;
}

int64_t
task_cron_next(const char *cron, const struct tz *z, int64_t after_ms,
	       int64_t end_at, char *err, size_t errlen)
{
	struct cron_error ce;
	struct cron c;
	int64_t next;

	if (z == NULL)
		return -2;
	if (cron_parse(cron, &c, &ce) < 0) {
		snprintf(err, errlen, "%s", ce.message);
		return -2;
	}
	next = cron_next(&c, z, after_ms);
	return end_at > 0 && next > end_at ? -1 : next;
}

const char *
task_status_name(enum task_status s)
{
	return (unsigned)s < TASK__STATUS_COUNT ? status_names[s] : "unknown";
}

int
task_status_parse(const char *s, enum task_status *out)
{
	for (int i = 0; i < TASK__STATUS_COUNT; i++) {
		if (!strcmp(s, status_names[i])) {
			*out = (enum task_status)i;
			return 0;
		}
	}
	return -1;
}

const char *
task_callback_status_name(enum task_callback_status s)
{
	return (unsigned)s < TASK__CB_COUNT ? cb_status_names[s] : "unknown";
}

int
task_callback_status_parse(const char *s, enum task_callback_status *out)
{
	for (int i = 0; i < TASK__CB_COUNT; i++) {
		if (!strcmp(s, cb_status_names[i])) {
			*out = (enum task_callback_status)i;
			return 0;
		}
	}
	return -1;
}

int
task_error_set(struct task_error *err, int http, const char *code,
	       const char *field, const char *fmt, ...)
{
	va_list ap;

	/* Field names and messages quote client input: cut at a character
	 * boundary and made valid UTF-8, or jansson would refuse them. */
	err->http = http;
	snprintf(err->code, sizeof(err->code), "%s", code);
	utf8_copy(err->field, sizeof(err->field), field ? field : "",
		  field ? strlen(field) : 0);
	va_start(ap, fmt);
	utf8_vformat(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

json_t *
task_error_json(const struct task_error *err)
{
	json_t *e = json_object(), *out = json_object();

	json_object_set_new(e, "code", utf8_json_str(err->code));
	json_object_set_new(e, "message", utf8_json_str(err->message));
	if (err->field[0] != '\0')
		json_object_set_new(e, "field", utf8_json_str(err->field));
	json_object_set_new(out, "error", e);
	return out;
}

int
task_id_valid(const char *id, size_t len)
{
	if (len < 1 || len > TASK_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)id[i];

		if (!isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-')
			return 0;
	}
	return 1;
}

int
task_topic_valid(const char *topic, size_t len)
{
	if (len < 1 || len > TASK_TOPIC_MAX)
		return 0;
	/* By length: the hot path's topic is not NUL-terminated. */
	if ((len == 1 && topic[0] == '.') ||
	    (len == 2 && topic[0] == '.' && topic[1] == '.'))
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)topic[i];

		if (!isalnum(c) && c != '.' && c != '_' && c != '-')
			return 0;
	}
	return 1;
}

/* Crockford base32: ids sort by creation time and read unambiguously. */
static const char b32[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

void
task_id_generate(char *buf, int64_t now_ms)
{
	static __thread unsigned char pool[1024];
	static __thread size_t used = sizeof(pool);
	uint64_t t = (uint64_t)now_ms;
	unsigned char *r;

	if (used + 10 > sizeof(pool)) {
		if (getrandom(pool, sizeof(pool), 0) != (ssize_t)sizeof(pool))
			abort();
		used = 0;
	}
	r = pool + used;
	used += 10;
	for (int i = 9; i >= 0; i--) {
		buf[i] = b32[t & 31];
		t >>= 5;
	}
	/* 80 random bits in 16 characters. */
	for (int i = 0; i < 2; i++) {
		uint64_t v = 0;

		for (int j = 0; j < 5; j++)
			v = (v << 8) | r[i * 5 + j];
		for (int j = 7; j >= 0; j--) {
			buf[10 + i * 8 + j] = b32[v & 31];
			v >>= 5;
		}
	}
	buf[26] = '\0';
}

static uint64_t
fnv64_str(uint64_t h, const char *s)
{
	static const char nul = '\0';

	if (s != NULL)
		h = fnv64(h, s, strlen(s));
	return fnv64(h, &nul, 1);
}

static uint64_t
fnv64_json(uint64_t h, const json_t *j)
{
	char *s;

	if (j == NULL)
		return fnv64_str(h, NULL);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	h = fnv64_str(h, s);
	free(s);
	return h;
}

/* "<what><ms>/<attempts>/<ttl>/0" into num (128 bytes: enough). */
static void
plain_numbers(char *num, const char *what, int64_t ms, int attempts,
	      int64_t ttl)
{
	size_t n = strlen(what);

	memcpy(num, what, n);
	n += num_format_ll(num + n, ms);
	num[n++] = '/';
	n += num_format_ll(num + n, attempts);
	num[n++] = '/';
	n += num_format_ll(num + n, ttl);
	memcpy(num + n, "/0", 3);
}

/* Hash of the submission as the client wrote it (delay_ms, not the due
 * time it resolved to), so that a replay hashes the same. */
uint64_t
task_content_hash(const struct task *t)
{
	uint64_t h = FNV64_OFFSET;
	char num[128];

	h = fnv64_str(h, t->topic);
	h = fnv64(h, t->body, t->body_len);
	/* The last 0 was the priority field: kept, so the hashes of tasks
	 * stored before it went stay what replays of them compute. */
	if (t->cron != NULL)
		snprintf(num, sizeof(num), "cron:%lld/%lld/%lld/%s/%d/%d",
			 (long long)t->start_at, (long long)t->end_at,
			 (long long)t->max_occurrences,
			 task_misfire_name(t->misfire), t->max_attempts, 0);
	else
		/* "delay:<ms>/<max_attempts>/<ttl_ms>/0" or "due:<ms>/...",
		 * as snprintf wrote it, in a tenth of its instructions (every
		 * submission hashes). */
		plain_numbers(num, t->delay_ms >= 0 ? "delay:" : "due:",
			      t->delay_ms >= 0 ? t->delay_ms : t->due_at,
			      t->max_attempts, t->ttl_ms);
	h = fnv64_str(h, num);
	h = fnv64_str(h, t->key);
	h = fnv64_json(h, t->headers);
	h = fnv64_json(h, t->callback);
	h = fnv64_str(h, t->cron);
	h = fnv64_str(h, t->timezone);
	return h;
}

static int
get_int(const json_t *in, const char *field, int64_t min, int64_t max,
	int64_t *out, int *present, struct task_error *err)
{
	const json_t *v = json_object_get(in, field);
	double d;

	*present = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
	} else if (json_is_real(v)) {
		d = json_real_value(v);
		/* Range first: casting an out-of-range double is undefined. */
		if (!(d >= -9.2e18 && d <= 9.2e18) || d != (double)(int64_t)d)
			return task_error_set(err, 400, "invalid_type", field,
					      "%s must be an integer", field);
		*out = (int64_t)d;
	} else {
		return task_error_set(err, 400, "invalid_type", field,
				      "%s must be an integer", field);
	}
	if (*out < min || *out > max)
		return task_error_set(err, 400, "invalid_value", field,
				      "%s must be between %lld and %lld", field,
				      (long long)min, (long long)max);
	*present = 1;
	return 0;
}

static int
check_string_map(const json_t *m, const char *field, struct task_error *err)
{
	const char *k;
	json_t *v;

	if (!json_is_object(m))
		return task_error_set(err, 400, "invalid_type", field,
				      "%s must be an object of strings", field);
	if (json_object_size(m) > TASK_HEADERS_MAX)
		return task_error_set(err, 400, "too_large", field,
				      "%s has more than %d entries", field,
				      TASK_HEADERS_MAX);
	json_object_foreach ((json_t *)m, k, v) {
		size_t kl = strlen(k);

		if (kl == 0 || kl > TASK_HEADER_NAME_MAX)
			return task_error_set(err, 400, "invalid_value", field,
					      "%s names must be 1-%d bytes",
					      field, TASK_HEADER_NAME_MAX);
		if (!json_is_string(v))
			return task_error_set(err, 400, "invalid_type", field,
					      "%s.%s must be a string", field,
					      k);
		if (json_string_length(v) > TASK_HEADER_VALUE_MAX)
			return task_error_set(err, 400, "too_large", field,
					      "%s.%s is longer than %d bytes",
					      field, k, TASK_HEADER_VALUE_MAX);
	}
	return 0;
}

/* The bytes j takes as stored (ingest.c writes it compact, keys sorted):
 * escapes make that up to six times its characters. */
static int
check_encoded(const json_t *j, const char *field, size_t max, const char *limit,
	      struct task_error *err)
{
	size_t n = json_dumpb(j, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS);

	if (n > max)
		return task_error_set(err, 413, "too_large", field,
				      "%s take %zu bytes as JSON, more than "
				      "%s (%zu)",
				      field, n, limit, max);
	return 0;
}

static int
check_headers(const json_t *h, struct task_error *err)
{
	const char *k;
	json_t *v;

	if (check_string_map(h, "headers", err) < 0)
		return -1;
	json_object_foreach ((json_t *)h, k, v) {
		if (!strncasecmp(k, "prophet-", 8))
			return task_error_set(
				err, 400, "invalid_value", "headers",
				"header '%s': the prophet- prefix "
				"is reserved",
				k);
	}
	return 0;
}

static int
check_callback(const json_t *cb, const struct task_limits *lim,
	       struct task_error *err)
{
	static const char *const methods[] = {"GET",   "POST",	 "PUT",
					      "PATCH", "DELETE", NULL};
	const json_t *url, *method, *headers, *timeout;
	const char *k, *u;
	json_t *v;
	size_t n;

	if (!json_is_object(cb))
		return task_error_set(err, 400, "invalid_type", "callback",
				      "callback must be an object");
	json_object_foreach ((json_t *)cb, k, v) {
		if (strcmp(k, "url") && strcmp(k, "method") &&
		    strcmp(k, "headers") && strcmp(k, "timeout_ms"))
			return task_error_set(
				err, 400, "unknown_field", "callback",
				"callback.%s is not a known field", k);
	}
	url = json_object_get(cb, "url");
	if (url == NULL || json_is_null(url))
		return task_error_set(err, 400, "missing_field", "callback.url",
				      "callback.url is required");
	if (!json_is_string(url))
		return task_error_set(err, 400, "invalid_type", "callback.url",
				      "callback.url must be a string");
	u = json_string_value(url);
	n = json_string_length(url);
	if (n > TASK_URL_MAX)
		return task_error_set(err, 400, "too_large", "callback.url",
				      "callback.url is longer than %d bytes",
				      TASK_URL_MAX);
	if ((strncasecmp(u, "http://", 7) || n <= 7) &&
	    (strncasecmp(u, "https://", 8) || n <= 8))
		return task_error_set(err, 400, "invalid_value", "callback.url",
				      "callback.url must be an http:// or "
				      "https:// URL");
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)u[i] <= ' ' || u[i] == 0x7f)
			return task_error_set(err, 400, "invalid_value",
					      "callback.url",
					      "callback.url contains spaces or "
					      "control characters");
	{
		char origin[300], host[300];

		/* As the notifier's libcurl will read it: a port out of range
		 * or no host would fail every attempt, found only when due. */
		if (callback_url_origin(u, origin, sizeof(origin), host,
					sizeof(host)) < 0)
			return task_error_set(err, 400, "invalid_value",
					      "callback.url",
					      "callback.url has no valid host "
					      "and port (1-65535)");
		if (lim->callback_hosts != NULL &&
		    lim->callback_hosts[0] != '\0' &&
		    !callback_host_allowed(lim->callback_hosts, host))
			return task_error_set(
				err, 400, "invalid_value", "callback.url",
				"callback.url host '%.200s' is not in "
				"http.callback_hosts_allowed",
				host);
	}
	method = json_object_get(cb, "method");
	if (method != NULL) {
		int ok = 0;

		if (!json_is_string(method))
			return task_error_set(
				err, 400, "invalid_type", "callback.method",
				"callback.method must be a string");
		for (int i = 0; methods[i]; i++)
			if (!strcmp(json_string_value(method), methods[i]))
				ok = 1;
		if (!ok)
			return task_error_set(
				err, 400, "invalid_value", "callback.method",
				"callback.method must be GET, POST, "
				"PUT, PATCH or DELETE");
	}
	headers = json_object_get(cb, "headers");
	if (headers != NULL &&
	    check_string_map(headers, "callback.headers", err) < 0)
		return -1;
	if (headers != NULL) {
		json_object_foreach ((json_t *)headers, k, v) {
			const char *why = callback_header_refused(
				k, json_string_value(v), json_string_length(v));

			if (why != NULL)
				return task_error_set(
					err, 400, "invalid_value",
					"callback.headers",
					"callback.headers: '%.64s' "
					"%s",
					k, why);
		}
	}
	timeout = json_object_get(cb, "timeout_ms");
	if (timeout != NULL && !json_is_integer(timeout))
		return task_error_set(err, 400, "invalid_type",
				      "callback.timeout_ms",
				      "callback.timeout_ms must be an integer");
	if (timeout != NULL && (json_integer_value(timeout) < 1 ||
				json_integer_value(timeout) > 300000))
		return task_error_set(err, 400, "invalid_value",
				      "callback.timeout_ms",
				      "callback.timeout_ms must be 1..300000");
	return 0;
}

/* Whether a string anywhere in v holds U+0000. */
static int
has_nul(const json_t *v)
{
	const char *k;
	json_t *e;
	size_t i;

	if (json_is_string(v))
		return memchr(json_string_value(v), '\0',
			      json_string_length(v)) != NULL;
	if (json_is_object(v)) {
		json_object_foreach ((json_t *)v, k, e)
			if (has_nul(e))
				return 1;
	} else if (json_is_array(v)) {
		json_array_foreach (v, i, e)
			if (has_nul(e))
				return 1;
	}
	return 0;
}

/*
 * One rule for U+0000: body may hold it and is carried byte for byte
 * (it travels with its length everywhere); every other string is refused
 * with it, because somewhere it becomes a C string (a Kafka header name,
 * a cron expression, a zone file name, an HTTP method) and would be cut
 * short there while another path kept it. Names in objects cannot hold it
 * (the JSON parser refuses them).
 */
static int
check_nul(const json_t *in, struct task_error *err)
{
	const char *k, *k2;
	json_t *v, *v2;

	json_object_foreach ((json_t *)in, k, v) {
		if (!strcmp(k, "body"))
			continue;
		if (!strcmp(k, "callback") && json_is_object(v)) {
			json_object_foreach (v, k2, v2) {
				char field[64];

				if (!has_nul(v2))
					continue;
				snprintf(field, sizeof(field), "callback.%s",
					 k2);
				return task_error_set(err, 400, "invalid_value",
						      field,
						      "%s must not contain "
						      "U+0000 (only body may)",
						      field);
			}
		} else if (has_nul(v)) {
			return task_error_set(
				err, 400, "invalid_value", k,
				"%s must not contain U+0000 (only "
				"body may)",
				k);
		}
	}
	return 0;
}

/* cron, timezone, misfire, start_at, end_at, max_occurrences; sets the
 * first occurrence as due_at. */
static int
parse_recurring(const json_t *in, const struct task_limits *lim, int64_t now_ms,
		struct task *t, struct task_error *err)
{
	const json_t *v = json_object_get(in, "cron");
	const char *zone = "UTC";
	const struct tz *z;
	struct cron_error ce;
	struct cron c;
	char msg[256];
	int64_t n, from;
	int present;

	if (v == NULL || json_is_null(v)) {
		for (int i = 0; cron_fields[i] != NULL; i++) {
			const json_t *f = json_object_get(in, cron_fields[i]);

			if (f != NULL && !json_is_null(f))
				return task_error_set(
					err, 400, "invalid_value",
					cron_fields[i],
					"%s only applies to a recurring task "
					"(cron)",
					cron_fields[i]);
		}
		return 0;
	}
	if (!json_is_string(v))
		return task_error_set(err, 400, "invalid_type", "cron",
				      "cron must be a string");
	if (cron_parse(json_string_value(v), &c, &ce) < 0) {
		char field[64];

		snprintf(field, sizeof(field), "cron%s%s",
			 strcmp(ce.field, "cron") ? "." : "",
			 strcmp(ce.field, "cron") ? ce.field : "");
		return task_error_set(err, 400, "invalid_value", field,
				      "cron %s", ce.message);
	}
	if (t->ttl_ms > 0)
		return task_error_set(err, 400, "invalid_value", "ttl_ms",
				      "ttl_ms does not apply to a recurring "
				      "task: its misfire policy decides about "
				      "late occurrences");
	v = json_object_get(in, "timezone");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_string(v))
			return task_error_set(err, 400, "invalid_type",
					      "timezone",
					      "timezone must be a string");
		zone = json_string_value(v);
	}
	if (lim->zone == NULL)
		snprintf(msg, sizeof(msg), "time zones are not available");
	if (lim->zone == NULL ||
	    (z = lim->zone(zone, msg, sizeof(msg))) == NULL)
		return task_error_set(err, 400, "invalid_value", "timezone",
				      "%s", msg);
	t->misfire = TASK_MISFIRE_FIRE_ONCE;
	v = json_object_get(in, "misfire");
	if (v != NULL && !json_is_null(v) &&
	    (!json_is_string(v) ||
	     task_misfire_parse(json_string_value(v), &t->misfire) < 0))
		return task_error_set(err, 400, "invalid_value", "misfire",
				      "misfire must be \"fire_once\", "
				      "\"fire_all\" or \"skip\"");
	if (get_int(in, "start_at", 0, now_ms + lim->max_delay_ms, &n, &present,
		    err) < 0)
		return -1;
	t->start_at = present ? n : 0;
	if (get_int(in, "end_at", 1, now_ms + lim->max_delay_ms, &n, &present,
		    err) < 0)
		return -1;
	t->end_at = present ? n : 0;
	if (t->end_at > 0 && (t->end_at <= now_ms || t->end_at <= t->start_at))
		return task_error_set(err, 400, "invalid_value", "end_at",
				      "end_at must be later than now and "
				      "than start_at");
	if (get_int(in, "max_occurrences", 1, 1000000000, &n, &present, err) <
	    0)
		return -1;
	t->max_occurrences = present ? n : 0;
	/* The first occurrence at or after max(now, start_at). */
	from = t->start_at > now_ms ? t->start_at : now_ms;
	t->due_at = cron_next(&c, z, from - 1);
	if (t->due_at < 0 || (t->end_at > 0 && t->due_at > t->end_at))
		return task_error_set(
			err, 400, "invalid_value", "cron",
			"cron '%s' has no occurrence %s",
			json_string_value(json_object_get(in, "cron")),
			t->end_at > 0 ? "before end_at"
				      : "in the next ten years");
	t->cron = xstrdup(json_string_value(json_object_get(in, "cron")));
	t->timezone = xstrdup(zone);
	return 0;
}

/* A trace context value: the task field, or the header of the same name
 * (any case) in headers; both given must agree. */
static int
trace_value(const json_t *in, const json_t *headers, const char *name,
	    const char **out, const char **hname, struct task_error *err)
{
	const json_t *f = json_object_get(in, name), *h = NULL;
	const char *k;
	json_t *v;

	*out = *hname = NULL;
	if (f != NULL && json_is_null(f))
		f = NULL;
	if (f != NULL && !json_is_string(f))
		return task_error_set(err, 400, "invalid_type", name,
				      "%s must be a string", name);
	if (headers != NULL)
		json_object_foreach ((json_t *)headers, k, v)
			if (!strcasecmp(k, name)) {
				h = v;
				*hname = k;
			}
	if (f != NULL && h != NULL && !json_equal(f, h))
		return task_error_set(err, 400, "invalid_value", name,
				      "%s and headers.%s differ", name, *hname);
	*out = json_string_value(f != NULL ? f : h);
	return 0;
}

/*
 * The W3C trace context of a submission (fields traceparent/tracestate,
 * or those headers), validated and taken out of t->headers: it is not
 * part of the content hash (a client's retry carries a new parent-id and
 * is still a replay). task_trace_put stores it back after hashing.
 */
static int
parse_trace(const json_t *in, struct task *t, char **tp, char **ts,
	    struct task_error *err)
{
	const char *p, *s, *hp, *hs, *why;

	if (trace_value(in, t->headers, TRACE_PARENT, &p, &hp, err) < 0 ||
	    trace_value(in, t->headers, TRACE_STATE, &s, &hs, err) < 0)
		return -1;
	if (p != NULL && (why = trace_parent_invalid(p, strlen(p))) != NULL)
		return task_error_set(err, 400, "invalid_value", TRACE_PARENT,
				      "traceparent %s", why);
	if (s != NULL && *s == '\0')
		s = NULL;
	if (s != NULL && (why = trace_state_invalid(s, strlen(s))) != NULL)
		return task_error_set(err, 400, "invalid_value", TRACE_STATE,
				      "tracestate %s", why);
	if (s != NULL && p == NULL)
		return task_error_set(err, 400, "invalid_value", TRACE_STATE,
				      "tracestate needs a traceparent");
	if (p != NULL && t->headers != NULL &&
	    json_object_size(t->headers) - (hp != NULL) - (hs != NULL) +
			    (s != NULL ? 2 : 1) >
		    TASK_HEADERS_MAX)
		return task_error_set(err, 400, "too_large", "headers",
				      "headers has more than %d entries with "
				      "traceparent and tracestate",
				      TASK_HEADERS_MAX);
	*tp = p != NULL ? xstrdup(p) : NULL;
	*ts = s != NULL ? xstrdup(s) : NULL;
	if (hs != NULL)
		json_object_del(t->headers, hs);
	if (hp != NULL)
		json_object_del(t->headers, hp);
	if ((hp != NULL || hs != NULL) && json_object_size(t->headers) == 0) {
		json_decref(t->headers);
		t->headers = NULL;
	}
	return 0;
}

static void
task_trace_put(struct task *t, char *tp, char *ts)
{
	if (tp == NULL)
		return;
	if (t->headers == NULL)
		t->headers = json_object();
	json_object_set_new(t->headers, TRACE_PARENT, json_string(tp));
	if (ts != NULL)
		json_object_set_new(t->headers, TRACE_STATE, json_string(ts));
	xfree(tp);
	xfree(ts);
}

static int
task_parse(const json_t *in, const struct task_limits *lim, int64_t now_ms,
	   struct task *t, struct task_error *err)
{
	const json_t *v;
	const char *k;
	json_t *jv;
	int64_t n;
	size_t max_headers;
	int has_due, has_delay, present;
	char *tp = NULL, *ts = NULL;

	if (!json_is_object(in))
		return task_error_set(err, 400, "invalid_type", NULL,
				      "a task must be a JSON object");
	json_object_foreach ((json_t *)in, k, jv) {
		int known = 0;

		for (int i = 0; known_fields[i]; i++)
			if (!strcmp(k, known_fields[i]))
				known = 1;
		/* Accepted and ignored until 0.x: refused by name now, so a
		 * client relying on it learns that it never did anything. */
		if (!strcmp(k, "priority"))
			return task_error_set(err, 400, "unsupported_field",
					      "priority",
					      "priority is not supported: "
					      "tasks fire in due order");
		if (!known)
			return task_error_set(err, 400, "unknown_field", k,
					      "'%s' is not a task field", k);
	}
	if (check_nul(in, err) < 0)
		return -1;

	v = json_object_get(in, "id");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_string(v))
			return task_error_set(err, 400, "invalid_type", "id",
					      "id must be a string");
		if (!task_id_valid(json_string_value(v), json_string_length(v)))
			return task_error_set(err, 400, "invalid_value", "id",
					      "id must be 1-%d characters of "
					      "[A-Za-z0-9._:-]",
					      TASK_ID_MAX);
		memcpy(t->id, json_string_value(v), json_string_length(v) + 1);
		t->id_given = 1;
	} else {
		task_id_generate(t->id, now_ms);
	}

	v = json_object_get(in, "topic");
	if (v == NULL || json_is_null(v))
		return task_error_set(err, 400, "missing_field", "topic",
				      "topic is required");
	if (!json_is_string(v))
		return task_error_set(err, 400, "invalid_type", "topic",
				      "topic must be a string");
	if (!task_topic_valid(json_string_value(v), json_string_length(v)))
		return task_error_set(err, 400, "invalid_value", "topic",
				      "topic must be 1-%d characters of "
				      "[A-Za-z0-9._-]",
				      TASK_TOPIC_MAX);
	t->topic = xstrdup(json_string_value(v));

	v = json_object_get(in, "body");
	if (v == NULL || json_is_null(v))
		return task_error_set(err, 400, "missing_field", "body",
				      "body is required");
	if (!json_is_string(v))
		return task_error_set(err, 400, "invalid_type", "body",
				      "body must be a string");
	if (json_string_length(v) > lim->max_body)
		return task_error_set(err, 413, "too_large", "body",
				      "body is larger than %zu bytes",
				      lim->max_body);
	t->body_len = json_string_length(v);
	t->body = xmemdup(json_string_value(v), t->body_len + 1);

	if (get_int(in, "due_at", 0, INT64_MAX / 2, &n, &has_due, err) < 0)
		return -1;
	if (has_due)
		t->due_at = n;
	if (get_int(in, "delay_ms", 0, lim->max_delay_ms, &n, &has_delay, err) <
	    0)
		return -1;
	if (has_due && has_delay)
		return task_error_set(err, 400, "invalid_value", "delay_ms",
				      "give due_at or delay_ms, not both");
	if (json_object_get(in, "cron") != NULL &&
	    !json_is_null(json_object_get(in, "cron"))) {
		if (has_due || has_delay)
			return task_error_set(
				err, 400, "invalid_value",
				has_due ? "due_at" : "delay_ms",
				"a recurring task (cron) takes start_at, not "
				"due_at or delay_ms");
		/* due_at: the first occurrence, set by parse_recurring. */
		t->delay_ms = -1;
	} else if (!has_due && !has_delay) {
		return task_error_set(err, 400, "missing_field", "due_at",
				      "due_at (ms since the epoch) or delay_ms "
				      "is required");
	} else if (has_delay) {
		t->delay_ms = n;
		t->due_at = now_ms + n;
	} else {
		t->delay_ms = -1;
		if (t->due_at > now_ms + lim->max_delay_ms)
			return task_error_set(err, 400, "invalid_value",
					      "due_at",
					      "due_at is more than %lld ms in "
					      "the future",
					      (long long)lim->max_delay_ms);
	}

	v = json_object_get(in, "key");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_string(v))
			return task_error_set(err, 400, "invalid_type", "key",
					      "key must be a string");
		if (json_string_length(v) < 1 ||
		    json_string_length(v) > TASK_KEY_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return task_error_set(err, 400, "invalid_value", "key",
					      "key must be 1-%d bytes without "
					      "NUL",
					      TASK_KEY_MAX);
		t->key = xstrdup(json_string_value(v));
	}

	max_headers =
		lim->max_headers > 0 ? lim->max_headers : TASK_HEADERS_JSON_MAX;
	v = json_object_get(in, "headers");
	if (v != NULL && !json_is_null(v)) {
		if (check_headers(v, err) < 0 ||
		    check_encoded(v, "headers", max_headers,
				  "task.max_headers_bytes", err) < 0)
			return -1;
		t->headers = json_deep_copy(v);
	}
	v = json_object_get(in, "callback");
	if (v != NULL && !json_is_null(v)) {
		const json_t *ch;

		if (check_callback(v, lim, err) < 0)
			return -1;
		ch = json_object_get(v, "headers");
		if (ch != NULL &&
		    check_encoded(ch, "callback.headers", max_headers,
				  "task.max_headers_bytes", err) < 0)
			return -1;
		if (check_encoded(v, "callback", TASK_CALLBACK_JSON_MAX,
				  "what the database column holds", err) < 0)
			return -1;
		t->callback = json_deep_copy(v);
	}

	if (get_int(in, "max_attempts", 1, 100, &n, &present, err) < 0)
		return -1;
	t->max_attempts = present ? (int)n : 0;
	if (get_int(in, "ttl_ms", 0, lim->max_delay_ms, &n, &present, err) < 0)
		return -1;
	t->ttl_ms = present ? n : 0;

	if (parse_recurring(in, lim, now_ms, t, err) < 0)
		return -1;
	if (parse_trace(in, t, &tp, &ts, err) < 0)
		return -1;

	t->content_hash = task_content_hash(t);
	task_trace_put(t, tp, ts);
	if (t->headers != NULL &&
	    check_encoded(t->headers, "headers", max_headers,
			  "task.max_headers_bytes", err) < 0)
		return -1;
	t->status = TASK_SCHEDULED;
	t->created_at = t->updated_at = now_ms;
	return 0;
}

int
task_from_json(const json_t *in, const struct task_limits *lim, int64_t now_ms,
	       struct task *t, struct task_error *err)
{
	memset(t, 0, sizeof(*t));
	if (task_parse(in, lim, now_ms, t, err) < 0) {
		task_clear(t);
		return -1;
	}
	return 0;
}

/* The schedule of a recurring task and its next five occurrences. */
static void
recurring_to_json(json_t *o, const struct task *t, task_zone_fn zone)
{
	json_t *next = json_array();
	char err[256];
	int64_t due = t->due_at, left = 5;
	const struct tz *z = NULL;

	json_object_set_new(o, "cron", json_string(t->cron));
	json_object_set_new(o, "timezone",
			    json_string(t->timezone ? t->timezone : "UTC"));
	json_object_set_new(o, "misfire",
			    json_string(task_misfire_name(t->misfire)));
	if (t->start_at > 0)
		json_object_set_new(o, "start_at", json_integer(t->start_at));
	if (t->end_at > 0)
		json_object_set_new(o, "end_at", json_integer(t->end_at));
	if (t->max_occurrences > 0) {
		json_object_set_new(o, "max_occurrences",
				    json_integer(t->max_occurrences));
		if (t->max_occurrences - t->occurrences < left)
			left = t->max_occurrences - t->occurrences;
	}
	json_object_set_new(o, "occurrences", json_integer(t->occurrences));
	if (t->status != TASK_SCHEDULED && t->status != TASK_FIRING)
		left = 0;
	if (left > 0 && zone != NULL)
		z = zone(t->timezone ? t->timezone : "UTC", err, sizeof(err));
	for (; left > 0 && due >= 0; left--) {
		json_array_append_new(next, json_integer(due));
		due = task_cron_next(t->cron, z, due, t->end_at, err,
				     sizeof(err));
	}
	json_object_set_new(o, "next_occurrences", next);
}

json_t *
task_to_json(const struct task *t, task_zone_fn zone)
{
	json_t *o = json_object();

	json_object_set_new(o, "id", json_string(t->id));
	json_object_set_new(o, "topic", json_string(t->topic));
	json_object_set_new(o, "body", json_stringn(t->body, t->body_len));
	json_object_set_new(o, "due_at", json_integer(t->due_at));
	json_object_set_new(o, "status",
			    json_string(task_status_name(t->status)));
	if (t->key != NULL)
		json_object_set_new(o, "key", json_string(t->key));
	if (t->headers != NULL)
		json_object_set(o, "headers", t->headers);
	if (t->callback != NULL) {
		json_object_set(o, "callback", t->callback);
	}
	json_object_set_new(
		o, "callback_status",
		json_string(task_callback_status_name(t->callback_status)));
	if (t->max_attempts > 0)
		json_object_set_new(o, "max_attempts",
				    json_integer(t->max_attempts));
	if (t->ttl_ms > 0)
		json_object_set_new(o, "ttl_ms", json_integer(t->ttl_ms));
	json_object_set_new(o, "attempt", json_integer(t->attempt));
	if (t->cron != NULL)
		recurring_to_json(o, t, zone);
	json_object_set_new(o, "created_at", json_integer(t->created_at));
	json_object_set_new(o, "updated_at", json_integer(t->updated_at));
	json_object_set_new(o, "fired_at",
			    t->fired_at ? json_integer(t->fired_at)
					: json_null());
	json_object_set_new(o, "delivered_at",
			    t->delivered_at ? json_integer(t->delivered_at)
					    : json_null());
	return o;
}

void
task_clear(struct task *t)
{
	xfree(t->topic);
	xfree(t->body);
	xfree(t->key);
	json_decref(t->headers);
	json_decref(t->callback);
	xfree(t->cron);
	xfree(t->timezone);
	xfree(t->owner);
	memset(t, 0, sizeof(*t));
}
