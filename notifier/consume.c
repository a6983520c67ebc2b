#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "cover.h"
#include "daemon.h"
#include "hmap.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "notifier.h"
#include "xmalloc.h"

/* Forged retry ids remembered to log each once; then forgotten at once. */
#define FORGED_REMEMBERED 10000

/*
 * The Kafka side: messages of the due-task topics and of the retry topic,
 * each held until its outcome is durable. A partition's offset is
 * committed only up to the first message still in hand, so a restart
 * replays at most what was in progress.
 */

void
nmsg_free(struct nmsg *m)
{
	xfree(m->topic);
	xfree(m->body);
	xfree(m->key);
	xfree(m->traceparent);
	xfree(m->tracestate);
	callback_spec_clear(&m->cb);
	xfree(m);
}

static struct npart *
part_get(struct notifier *n, const char *topic, int32_t partition)
{
	struct npart *p;

	for (p = n->parts; p != NULL; p = p->next)
		if (p->partition == partition && !strcmp(p->topic, topic))
			return p;
	p = xcalloc(1, sizeof(*p));
	p->topic = xstrdup(topic);
	p->partition = partition;
	p->committed = -1;
	p->next = n->parts;
	n->parts = p;
	return p;
}

static void
part_advance(struct notifier *n, struct npart *p)
{
	int64_t next = -1;
	struct nmsg *m;

	while ((m = p->head) != NULL && m->done) {
		next = m->offset + 1;
		p->head = m->next;
		if (p->head == NULL)
			p->tail = NULL;
		nmsg_free(m);
		n->pending--;
	}
	if (next >= 0 && next > p->committed) {
		kafka_consumer_commit(n->consumer, p->topic, p->partition,
				      next);
		p->committed = next;
	}
	metric_set(n->m.pending, (double)n->pending);
	if (n->held && !n->stopping &&
	    n->pending <
		    (size_t)cfg_int(n->cfg, CFG_NOTIFIER_MAX_PENDING) / 2) {
		n->held = 0;
		kafka_consumer_hold(n->consumer, 0);
	}
}

void
nmsg_done(struct nmsg *m)
{
	m->done = 1;
	part_advance(m->n, m->part);
}

/* A header's value as a new string (NULL if absent). */
static char *
header_dup(rd_kafka_headers_t *h, const char *name)
{
	const void *v;
	size_t len;

	if (h == NULL ||
	    rd_kafka_header_get_last(h, name, &v, &len) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR ||
	    v == NULL)
		return NULL;
	return xstrndup(v, len);
}

/* A header name from a message, fit for the log: a token or "?". */
static const char *
sanitized_name(const char *s)
{
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f ||
		    *p == '"' || *p == '\\')
			return "?";
	return s;
}

static int64_t
header_int(rd_kafka_headers_t *h, const char *name, int64_t def)
{
	char *s = header_dup(h, name), *end;
	long long v;

	if (s == NULL)
		return def;
	v = strtoll(s, &end, 10);
	if (end == s || *end != '\0')
		v = def;
	xfree(s);
	return v;
}

/*
 * Whether a message of the retry topic is one of our retry tasks: signed
 * by a notifier (outcome.c) under the cluster secret. Anyone who can
 * produce to the topic could otherwise make us call any URL with the id
 * and attempt of someone else's task.
 */
static int
retry_genuine(struct notifier *n, rd_kafka_headers_t *h,
	      const rd_kafka_message_t *km, const struct callback_spec *cb)
{
	char *f[7] = {
		header_dup(h, KHDR_ID),	     header_dup(h, RHDR_OF),
		header_dup(h, RHDR_ATTEMPT), header_dup(h, RHDR_DUE_AT),
		header_dup(h, RHDR_TOPIC),   header_dup(h, RHDR_OCCURRENCE),
		header_dup(h, RHDR_SIG)};
	struct callback_retry r = {.id = f[0],
				   .of = f[1],
				   .attempt = f[2],
				   .due_at = f[3],
				   .topic = f[4],
				   .occurrence = f[5],
				   .cb = cb,
				   .body = km->payload ? km->payload : "",
				   .body_len = km->len};
	int ok = f[0] != NULL &&
		 callback_retry_verify(n->retry_key, sizeof(n->retry_key), &r,
				       f[6]);

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		xfree(f[i]);
	return ok;
}

static void
free_key(const char *key, void *value, void *arg)
{
	xfree(value);
}

