#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "kafka.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Kafka ingest: task submissions (the API's JSON) consumed from
 * kafka.ingest_topic, with the same validation, idempotency and group
 * commit as HTTP. A message without an id gets one derived from where it
 * sits (kafka:<topic>:<partition>:<offset>), so a redelivered message is
 * an identical replay, not a second task. Refused ones (bad JSON, invalid
 * task, same id with other content) go to the errors topic with the reason
 * in headers. A partition's offset is committed only up to the first
 * message not yet durably handled (committed in the DB, or its error
 * message acknowledged by Kafka).
 */

#define KINGEST_MAX_PENDING 20000
#define KINGEST_RETRY_MS 1000

struct kmsg {
	struct ingest_req req;
	struct kingest *k;
	struct kpart *part;
	int64_t offset;
	int done;
	char *raw; /* the message, for the errors topic */
	size_t rawlen;
	char *why_code, *why_field, *why_message; /* once refused */
	struct kmsg *next; /* in its partition, by offset */
};

struct kpart {
	int32_t partition;
	struct kmsg *head, *tail;
	int64_t committed;
	struct kpart *next;
};

struct kingest {
	struct manager *mg;
	struct kafka_consumer *consumer;
	struct kafka_producer *producer;
	char *topic;
	char *errors_topic;
	struct kpart *parts;
	size_t pending;
	int64_t pending_bytes; /* of the messages in hand */
	int64_t max_pending_bytes;
	int held;
	struct metric *consumed;
	struct metric *refused;
	struct metric *held_total;
};

static void
kmsg_free(struct kmsg *m)
{
	task_clear(&m->req.task);
	xfree(m->raw);
	xfree(m->why_code);
	xfree(m->why_field);
	xfree(m->why_message);
	xfree(m);
}

static struct kpart *
part_get(struct kingest *k, int32_t partition)
{
	struct kpart *p;

	for (p = k->parts; p != NULL; p = p->next)
		if (p->partition == partition)
			return p;
	p = xcalloc(1, sizeof(*p));
	p->partition = partition;
	p->committed = -1;
	p->next = k->parts;
	k->parts = p;
	return p;
}

/* Commits up to the first message of the partition still in hand. */
static void
part_advance(struct kingest *k, struct kpart *p)
{
	int64_t next = -1;
	struct kmsg *m;

	while ((m = p->head) != NULL && m->done) {
		next = m->offset + 1;
		p->head = m->next;
		if (p->head == NULL)
			p->tail = NULL;
		k->pending--;
		k->pending_bytes -= (int64_t)m->rawlen;
		kmsg_free(m);
	}
	if (next >= 0 && next > p->committed) {
		kafka_consumer_commit(k->consumer, k->topic, p->partition,
				      next);
		p->committed = next;
	}
	if (k->held && k->pending < KINGEST_MAX_PENDING / 2 &&
	    k->pending_bytes < k->max_pending_bytes / 2) {
		k->held = 0;
		kafka_consumer_hold(k->consumer, 0);
	}
}

static void
msg_done(struct kmsg *m)
{
	m->done = 1;
	part_advance(m->k, m->part);
}

/* The delivery report of a refused submission's error message. */
static void
error_dr_cb(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
	struct kmsg *m = opaque;

	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		/* message.timeout.ms is infinite: only a purge at shutdown
		 * gets here. The offset stays uncommitted: redelivered. */
		log_warn("ingest error message not delivered", "offset=%lld",
			 (long long)m->offset);
		return;
	}
	msg_done(m);
}

static void refuse_send(struct kmsg *m);

static void
refuse_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	refuse_send(arg);
}

static void
refuse_send(struct kmsg *m)
{
	struct kingest *k = m->k;
	struct timeval tv = {1, 0};
	rd_kafka_resp_err_t err;
	rd_kafka_headers_t *h = rd_kafka_headers_new(4);
	char off[32];

	rd_kafka_header_add(h, "prophet-error-code", -1, m->why_code, -1);
	rd_kafka_header_add(h, "prophet-error-message", -1, m->why_message, -1);
	if (m->why_field != NULL)
		rd_kafka_header_add(h, "prophet-error-field", -1, m->why_field,
				    -1);
	snprintf(off, sizeof(off), "%d:%lld", m->part->partition,
		 (long long)m->offset);
	rd_kafka_header_add(h, "prophet-source-offset", -1, off, -1);
	if (kafka_produce(k->producer, k->errors_topic, NULL, 0, m->raw,
			  m->rawlen, h, m, &err) < 0) {
		log_warn("cannot queue an ingest error message; retrying",
			 "error=\"%s\"", rd_kafka_err2str(err));
		event_base_once(k->mg->base, -1, EV_TIMEOUT, refuse_retry_cb, m,
				&tv);
	}
}

