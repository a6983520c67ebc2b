#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "payload.h"
#include "payload_ref.h"
#include "xmalloc.h"

char *
ref_payload_encode(const struct task *t, size_t *lenp)
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
ref_payload_decode(const char *s, size_t len, struct task *t)
{
	memset(t, 0, sizeof(*t));
	return payload_decode_tree(s, len, t);
}

static int
same_str(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

static int
same_json(const json_t *a, const json_t *b)
{
	return a == NULL ? b == NULL : b != NULL && json_equal(a, b);
}

int
ref_payload_same(const struct task *a, const struct task *b)
{
	if ((a->body == NULL) != (b->body == NULL) ||
	    a->body_len != b->body_len ||
	    (a->body != NULL && memcmp(a->body, b->body, a->body_len) != 0))
		return 0;
	return same_str(a->topic, b->topic) && same_str(a->key, b->key) &&
	       same_json(a->headers, b->headers) &&
	       same_json(a->callback, b->callback) && a->due_at == b->due_at &&
	       a->ttl_ms == b->ttl_ms && a->attempt == b->attempt &&
	       a->misfire == b->misfire && a->max_attempts == b->max_attempts;
}
