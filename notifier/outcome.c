#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "httpcli.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "notifier.h"
#include "schema.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * What follows an attempt. Success: the task's callback_status becomes ok.
 * Failure with attempts left: a retry task is submitted to the manager
 * (retry topic, due after the backoff), then the status becomes retrying.
 * Last failure: the message goes to the dead-letter topic, then the status
 * becomes failed. Each outcome is written to the database (status + a
 * task_log row with the attempt and the error) before the message is done
 * and its offset may be committed.
 */

#define RECORD_BATCH 256
#define RETRY_LATER_MS 1000

static const char *const outcome_names[] = {"none", "ok", "retrying", "failed"};

struct rec_job {
	struct db_job job;
	struct notifier *n;
	struct nmsg **msgs;
	size_t count;
	int64_t now;
};

static void rec_kick(struct notifier *n);

static int
by_id(const void *a, const void *b)
{
	return strcmp((*(struct nmsg *const *)a)->id,
		      (*(struct nmsg *const *)b)->id);
}

static void
bind_log_row(struct db_params *p, size_t i, void *arg)
{
	struct rec_job *j = arg;
	struct nmsg *m = j->msgs[i];

	db_params_str(p, m->id);
	db_params_str(p, "callback");
	db_params_str(p, outcome_names[m->outcome]);
	db_params_str(p, j->n->id);
	db_params_int(p, 0);
	db_params_int(p, m->attempt);
	db_params_int(p, j->now);
	db_params_str(p, m->error[0] ? m->error : NULL);
}

/* On a pool thread: one transaction for the whole batch. */
static int
rec_run(struct db_conn *c, struct db_job *job)
{
	struct rec_job *j = (struct rec_job *)job;
	unsigned long long affected = 0;

	if (db_begin(c) < 0)
		return -1;
	for (size_t i = 0; i < j->count; i++) {
		struct db_params p;
		int rc;

		db_params_init(&p, 6);
		db_params_str(&p, outcome_names[j->msgs[i]->outcome]);
		db_params_int(&p, j->msgs[i]->occurrence);
		db_params_int(&p, j->now);
		db_params_str(&p, j->msgs[i]->id);
		db_params_int(&p, j->msgs[i]->occurrence);
		db_params_int(&p, j->msgs[i]->occurrence);
		rc = db_exec(c, SQL_TASK_CALLBACK_STATUS, &p, &affected);
		db_params_free(&p);
		if (rc < 0)
			goto fail;
	}
	if (db_exec_rows(c, SQL_TASK_LOG_INSERT_PREFIX, SQL_TASK_LOG_INSERT_ROW,
			 j->count, SQL_TASK_LOG_INSERT_NCOLS, bind_log_row, j,
			 &affected) < 0)
		goto fail;
	if (db_commit(c) < 0)
		goto fail;
	return 0;
fail:
	db_rollback(c);
	return -1;
}

static void
rec_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	rec_kick(arg);
}

static void
rec_done_cb(struct db_job *job, int status, const char *err)
{
	struct rec_job *j = (struct rec_job *)job;
	struct notifier *n = j->n;

	n->rec_jobs--;
	if (status < 0) {
		/* Put the batch back in front and try again shortly; the
		 * offsets wait. */
		struct timeval tv = {RETRY_LATER_MS / 1000, 0};

		metric_inc(n->m.record_errors);
		log_warn("cannot record callback outcomes; retrying",
			 "count=%zu error=\"%s\"", j->count, err);
		for (size_t i = j->count; i-- > 0;) {
			j->msgs[i]->rnext = n->rec_head;
			n->rec_head = j->msgs[i];
			if (n->rec_tail == NULL)
				n->rec_tail = j->msgs[i];
			n->rec_n++;
		}
		evtimer_add(n->rec_ev, &tv);
	} else {
		for (size_t i = 0; i < j->count; i++)
			nmsg_done(j->msgs[i]);
	}
	xfree(j->msgs);
	xfree(j);
	rec_kick(n);
}

