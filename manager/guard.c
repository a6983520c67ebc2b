#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "callback.h"
#include "cfg.h"
#include "crypto.h"
#include "daemon.h"
#include "db.h"
#include "kafka.h"
#include "log.h"
#include "manager.h"
#include "marker.h"
#include "schema.h"
#include "xmalloc.h"

/*
 * What a valid task may still not do: use a topic outside
 * http.topics_allowed, name a Kafka topic longer than Kafka allows (it
 * would be accepted, then never published), land on one of Kafka's
 * internal topics (likewise) or on the notifier's dead-letter topic, or
 * pose as one of the notifier's retry tasks (which make it call a URL,
 * with the attempt and original id of someone else's task). Retry tasks
 * carry an HMAC under the cluster secret.
 */

static const char *
header(const struct task *t, const char *name)
{
	return t->headers ? json_string_value(json_object_get(t->headers, name))
			  : NULL;
}

/* Whether t carries the signature the notifier gives its retry tasks. */
static int
retry_signed(const struct manager *mg, const struct task *t)
{
	struct callback_spec cb;
	struct callback_retry r;
	const char *sig = header(t, RHDR_SIG);
	char *spec;
	int ok;

	if (sig == NULL || t->callback == NULL || !mg->have_retry_key)
		return 0;
	/* the spec as the notifier will see it: the worker's header */
	spec = callback_header_encode(t->callback, t->max_attempts);
	ok = callback_spec_parse(spec, strlen(spec), &cb) == 0;
	xfree(spec);
	if (!ok)
		return 0;
	r = (struct callback_retry){
		.id = t->id,
		.of = header(t, RHDR_OF),
		.attempt = header(t, RHDR_ATTEMPT),
		.due_at = header(t, RHDR_DUE_AT),
		.topic = header(t, RHDR_TOPIC),
		.occurrence = header(t, RHDR_OCCURRENCE),
		.cb = &cb,
		.body = t->body,
		.body_len = t->body_len,
	};
	ok = callback_retry_verify(mg->retry_key, sizeof(mg->retry_key), &r,
				   sig);
	callback_spec_clear(&cb);
	return ok;
}

/* Whether topic is where exactly-once workers write their markers: a
 * task there would be read as one (a forged "published" for any id). */
static int
is_marker_topic(const struct manager *mg, const char *topic)
{
	const char *prefix = cfg_str(mg->cfg, CFG_KAFKA_TOPIC_PREFIX);
	char name[KAFKA_TOPIC_NAME_MAX + 2];
	size_t n = strlen(prefix);

	if (marker_topic(name, sizeof(name),
			 cfg_str(mg->cfg, CFG_KAFKA_EOS_TOPIC), prefix,
			 cfg_str(mg->cfg, CFG_CLUSTER_ROOT)) < 0)
		return 0;
	return !strncmp(name, prefix, n) && !strcmp(name + n, topic);
}

/* Whether prefix + topic is one of Kafka's own topics: the brokers take
 * no record there from a producer ("Invalid topic"), so a task on it
 * would be accepted and then never published. */
static int
is_kafka_internal(const char *prefix, const char *topic)
{
	static const char *const internal[] = {
		"__consumer_offsets", "__transaction_state",
		"__share_group_state", "__cluster_metadata", NULL};
	size_t n = strlen(prefix);

	for (int i = 0; internal[i] != NULL; i++)
		if (!strncmp(internal[i], prefix, n) &&
		    !strcmp(internal[i] + n, topic))
			return 1;
	return 0;
}

int
guard_submission(const struct manager *mg, const struct task *t,
		 struct task_error *err)
{
	const char *prefix = cfg_str(mg->cfg, CFG_KAFKA_TOPIC_PREFIX);
	size_t n = strlen(prefix) + strlen(t->topic);