/* A header value of the reason. Reasons quote what came from outside (a
 * field name, a trigger's message text) and were cut at byte counts on
 * their way here: made valid UTF-8, for consumers that read headers as
 * text. */
static char *
reason_text(const char *s)
{
	char buf[512];

	utf8_copy(buf, sizeof(buf), s, strlen(s));
	return xstrdup(buf);
}

/* Sends the submission to the errors topic; done when Kafka has it. */
static void
refuse(struct kmsg *m, const char *code, const char *field, const char *message)
{
	metric_inc(m->k->refused);
	m->why_code = reason_text(code);
	m->why_field = field && field[0] ? reason_text(field) : NULL;
	m->why_message = reason_text(message);
	refuse_send(m);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg);

static void
submitted_cb(struct ingest_req *r, void *arg)
{
	struct kmsg *m = arg;

	m->k->mg->inflight--;
	struct timeval tv = {KINGEST_RETRY_MS / 1000,
			     (KINGEST_RETRY_MS % 1000) * 1000};

	if (m->k->mg->stopping && r->result != 201 && r->result != 200 &&
	    r->result != 409 && r->result != 400)
		return; /* redelivered after the restart */
	switch (r->result) {
	case 201:
		metric_inc(m->k->mg->m.accepted);
		msg_done(m);
		break;
	case 200:
		metric_inc(m->k->mg->m.replayed);
		msg_done(m);
		break;
	case 409:
		metric_inc(m->k->mg->m.conflicts);
		refuse(m, "conflict", "id",
		       "a task with this id exists with different content");
		break;
	case 400:
		/* Refused by the database for its values: retrying would
		 * stall the partition forever. */
		refuse(m, r->refused.code, r->refused.field,
		       r->refused.message);
		break;
	default:
		/* The DB is down: try again; the offset waits. */
		event_base_once(m->k->mg->base, -1, EV_TIMEOUT, retry_cb, m,
				&tv);
		break;
	}
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kmsg *m = arg;

	m->req.started_us = clock_mono_us();
	m->k->mg->inflight++;
	ingest_submit(m->k->mg->ingest, &m->req);
}

/* A topic that does not exist would stall nothing here, but its task
 * would never be published: refused like any invalid submission. */
static void
checked_cb(const struct task_error *refused, void *arg)
{
	struct kmsg *m = arg;

	if (refused == NULL) {
		ingest_submit(m->k->mg->ingest, &m->req);
		return;
	}
	m->k->mg->inflight--;
	metric_inc(m->k->mg->m.topic_unknown);
	refuse(m, refused->code, refused->field, refused->message);
}

