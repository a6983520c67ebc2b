#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
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
 * Answers: {"success":true,"data":"<id>","code":200} or
 * {"success":false,"message":"...","code":500} (http_mark_mykit).
 */

/* Its articles write JobId as often as jobId. */
static const char *
job_id(struct evkeyvalq *q)
{
	const char *v = evhttp_find_header(q, "jobId");

	return v ? v : evhttp_find_header(q, "JobId");
}

/* Maps a mykit-delay job onto a Prophet task; NULL with *why on error. */
static json_t *
map_push(json_t *in, int64_t now, const char **why)
{
	json_t *t = json_object(), *v, *headers = NULL;
	int64_t created = now, delay = 0;

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
	json_object_set_new(t, "due_at", json_integer(created + delay));
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

int
mykit_route(struct manager *mg, struct evhttp_request *req, const char *path,
	    enum evhttp_cmd_type m)
{
	const char *q =
		evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	struct evkeyvalq kv;
	const char *id, *why;
	json_t *in, *task;

	if (strcmp(path, "/push") && strcmp(path, "/delete") &&
	    strcmp(path, "/reStore") && strcmp(path, "/reStoreJob") &&
	    strcmp(path, "/clearAll"))
		return 0;
	http_mark_mykit(req);
	if (!strcmp(path, "/push")) {
		if (m != EVHTTP_REQ_POST) {
			http_reply_error(req, 405, "method_not_allowed", NULL,
					 "use POST");
			return 1;
		}
		if ((in = api_body_json(mg, req)) == NULL)
			return 1;
		task = map_push(in, clock_now_ms(), &why);
		json_decref(in);
		if (task == NULL)
			http_reply_error(req, 400, "invalid_value", NULL, "%s",
					 why);
		else
			api_submit(mg, req, task);
		return 1;
	}
	if (!strcmp(path, "/clearAll")) {
		restore_clear_all(mg, req);
		return 1;
	}
	TAILQ_INIT(&kv);
	evhttp_parse_query_str(q ? q : "", &kv);
	if (!strcmp(path, "/reStore")) {
		const char *e = evhttp_find_header(&kv, "expire");

		restore_launch(mg, req, -1, e != NULL && !strcmp(e, "true"));
	} else if ((id = job_id(&kv)) == NULL) {
		http_reply_error(req, 400, "missing_field", "jobId",
				 "jobId is required");
	} else if (!strcmp(path, "/delete")) {
		tasks_cancel(mg, req, id, strlen(id));
	} else {
		restore_one(mg, req, id, strlen(id));
	}
	evhttp_clear_headers(&kv);
	return 1;
}