static void
rec_kick(struct notifier *n)
{
	int64_t pool = cfg_int(n->cfg, CFG_DB_POOL_SIZE);

	if (n->stopping > 1 || evtimer_pending(n->rec_ev, NULL))
		return;
	while (n->rec_n > 0 && n->rec_jobs < pool) {
		struct rec_job *j = xcalloc(1, sizeof(*j));
		size_t k = n->rec_n < RECORD_BATCH ? n->rec_n : RECORD_BATCH;

		j->n = n;
		j->now = clock_now_ms();
		j->msgs = xcalloc(k, sizeof(*j->msgs));
		while (j->count < k) {
			struct nmsg *m = n->rec_head;

			n->rec_head = m->rnext;
			if (n->rec_head == NULL)
				n->rec_tail = NULL;
			n->rec_n--;
			j->msgs[j->count++] = m;
		}
		/* Rows locked in primary-key order, as the worker's batched
		 * delivered updates do: fewer deadlocks between the two. */
		qsort(j->msgs, j->count, sizeof(*j->msgs), by_id);
		j->job.run = rec_run;
		j->job.done_cb = rec_done_cb;
		n->rec_jobs++;
		db_pool_submit(n->db, &j->job);
	}
}

static void
record(struct nmsg *m, enum nmsg_outcome o)
{
	struct notifier *n = m->n;

	m->outcome = o;
	m->rnext = NULL;
	if (n->rec_tail != NULL)
		n->rec_tail->rnext = m;
	else
		n->rec_head = m;
	n->rec_tail = m;
	n->rec_n++;
	rec_kick(n);
}

static void add_header(rd_kafka_headers_t *h, const char *name, const char *fmt,
		       ...) __attribute__((format(printf, 3, 4)));

static void
add_header(rd_kafka_headers_t *h, const char *name, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (len >= (int)sizeof(buf))
		len = (int)sizeof(buf) - 1;
	rd_kafka_header_add(h, name, -1, buf, len);
}

static void dead_letter(struct nmsg *m);

static void
dead_letter_cb(evutil_socket_t fd, short what, void *arg)
{
	dead_letter(arg);
}

/* After the last attempt: the message with the error in headers. */
static void
dead_letter(struct nmsg *m)
{
	struct notifier *n = m->n;
	rd_kafka_headers_t *h = rd_kafka_headers_new(10);
	json_t *spec = callback_spec_json(&m->cb);
	char *specs = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	rd_kafka_resp_err_t err;

	json_decref(spec);
	rd_kafka_header_add(h, KHDR_ID, -1, m->id, -1);
	add_header(h, KHDR_DUE_AT, "%lld", (long long)m->due_at);
	add_header(h, "prophet-topic", "%s", m->topic);
	if (m->traceparent != NULL)
		add_header(h, TRACE_PARENT, "%s", m->traceparent);
	if (m->tracestate != NULL)
		add_header(h, TRACE_STATE, "%s", m->tracestate);
	add_header(h, "prophet-callback-attempts", "%d", m->attempt);
	add_header(h, "prophet-callback-status", "%ld", m->http_status);
	add_header(h, "prophet-callback-class", "%s",
		   m->cls != NULL ? m->cls : "error");
	add_header(h, "prophet-callback-error", "%s", m->error);
	add_header(h, "prophet-dead-at", "%lld", (long long)clock_now_ms());
	if (specs != NULL)
		rd_kafka_header_add(h, KHDR_CALLBACK, -1, specs, -1);
	free(specs);
	if (kafka_produce(n->dlq, n->dlq_ktopic, m->key, m->key_len, m->body,
			  m->body_len, h, m, &err) < 0) {
		struct timeval tv = {RETRY_LATER_MS / 1000, 0};

		log_warn("cannot queue a dead letter; retrying",
			 "id=%s%s error=\"%s\"", m->id, m->trace,
			 rd_kafka_err2str(err));
		event_base_once(n->base, -1, EV_TIMEOUT, dead_letter_cb, m,
				&tv);
	}
}

/* Delivery report of a dead letter. */
void
outcome_dlq_dr_cb(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
	struct nmsg *m = opaque;
	struct notifier *n = arg;

	n->busy--;
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		/* only a purge at shutdown: the offset stays uncommitted */
		log_warn("dead letter not delivered", "id=%s%s error=\"%s\"",
			 m->id, m->trace, rd_kafka_err2str(err));
		return;
	}
	metric_inc(n->m.dead);
	log_info("callback given up; sent to the dead-letter topic",
		 "id=%s%s attempts=%d error=\"%s\" detail=\"%s\" topic=%s",
		 m->id, m->trace, m->attempt, m->error, m->detail,
		 n->dlq_ktopic);
	record(m, NO_FAILED);
}