/* A forged retry: counted, logged once per task id. */
static void
forged(struct notifier *n, const struct nmsg *m, const rd_kafka_message_t *km)
{
	metric_inc(n->m.forged);
	if (hmap_get(n->forged_ids, m->id) != NULL)
		return;
	if (hmap_count(n->forged_ids) >= FORGED_REMEMBERED) {
		hmap_foreach(n->forged_ids, free_key, NULL);
		hmap_destroy(n->forged_ids);
		n->forged_ids = hmap_create();
	}
	{
		char *k = xstrdup(m->id);

		hmap_put(n->forged_ids, k, k);
	}
	log_warn("message on the retry topic without a valid signature; not "
		 "called back",
		 "id=%s%s partition=%d offset=%lld", m->id, m->trace,
		 (int)km->partition, (long long)km->offset);
}

/* The task's trace context (Kafka headers traceparent, tracestate), if
 * valid: messages produced straight to Kafka may carry anything. */
static void
trace_take(struct nmsg *m, rd_kafka_headers_t *h)
{
	char *p = header_dup(h, TRACE_PARENT), *s = header_dup(h, TRACE_STATE);

	if (p != NULL && trace_parent_invalid(p, strlen(p)) == NULL) {
		m->traceparent = p;
		p = NULL;
		if (s != NULL && trace_state_invalid(s, strlen(s)) == NULL) {
			m->tracestate = s;
			s = NULL;
		}
	}
	xfree(p);
	xfree(s);
	trace_kv_parent(m->trace, sizeof(m->trace), m->traceparent);
}

/* Fills the callback of m from the message; 0 if it has none, -1 if it
 * is a forged retry. */
static int
parse(struct notifier *n, struct nmsg *m, const rd_kafka_message_t *km)
{
	rd_kafka_headers_t *h = NULL;
	const char *ktopic = rd_kafka_topic_name(km->rkt);
	size_t plen = strlen(n->topic_prefix);
	char *id, *spec, first[TASK_HEADER_NAME_MAX + 1];
	int retry = !strcmp(ktopic, n->retry_ktopic), dropped;

	rd_kafka_message_headers(km, &h);
	id = header_dup(h, retry ? RHDR_OF : KHDR_ID);
	if (id == NULL || !task_id_valid(id, strlen(id))) {
		xfree(id);
		return 0;
	}
	snprintf(m->id, sizeof(m->id), "%s", id);
	xfree(id);
	trace_take(m, h);
	if (retry) {
		m->attempt = (int)header_int(h, RHDR_ATTEMPT, 2);
		m->due_at = header_int(h, RHDR_DUE_AT, 0);
		m->occurrence = header_int(h, RHDR_OCCURRENCE, 0);
		m->topic = header_dup(h, RHDR_TOPIC);
		/* trusted (it goes into the next retry task's JSON) only
		 * once the signature is checked below */
		if (m->topic == NULL)
			m->topic = xstrdup("");
	} else {
		m->attempt = 1;
		m->due_at = header_int(h, KHDR_DUE_AT, 0);
		m->occurrence = header_int(h, KHDR_OCCURRENCE, 0);
		m->topic = xstrdup(strncmp(ktopic, n->topic_prefix, plen)
					   ? ktopic
					   : ktopic + plen);
	}
	spec = header_dup(h, KHDR_CALLBACK);
	if (spec != NULL) {
		if (callback_spec_parse(spec, strlen(spec), &m->cb) < 0) {
			log_warn("unusable prophet-callback header; skipped",
				 "id=%s%s topic=%s", m->id, m->trace, ktopic);
			xfree(spec);
			return 0;
		}
		xfree(spec);
		if (retry && !retry_genuine(n, h, km, &m->cb))
			return -1;
	} else if (retry) {
		return -1;
	} else {
		const char *k, *v;
		size_t nr = cfg_extra_count(n->cfg, "notifier.routes");
		int found = 0;

		for (size_t i = 0; i < nr && !found; i++) {
			cfg_extra_get(n->cfg, "notifier.routes", i, &k, &v);
			if (!strcmp(k, m->topic)) {
				callback_spec_route(v, &m->cb);
				found = 1;
			}
		}
		if (!found)
			return 0;
	}
	/* Tasks submitted before the API refused them, and messages
	 * produced straight to Kafka, may still carry them. */
	dropped = callback_spec_sanitize(&m->cb, first, sizeof(first));
	if (dropped > 0) {
		metric_add(n->m.cb_headers_dropped, dropped);
		log_warn("callback headers not allowed are left out",
			 "id=%s%s count=%d first=\"%s\"", m->id, m->trace,
			 dropped, sanitized_name(first));
	}
	m->max_attempts =
		m->cb.max_attempts > 0
			? m->cb.max_attempts
			: (int)cfg_int(n->cfg, CFG_NOTIFIER_MAX_ATTEMPTS);
	if (m->attempt < 1)
		m->attempt = 1;
	m->body = xmemdup(km->payload ? km->payload : "", km->len);
	m->body_len = km->len;
	if (km->key != NULL && km->key_len > 0) {
		m->key = xmemdup(km->key, km->key_len);
		m->key_len = km->key_len;
	}
	return 1;
}

