#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <jansson.h>

#include "daemon.h"
#include "http.h"
#include "manager.h"
#include "xmalloc.h"

/*
 * mykit-delay compatible endpoints, so its users can switch without code
 * changes (docs/migrating-from-mykit-delay.md):
 *   POST /push            {body, delay, id, topic, subtopic, ttl, createTime,
 *                          bizKey} -> a task due at createTime + delay
 *   GET  /delete?jobId=   cancel
 *   GET  /reStore?expire= restore the index (expire=true: expired tasks too)
 *   GET  /reStoreJob?jobId=
 *   GET  /clearAll        drop the Redis index (rebuilt from the DB)
 *   GET  /get/{topic}     the next due task of the topic (long poll; group
 *                         pull.mykit_group, acknowledged when handed out)
 * Answers: {"success":true,"data":"<id>","code":200} or
 * {"success":false,"message":"...","code":500}: the route table marks these
 * routes HTTP_SHAPE_MYKIT and http_reply_json renders every answer so.
 */

/* 2^53: far beyond any due time, and the sum of two cannot overflow. */
#define MYKIT_TIME_MAX 9007199254740992LL

/*
 * The job id of /delete and /reStoreJob (its articles write JobId as often
 * as jobId), decoded; NULL (answered) when absent or not a task id (an
 * encoded NUL does not cut it short).
 */
static char *
job_id(struct evhttp_request *req, size_t *lenp)
{
	char *id = http_query_get(req, "jobId", lenp);

	if (id == NULL)
		id = http_query_get(req, "JobId", lenp);
	if (id == NULL) {
		http_reply_error(req, 400, "missing_field", "jobId",
				 "jobId is required");
		return NULL;
	}
	if (!api_check_id(req, id, *lenp)) {
		free(id);
		return NULL;
	}
	return id;
}

/* Maps a mykit-delay job onto a Prophet task; NULL with *why on error. */
static json_t *
map_push(json_t *in, const char **why)
{
	json_t *t = json_object(), *v, *headers = NULL;
	int64_t created = 0, delay = 0;

	*why = NULL;
	if (!json_is_object(in)) {
		*why = "expected a JSON object";
		json_decref(t);
		return NULL;
	}
	if ((v = json_object_get(in, "id")) != NULL && !json_is_null(v)) {
		if (json_is_integer(v)) {
			char buf[32];

			snprintf(buf, sizeof(buf), "%lld",
				 (long long)json_integer_value(v));
			json_object_set_new(t, "id", json_string(buf));
		} else if (json_is_string(v) && json_string_length(v) > 0) {
			json_object_set(t, "id", v);
		}
	}
	if ((v = json_object_get(in, "topic")) != NULL)
		json_object_set(t, "topic", v);
	if ((v = json_object_get(in, "body")) != NULL)
		json_object_set(t, "body", v);
	if ((v = json_object_get(in, "createTime")) != NULL &&
	    json_is_integer(v) && json_integer_value(v) > 0)
		created = json_integer_value(v);
	if ((v = json_object_get(in, "delay")) != NULL) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			*why = "delay must be a non-negative integer (ms)";
			json_decref(t);
			return NULL;
		}
		delay = json_integer_value(v);
	}
	/* Both are the client's: their sum must not overflow (the task's
	 * own validation bounds how far ahead it may be). */
	if (created > MYKIT_TIME_MAX || delay > MYKIT_TIME_MAX) {
		*why = "createTime and delay must be at most 2^53 ms";
		json_decref(t);
		return NULL;
	}
	/* Without createTime the job is due delay from now: as delay_ms,
	 * so that a client's retry of the same push is a replay (the
	 * content is the delay, not the time it resolved to). */
	if (created > 0)
		json_object_set_new(t, "due_at", json_integer(created + delay));
	else
		json_object_set_new(t, "delay_ms", json_integer(delay));
	if ((v = json_object_get(in, "ttl")) != NULL && json_is_integer(v) &&
	    json_integer_value(v) > 0)
		json_object_set(t, "ttl_ms", v);
	if ((v = json_object_get(in, "subtopic")) != NULL &&
	    json_is_string(v) && json_string_length(v) > 0) {
		headers = json_object();
		json_object_set(headers, "mykit-subtopic", v);
	}
	if ((v = json_object_get(in, "bizKey")) != NULL && json_is_string(v) &&
	    json_string_length(v) > 0) {
		if (headers == NULL)
			headers = json_object();
		json_object_set(headers, "mykit-bizkey", v);
		json_object_set(t, "key", v);
	}
	if (headers != NULL)
		json_object_set_new(t, "headers", headers);
	return t;
}

void
mykit_push(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	struct manager *mg = ctx;
	const char *why;
	json_t *in, *task;

	(void)a;
	(void)n;
	if ((in = api_body_json(mg, req)) == NULL)
		return;
	task = map_push(in, &why);
	json_decref(in);
	if (task == NULL) {
		http_reply_error(req, 400, "invalid_value", NULL, "%s", why);
		return;
	}
	api_request_trace(req, task);
	api_submit(mg, req, task);
}

/* /delete and /reStoreJob: the job id checked, then the native call. */
static void
with_job(struct evhttp_request *req, struct manager *mg,
	 void (*fn)(struct manager *, struct evhttp_request *, const char *,
		    size_t))
{
	size_t len;
	char *id = job_id(req, &len);

	if (id != NULL)
		fn(mg, req, id, len);
	free(id);
}

void
mykit_delete(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	with_job(req, ctx, tasks_cancel);
}

void
mykit_restore_job(void *ctx, struct evhttp_request *req, const char *a,
		  size_t n)
{
	(void)a;
	(void)n;
	with_job(req, ctx, restore_one);
}

void
mykit_restore(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	size_t len;
	char *e = http_query_get(req, "expire", &len);

	(void)a;
	(void)n;
	restore_launch(ctx, req, -1, e != NULL && !strcmp(e, "true"));
	free(e);
}

void
mykit_clear_all(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	(void)a;
	(void)n;
	restore_clear_all(ctx, req);
}

void
mykit_get(void *ctx, struct evhttp_request *req, const char *a, size_t n)
{
	pull_mykit_get(ctx, req, a, n);
}