static void
give_up(struct nmsg *m)
{
	m->n->busy++;
	dead_letter(m);
}

static void submit_retry(struct nmsg *m);

static void
submit_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	submit_retry(arg);
}

static void
submit_done_cb(const struct httpcli_result *r, void *arg)
{
	struct nmsg *m = arg;
	struct notifier *n = m->n;
	struct timeval tv = {RETRY_LATER_MS / 1000, 0};

	if (r->status == 201 || r->status == 200 || r->status == 409) {
		if (r->status == 409)
			log_warn("a retry task with this id exists with other "
				 "content; taking it as scheduled",
				 "id=%s%s attempt=%d", m->id, m->trace,
				 m->attempt + 1);
		n->busy--;
		metric_inc(n->m.retries);
		log_info(
			"callback failed; retry scheduled",
			"id=%s%s attempt=%d next=%d error=\"%s\" detail=\"%s\"",
			m->id, m->trace, m->attempt, m->attempt + 1, m->error,
			m->detail);
		record(m, NO_RETRYING);
		return;
	}
	if (!r->transport && r->status >= 400 && r->status < 500 &&
	    r->status != 401 && r->status != 403 && r->status != 429) {
		/* The manager will never take it (e.g. topic not allowed). */
		n->busy--;
		log_error("retry task refused by the manager; giving up",
			  "id=%s%s status=%ld answer=\"%.200s\"", m->id,
			  m->trace, r->status, r->body);
		snprintf(m->error + strlen(m->error),
			 sizeof(m->error) - strlen(m->error),
			 "; retry refused: HTTP %ld", r->status);
		give_up(m);
		return;
	}
	metric_inc(n->m.submit_errors);
	if (r->status == 403 && strstr(r->body, "invalid_signature") != NULL)
		log_error("retry task refused: the manager does not take its "
			  "signature (was the cluster_secret row changed? "
			  "restart the notifiers); trying again",
			  "id=%s%s", m->id, m->trace);
	else
		log_warn("cannot submit a retry task; trying again",
			 "id=%s%s status=%ld error=\"%s\"", m->id, m->trace,
			 r->status, r->error);
	if (n->stopping) {
		n->busy--; /* redelivered after the restart */
		return;
	}
	event_base_once(n->base, -1, EV_TIMEOUT, submit_retry_cb, m, &tv);
}