static int excluded(const struct notifier *n, const char *ktopic);

static void
message_cb(const rd_kafka_message_t *km, void *arg)
{
	struct notifier *n = arg;
	struct nmsg *m = xcalloc(1, sizeof(*m));
	char host[300];

	metric_inc(n->m.consumed);
	m->n = n;
	m->offset = km->offset;
	m->part = part_get(n, rd_kafka_topic_name(km->rkt), km->partition);
	if (m->part->tail != NULL)
		m->part->tail->next = m;
	else
		m->part->head = m;
	m->part->tail = m;
	n->pending++;
	metric_set(n->m.pending, (double)n->pending);
	if (n->pending >= (size_t)cfg_int(n->cfg, CFG_NOTIFIER_MAX_PENDING) &&
	    !n->held) {
		n->held = 1;
		kafka_consumer_hold(n->consumer, 1);
	}
	switch (excluded(n, rd_kafka_topic_name(km->rkt)) ? 0
							  : parse(n, m, km)) {
	case 0:
		metric_inc(n->m.skipped);
		nmsg_done(m);
		return;
	case -1:
		forged(n, m, km);
		nmsg_done(m);
		return;
	}
	if (callback_url_origin(m->cb.url, m->origin, sizeof(m->origin), host,
				sizeof(host)) < 0) {
		metric_inc(n->m.cb_refused);
		outcome_handle(m, HTTPCLI_ERROR, 0,
			       "callback URL has no usable host", 1);
		return;
	}
	if (!callback_host_allowed(
		    cfg_str(n->cfg, CFG_HTTP_CALLBACK_HOSTS_ALLOWED), host)) {
		metric_inc(n->m.cb_refused);
		outcome_handle(m, HTTPCLI_BLOCKED, 0,
			       "host not in http.callback_hosts_allowed", 1);
		return;
	}
	flow_enqueue(n, m);
}

/* Whether messages of this Kafka topic are Prophet's own, never due
 * tasks (dead letters, the archive, ingest submissions and refusals). */
static int
excluded(const struct notifier *n, const char *ktopic)
{
	size_t i;
	json_t *v;

	json_array_foreach (n->sub_excluded, i, v)
		if (!strcmp(json_string_value(v), ktopic))
			return 1;
	return 0;
}

static void
exclude(struct notifier *n, const char *ktopic)
{
	if (ktopic[0] != '\0' && !excluded(n, ktopic))
		json_array_append_new(n->sub_excluded, json_string(ktopic));
}

/*
 * notifier.topics -> the Kafka subscription: each task topic with the
 * prefix, regexes as written, and the retry topic. Empty: every task
 * topic (cover_default_pattern), so that a deployment with the generated
 * config makes every callback. What it is goes into n->sub_* for the
 * announcement (announce.c).
 */
static char *
subscription(struct notifier *n, char *err, size_t errlen)
{
	const char *p = cfg_str(n->cfg, CFG_NOTIFIER_TOPICS);
	const char *ing = cfg_str(n->cfg, CFG_KAFKA_INGEST_TOPIC);
	const char *ierr = cfg_str(n->cfg, CFG_KAFKA_INGEST_ERRORS_TOPIC);
	size_t i, len = 0, cap;
	json_t *v;
	char *out;

	n->sub_topics = json_array();
	n->sub_patterns = json_array();
	n->sub_excluded = json_array();
	while (*p) {
		size_t k;
		char *one;

		while (*p == ' ' || *p == ',')
			p++;
		k = strcspn(p, ", ");
		if (k == 0)
			break;
		if (p[0] != '^' && !task_topic_valid(p, k)) {
			snprintf(err, errlen,
				 "notifier.topics: '%.*s' is not a topic name",
				 (int)k, p);
			return NULL;
		}
		one = p[0] == '^'
			      ? xstrndup(p, k)
			      : xasprintf("%s%.*s", n->topic_prefix, (int)k, p);
		json_array_append_new(p[0] == '^' ? n->sub_patterns
						  : n->sub_topics,
				      json_string(one));
		xfree(one);
		p += k;
	}
	if (json_array_size(n->sub_topics) == 0 &&
	    json_array_size(n->sub_patterns) == 0) {
		char *all = cover_default_pattern(n->topic_prefix);

		json_array_append_new(n->sub_patterns, json_string(all));
		if (n->topic_prefix[0] == '\0')
			log_info(
				"the notifier reads every topic of the "
				"brokers (no kafka.topic_prefix, no "
				"notifier.topics): it makes the callbacks of "
				"any Prophet's tasks on them",
				"pattern=\"%s\" hint=\"set kafka.topic_prefix, "
				"or notifier.topics, where the brokers serve "
				"other clusters too\"",
				all);
		xfree(all);
	}
	json_array_append_new(n->sub_topics, json_string(n->retry_ktopic));
	exclude(n, n->dlq_ktopic);
	exclude(n, cfg_str(n->cfg, CFG_TASK_ARCHIVE_TOPIC));
	if (ing[0] != '\0') {
		char *e = ierr[0] ? xstrdup(ierr) : xasprintf("%s.errors", ing);

		exclude(n, ing);
		exclude(n, e);
		xfree(e);
	}
	cap = 1;
	json_array_foreach (n->sub_patterns, i, v)
		cap += strlen(json_string_value(v)) + 1;
	json_array_foreach (n->sub_topics, i, v)
		cap += strlen(json_string_value(v)) + 1;
	out = xmalloc(cap);
	out[0] = '\0';
	json_array_foreach (n->sub_patterns, i, v)
		len += (size_t)snprintf(out + len, cap - len, "%s%s",
					len ? "," : "", json_string_value(v));
	json_array_foreach (n->sub_topics, i, v)
		len += (size_t)snprintf(out + len, cap - len, "%s%s",
					len ? "," : "", json_string_value(v));
	return out;
}

