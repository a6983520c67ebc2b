#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "payload.h"
#include "xmalloc.h"

char *
payload_encode(const struct task *t, size_t *lenp)
{
	json_t *o = json_object();
	char *s;

	json_object_set_new(o, "t", json_string(t->topic));
	json_object_set_new(o, "b", json_stringn(t->body, t->body_len));
	json_object_set_new(o, "d", json_integer(t->due_at));
	if (t->key != NULL)
		json_object_set_new(o, "k", json_string(t->key));
	if (t->headers != NULL)
		json_object_set(o, "h", t->headers);
	if (t->ttl_ms > 0)
		json_object_set_new(o, "x", json_integer(t->ttl_ms));
	if (t->attempt > 0)
		json_object_set_new(o, "a", json_integer(t->attempt));
	if (t->misfire != TASK_MISFIRE_NONE)
		json_object_set_new(o, "m",
				    json_string(task_misfire_name(t->misfire)));
	if (t->callback != NULL)
		json_object_set(o, "c", t->callback);
	if (t->max_attempts > 0)
		json_object_set_new(o, "n", json_integer(t->max_attempts));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s == NULL)
		abort();
	*lenp = strlen(s);
	return s;
}

int
payload_decode(const char *s, size_t len, struct task *t)
{
	json_t *o, *v;
	json_error_t jerr;

	memset(t, 0, sizeof(*t));
	o = json_loadb(s, len, JSON_ALLOW_NUL, &jerr);
	if (o == NULL)
		return -1;
	v = json_object_get(o, "t");
	if (!json_is_string(v) || !json_is_string(json_object_get(o, "b")) ||
	    !json_is_integer(json_object_get(o, "d"))) {
		json_decref(o);
		return -1;
	}
	t->topic = xstrdup(json_string_value(v));
	v = json_object_get(o, "b");
	t->body_len = json_string_length(v);
	t->body = xmemdup(json_string_value(v), t->body_len + 1);
	t->due_at = json_integer_value(json_object_get(o, "d"));
	v = json_object_get(o, "k");
	if (json_is_string(v))
		t->key = xstrdup(json_string_value(v));
	v = json_object_get(o, "h");
	if (json_is_object(v))
		t->headers = json_incref(v);
	v = json_object_get(o, "x");
	if (json_is_integer(v))
		t->ttl_ms = json_integer_value(v);
	v = json_object_get(o, "a");
	if (json_is_integer(v))
		t->attempt = (int)json_integer_value(v);
	v = json_object_get(o, "m");
	if (json_is_string(v) &&
	    task_misfire_parse(json_string_value(v), &t->misfire) < 0) {
		task_clear(t);
		json_decref(o);
		return -1;
	}
	v = json_object_get(o, "c");
	if (json_is_object(v))
		t->callback = json_incref(v);
	v = json_object_get(o, "n");
	if (json_is_integer(v))
		t->max_attempts = (int)json_integer_value(v);
	json_decref(o);
	return 0;
}

void
payload_row_task(const struct db_rows *rows, size_t i, struct task *t)
{
	unsigned long blen;
	const char *h;

	memset(t, 0, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "%s", db_rows_get(rows, i, PC_ID, NULL));
	t->topic = (char *)db_rows_get(rows, i, PC_TOPIC, NULL);
	t->key = (char *)db_rows_get(rows, i, PC_KEY, NULL);
	t->body = (char *)db_rows_get(rows, i, PC_BODY, &blen);
	t->body_len = blen;
	h = db_rows_get(rows, i, PC_HEADERS, NULL);
	t->headers = h ? json_loads(h, 0, NULL) : NULL;
	t->due_at = db_rows_int(rows, i, PC_DUE_AT);
	t->ttl_ms = db_rows_int(rows, i, PC_TTL_MS);
	t->attempt = (int)db_rows_int(rows, i, PC_ATTEMPT);
	h = db_rows_get(rows, i, PC_MISFIRE, NULL);
	if (h != NULL)
		task_misfire_parse(h, &t->misfire);
	h = db_rows_get(rows, i, PC_CALLBACK, NULL);
	t->callback = h ? json_loads(h, 0, NULL) : NULL;
	t->max_attempts = (int)db_rows_int(rows, i, PC_MAX_ATTEMPTS);
}

void
payload_row_clear(struct task *t)
{
	json_decref(t->headers);
	json_decref(t->callback);
	memset(t, 0, sizeof(*t));
}

char *
payload_from_row(const struct db_rows *rows, size_t i, size_t *lenp)
{
	struct task t;
	char *s;

	payload_row_task(rows, i, &t);
	t.attempt = 0; /* attempts are counted in Redis */
	s = payload_encode(&t, lenp);
	payload_row_clear(&t);
	return s;
}