static void
submit_retry(struct nmsg *m)
{
	struct notifier *n = m->n;
	int next = m->attempt + 1;
	char rid[TASK_ID_MAX + 32], *text, *hdrs[3] = {NULL};
	char auth[600], nexts[16], dues[32], key[TASK_ID_MAX + 32];
	char occ[24] = "", sig[CALLBACK_SIG_LEN + 1];
	struct callback_spec signed_cb = m->cb;
	struct callback_retry rr;
	json_t *o, *body;
	int64_t delay;
	const char *token = n->token;

	body = json_stringn(m->body, m->body_len);
	if (body == NULL) {
		n->busy--;
		snprintf(m->error + strlen(m->error),
			 sizeof(m->error) - strlen(m->error),
			 "; body is not UTF-8 text, cannot retry");
		give_up(m);
		return;
	}
	/* Each occurrence of a recurring task (same id) has retries of its
	 * own. */
	if (m->occurrence > 0)
		snprintf(key, sizeof(key), "%s:%lld", m->id,
			 (long long)m->occurrence);
	else
		snprintf(key, sizeof(key), "%s", m->id);
	callback_retry_id(key, next, rid, sizeof(rid));
	delay = callback_backoff_ms(
		key, next, cfg_int(n->cfg, CFG_NOTIFIER_BACKOFF_BASE_MS),
		cfg_int(n->cfg, CFG_NOTIFIER_BACKOFF_MAX_MS),
		(int)cfg_int(n->cfg, CFG_NOTIFIER_BACKOFF_JITTER_PCT));
	snprintf(nexts, sizeof(nexts), "%d", next);
	snprintf(dues, sizeof(dues), "%lld", (long long)m->due_at);
	if (m->occurrence > 0)
		snprintf(occ, sizeof(occ), "%lld", (long long)m->occurrence);
	/* what the manager and, when it fires, this notifier will check:
	 * the spec as the retry task carries it, max_attempts included */
	signed_cb.max_attempts = m->max_attempts;
	rr = (struct callback_retry){.id = rid,
				     .of = m->id,
				     .attempt = nexts,
				     .due_at = dues,
				     .topic = m->topic,
				     .occurrence = occ,
				     .cb = &signed_cb,
				     .body = m->body,
				     .body_len = m->body_len};
	callback_retry_sign(n->retry_key, sizeof(n->retry_key), &rr, sig,
			    sizeof(sig));
	o = json_pack(
		"{s:s, s:s, s:o, s:I, s:{s:s, s:s, s:s, s:s, s:s}, s:o, "
		"s:i}",
		"id", rid, "topic", cfg_str(n->cfg, CFG_NOTIFIER_RETRY_TOPIC),
		"body", body, "delay_ms", (json_int_t)delay, "headers", RHDR_OF,
		m->id, RHDR_ATTEMPT, nexts, RHDR_DUE_AT, dues, RHDR_TOPIC,
		m->topic, RHDR_SIG, sig, "callback", callback_spec_json(&m->cb),
		"max_attempts", m->max_attempts);
	if (o == NULL) {
		n->busy--;
		snprintf(m->error + strlen(m->error),
			 sizeof(m->error) - strlen(m->error),
			 "; cannot build the retry task");
		give_up(m);
		return;
	}
	if (m->occurrence > 0)
		json_object_set_new(json_object_get(o, "headers"),
				    RHDR_OCCURRENCE, json_string(occ));
	/* the retry carries the task's trace context on, to its callback;
	 * as headers, which a manager older than the trace fields keeps too */
	if (m->traceparent != NULL)
		json_object_set_new(json_object_get(o, "headers"), TRACE_PARENT,
				    json_string(m->traceparent));
	if (m->tracestate != NULL)
		json_object_set_new(json_object_get(o, "headers"), TRACE_STATE,
				    json_string(m->tracestate));
	if (m->key != NULL && m->key_len <= TASK_KEY_MAX) {
		json_t *k = json_stringn(m->key, m->key_len);

		if (k != NULL)
			json_object_set_new(o, "key", k);
	}
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	hdrs[0] = "Content-Type: application/json";
	if (token[0] != '\0') {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hdrs[1] = auth;
	}
	{
		struct httpcli_req rq = {
			.method = "POST",
			.url = n->submit_url,
			.headers = hdrs,
			.body = text,
			.body_len = strlen(text),
			.timeout_ms = 10000,
			.max_redirects = 0,
			.ca_file = cfg_str(n->cfg, CFG_HTTP_TLS_CA),
			.cert_file = cfg_str(n->cfg, CFG_HTTP_TLS_CLIENT_CERT),
			.key_file = cfg_str(n->cfg, CFG_HTTP_TLS_CLIENT_KEY),
			.user_agent = "prophet-notifier/" VERSION};

		httpcli_request(n->httpc, &rq, submit_done_cb, m);
	}
	free(text);
}

void
outcome_handle(struct nmsg *m, enum httpcli_class cls, long status,
	       const char *detail, int final)
{
	char st[32] = "";

	m->http_status = status;
	m->cls = httpcli_class_name(cls);
	if (status > 0)
		snprintf(st, sizeof(st), ": HTTP %ld", status);
	utf8_format(m->error, sizeof(m->error), "%s%s%s%s", m->cls, st,
		    detail != NULL ? ": " : "", detail != NULL ? detail : "");
	if (!final && cls == HTTPCLI_OK) {
		record(m, NO_OK);
		return;
	}
	if (final || m->attempt >= m->max_attempts) {
		give_up(m);
		return;
	}
	m->n->busy++;
	submit_retry(m);
}

void
outcome_start(struct notifier *n)
{
	n->rec_ev = evtimer_new(n->base, rec_retry_cb, n);
}

void
outcome_stop(struct notifier *n)
{
	if (n->rec_ev != NULL)
		event_free(n->rec_ev);
	n->rec_ev = NULL;
}
