#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "task_same.h"

static int
str_eq(const char *a, const char *b)
{
	return (a == NULL && b == NULL) ||
	       (a != NULL && b != NULL && !strcmp(a, b));
}

int
task_same_fields(const struct task *a, const struct task *b)
{
	if (!str_eq(a->topic, b->topic) || a->body_len != b->body_len ||
	    memcmp(a->body, b->body, a->body_len + 1) ||
	    a->due_at != b->due_at || a->delay_ms != b->delay_ms ||
	    !str_eq(a->key, b->key) || a->max_attempts != b->max_attempts ||
	    a->ttl_ms != b->ttl_ms || a->content_hash != b->content_hash ||
	    a->status != b->status || a->created_at != b->created_at ||
	    a->updated_at != b->updated_at)
		return 0;
	return a->headers == NULL && b->headers == NULL &&
	       a->callback == NULL && b->callback == NULL && a->cron == NULL &&
	       b->cron == NULL && a->timezone == NULL && b->timezone == NULL &&
	       a->misfire == b->misfire;
}