/* Whether [kafka.consumer] sets key itself. */
static int
consumer_sets(const struct notifier *n, const char *key)
{
	size_t nx = cfg_extra_count(n->cfg, "kafka.consumer");
	const char *k, *v;

	for (size_t i = 0; i < nx; i++) {
		cfg_extra_get(n->cfg, "kafka.consumer", i, &k, &v);
		if (!strcmp(k, key))
			return 1;
	}
	return 0;
}

int
consume_start(struct notifier *n, char *err, size_t errlen)
{
	char *topics = subscription(n, err, errlen);
	/* A topic created after the subscription (by the first publish to
	 * it) is found at the next metadata refresh: librdkafka's 5 minutes
	 * would hold the first callbacks of a new topic that long (none is
	 * lost: offsets start at the earliest). */
	const char *props[5];
	struct kafka_consumer_opts opts = {0};
	int np = 0;

	if (topics == NULL)
		return -1;
	if (!consumer_sets(n, "topic.metadata.refresh.interval.ms")) {
		props[np++] = "topic.metadata.refresh.interval.ms";
		props[np++] = "10000";
	}
	/* Workers with kafka.exactly_once write in transactions: a record
	 * of one that aborted (a fenced zombie's) is never called back. The
	 * same as read_uncommitted for records written outside any. */
	props[np++] = "isolation.level";
	props[np++] = "read_committed";
	props[np] = NULL;
	opts.props = props;
	/* A static member named by its metrics address: the one restarted
	 * in place takes its partitions back at once. */
	opts.role = "notifier";
	opts.listen = cfg_str(n->cfg, CFG_NOTIFIER_HTTP_LISTEN);
	n->forged_ids = hmap_create();
	n->consumer = kafka_consumer_create_opts(
		n->base, n->cfg, cfg_str(n->cfg, CFG_NOTIFIER_GROUP), topics,
		message_cb, n, &opts, err, errlen);
	if (n->consumer == NULL) {
		xfree(topics);
		return -1;
	}
	log_info("consuming", "topics=%s group=%s", topics,
		 cfg_str(n->cfg, CFG_NOTIFIER_GROUP));
	xfree(topics);
	return 0;
}

void
consume_hold(struct notifier *n)
{
	n->held = 1;
	kafka_consumer_hold(n->consumer, 1);
}

/* Leaves the group; what was not done is redelivered to its next member
 * (offsets were never committed past it). */
void
consume_stop(struct notifier *n)
{
	struct npart *p, *pn;

	kafka_consumer_destroy(n->consumer);
	n->consumer = NULL;
	if (n->forged_ids != NULL) {
		hmap_foreach(n->forged_ids, free_key, NULL);
		hmap_destroy(n->forged_ids);
		n->forged_ids = NULL;
	}
	for (p = n->parts; p != NULL; p = pn) {
		struct nmsg *m, *mn;

		pn = p->next;
		for (m = p->head; m != NULL; m = mn) {
			mn = m->next;
			nmsg_free(m);
		}
		xfree(p->topic);
		xfree(p);
	}
	n->parts = NULL;
	json_decref(n->sub_topics);
	json_decref(n->sub_patterns);
	json_decref(n->sub_excluded);
	n->sub_topics = n->sub_patterns = n->sub_excluded = NULL;
}