	if (!api_topic_allowed(mg, t->topic))
		return task_error_set(err, 400, "invalid_value", "topic",
				      "topic '%s' is not in "
				      "http.topics_allowed",
				      t->topic);
	if (n > KAFKA_TOPIC_NAME_MAX)
		return task_error_set(err, 400, "invalid_value", "topic",
				      "kafka.topic_prefix + topic is %zu "
				      "characters; Kafka allows %d",
				      n, KAFKA_TOPIC_NAME_MAX);
	if (!strcmp(t->topic, cfg_str(mg->cfg, CFG_NOTIFIER_DEAD_LETTER_TOPIC)))
		return task_error_set(err, 400, "reserved_topic", "topic",
				      "topic '%s' is the notifier's "
				      "dead-letter topic",
				      t->topic);
	if (is_kafka_internal(prefix, t->topic))
		return task_error_set(err, 400, "reserved_topic", "topic",
				      "Kafka topic '%s%s' is internal to "
				      "Kafka: it takes no tasks",
				      prefix, t->topic);
	if (is_marker_topic(mg, t->topic))
		return task_error_set(err, 400, "reserved_topic", "topic",
				      "topic '%s' is the exactly-once marker "
				      "topic",
				      t->topic);
	if (!strcmp(t->topic, cfg_str(mg->cfg, CFG_NOTIFIER_RETRY_TOPIC)) &&
	    !retry_signed(mg, t))
		return task_error_set(err, 403, "invalid_signature", "headers",
				      "topic '%s' takes only the notifier's "
				      "retry tasks (header " RHDR_SIG
				      " missing or not valid)",
				      t->topic);
	return 0;
}

/* INSERT IGNORE of a fresh key, then whichever key won. */
static int
load_key(struct db_conn *c, struct manager *mg, char *err, size_t errlen)
{
	unsigned char fresh[CALLBACK_KEY_LEN];
	struct db_params p;
	struct db_rows rows;
	unsigned long len = 0;
	const char *v;
	int rc;

	if (crypto_random(fresh, sizeof(fresh)) < 0)
		log_fatal("no random bytes for the cluster secret", "");
	db_params_init(&p, 3);
	db_params_str(&p, CALLBACK_KEY_NAME);
	db_params_blob(&p, fresh, sizeof(fresh));
	db_params_int(&p, clock_now_ms());
	rc = db_exec(c, SQL_SECRET_CREATE, &p, NULL);
	db_params_free(&p);
	if (rc < 0)
		goto db_error;
	db_params_init(&p, 1);
	db_params_str(&p, CALLBACK_KEY_NAME);
	rc = db_query(c, SQL_SECRET_GET, &p, &rows);
	db_params_free(&p);
	if (rc < 0)
		goto db_error;
	v = rows.nrows ? db_rows_get(&rows, 0, 0, &len) : NULL;
	if (v != NULL && len == sizeof(mg->retry_key)) {
		memcpy(mg->retry_key, v, sizeof(mg->retry_key));
		mg->have_retry_key = 1;
	} else {
		snprintf(err, errlen,
			 "cluster secret '%s': not %d bytes in the "
			 "cluster_secret table",
			 CALLBACK_KEY_NAME, CALLBACK_KEY_LEN);
	}
	db_rows_free(&rows);
	return mg->have_retry_key ? 0 : -1;
db_error:
	snprintf(err, errlen, "cluster secret: %s", db_conn_error(c));
	return -1;
}

int
guard_start(struct manager *mg, int wait_s, char *err, size_t errlen)
{
	for (int i = 0; i <= wait_s; i++) {
		int refused;
		struct db_conn *c =
			db_conn_open(mg->dsn, &refused, err, errlen);

		if (refused)
			return -1;
		if (c != NULL) {
			int rc = load_key(c, mg, err, errlen);

			db_conn_close(c);
			if (rc == 0)
				return 0;
		}
		if (i == 0 || i % 10 == 0)
			log_warn("waiting for the database", "error=\"%s\"",
				 err);
		sleep(1);
	}
	return -1;
}