static void
message_cb(const rd_kafka_message_t *km, void *arg)
{
	struct kingest *k = arg;
	struct kmsg *m = xcalloc(1, sizeof(*m));
	struct task_error terr;
	char id[TASK_ID_MAX + 1];
	json_error_t jerr;
	json_t *in;

	metric_inc(k->consumed);
	m->k = k;
	m->offset = km->offset;
	m->part = part_get(k, km->partition);
	m->raw = xmemdup(km->payload, km->len);
	m->rawlen = km->len;
	if (m->part->tail != NULL)
		m->part->tail->next = m;
	else
		m->part->head = m;
	m->part->tail = m;
	k->pending_bytes += (int64_t)km->len;
	/* Bounded in count and in bytes: messages in hand wait for the
	 * database or for the errors topic, either of which may be slow. */
	if ((++k->pending >= KINGEST_MAX_PENDING ||
	     k->pending_bytes >= k->max_pending_bytes) &&
	    !k->held) {
		k->held = 1;
		metric_inc(k->held_total);
		kafka_consumer_hold(k->consumer, 1);
	}
	/* A task without an id takes one from where it was read, so that
	 * a message read twice is a replay. */
	snprintf(id, sizeof(id), "kafka:%s:%d:%lld", k->topic, km->partition,
		 (long long)km->offset);
	if (!task_from_text(km->payload, km->len, &k->mg->limits,
			    manager_due_now(k->mg), id, &m->req.task)) {
		in = json_loadb(km->payload, km->len,
				JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
		if (in == NULL) {
			refuse(m, "invalid_json", NULL, jerr.text);
			return;
		}
		if (json_is_object(in) && json_object_get(in, "id") == NULL)
			json_object_set_new(in, "id", utf8_json_str(id));
		if (task_from_json(in, &k->mg->limits, manager_due_now(k->mg),
				   &m->req.task, &terr) < 0) {
			json_decref(in);
			refuse(m, terr.code, terr.field, terr.message);
			return;
		}
		json_decref(in);
	}
	if (guard_submission(k->mg, &m->req.task, &terr) < 0) {
		refuse(m, terr.code, terr.field, terr.message);
		return;
	}
	m->req.started_us = clock_mono_us();
	m->req.done_cb = submitted_cb;
	m->req.arg = m;
	k->mg->inflight++;
	ktopics_check(k->mg, m->req.task.topic, checked_cb, m);
}

/* Shutdown: read nothing more. */
void
kingest_stop(struct kingest *k)
{
	if (k != NULL)
		kafka_consumer_hold(k->consumer, 1);
}

struct kingest *
kingest_create(struct manager *mg, char *err, size_t errlen)
{
	const char *topic = cfg_str(mg->cfg, CFG_KAFKA_INGEST_TOPIC);
	const char *et = cfg_str(mg->cfg, CFG_KAFKA_INGEST_ERRORS_TOPIC);
	struct kafka_consumer_opts opts = {0};
	struct kingest *k;

	if (topic[0] == '\0')
		return NULL;
	k = xcalloc(1, sizeof(*k));
	k->mg = mg;
	k->topic = xstrdup(topic);
	k->errors_topic = et[0] ? xstrdup(et) : xasprintf("%s.errors", topic);
	k->consumed = metrics_register(
		METRIC_COUNTER, "prophet_ingest_consumed_total",
		"Submissions read from the ingest topic", NULL, 0);
	k->refused =
		metrics_register(METRIC_COUNTER, "prophet_ingest_refused_total",
				 "Ingest submissions sent to the errors "
				 "topic",
				 NULL, 0);
	k->held_total = metrics_register(
		METRIC_COUNTER, "prophet_ingest_held_total",
		"Times reading the ingest topic paused with too much in hand "
		"(20,000 messages or kafka.ingest_max_pending_bytes)",
		NULL, 0);
	k->max_pending_bytes =
		cfg_int(mg->cfg, CFG_KAFKA_INGEST_MAX_PENDING_BYTES);
	k->producer = kafka_producer_create(mg->base, mg->cfg, error_dr_cb, k,
					    err, errlen);
	if (k->producer == NULL)
		goto fail;
	{
		const char *own[] = {topic, k->errors_topic};

		if (kafka_ensure_topics(k->producer, mg->cfg, own, 2, 10000,
					err, errlen) < 0)
			log_warn("cannot create the ingest topics; they must "
				 "exist (or auto-creation be on)",
				 "error=\"%s\" hint=\"allow CREATE on them, or "
				 "create them\"",
				 err);
	}
	/* A static member named by its API address (kafka.c). */
	opts.role = "manager";
	opts.listen = cfg_str(mg->cfg, CFG_HTTP_LISTEN);
	k->consumer = kafka_consumer_create_opts(
		mg->base, mg->cfg, cfg_str(mg->cfg, CFG_KAFKA_INGEST_GROUP),
		topic, message_cb, k, &opts, err, errlen);
	if (k->consumer == NULL)
		goto fail;
	log_info("kafka ingest on", "topic=%s errors_topic=%s group=%s", topic,
		 k->errors_topic, cfg_str(mg->cfg, CFG_KAFKA_INGEST_GROUP));
	return k;
fail:
	kafka_producer_destroy(k->producer, 0);
	xfree(k->topic);
	xfree(k->errors_topic);
	xfree(k);
	return NULL;
}

/* Stops consuming; what was not durably handled is redelivered to the
 * group's next member (offsets were never committed past it). */
void
kingest_destroy(struct kingest *k)
{
	struct kpart *p, *pn;

	if (k == NULL)
		return;
	/* The producer first: its delivery reports, served while it
	 * flushes, commit offsets through the consumer. */
	kafka_producer_destroy(k->producer, 2000);
	kafka_consumer_destroy(k->consumer);
	for (p = k->parts; p != NULL; p = pn) {
		struct kmsg *m, *mn;

		pn = p->next;
		for (m = p->head; m != NULL; m = mn) {
			mn = m->next;
			kmsg_free(m);
		}
		xfree(p);
	}
	xfree(k->topic);
	xfree(k->errors_topic);
	xfree(k);
}
