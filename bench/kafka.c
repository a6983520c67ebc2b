/*
 * Kafka side of the bench: the task ledger, the consumer that fills it from
 * the output topic, topic creation/deletion, and the raw produce probe.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "bench.h"
#include "xmalloc.h"

/* ------------------------------------------------------------- ledger --- */

struct ledger *
ledger_create(const char *prefix, size_t n)
{
	struct ledger *l = xcalloc(1, sizeof(*l));

	snprintf(l->prefix, sizeof(l->prefix), "%s", prefix);
	l->n = n;
	l->due_ms = xcalloc(n ? n : 1, sizeof(*l->due_ms));
	l->accept_us = xcalloc(n ? n : 1, sizeof(*l->accept_us));
	l->fired_ms = xcalloc(n ? n : 1, sizeof(*l->fired_ms));
	l->recv_us = xcalloc(n ? n : 1, sizeof(*l->recv_us));
	l->copies = xcalloc(n ? n : 1, sizeof(*l->copies));
	return l;
}

void
ledger_destroy(struct ledger *l)
{
	if (l == NULL)
		return;
	xfree(l->due_ms);
	xfree(l->accept_us);
	xfree(l->fired_ms);
	xfree(l->recv_us);
	xfree(l->copies);
	xfree(l);
}

int
ledger_id(const struct ledger *l, size_t seq, char *buf, size_t len)
{
	return snprintf(buf, len, "%s%zu", l->prefix, seq);
}

/* ------------------------------------------------------ --kafka-conf --- */

static const char *conf_file;

void
kafka_conf_file_set(const char *path)
{
	conf_file = path;
}

/* The --kafka-conf properties, then bootstrap.servers. */
static int
conf_base(rd_kafka_conf_t *conf, const char *brokers, char *err, size_t errlen)
{
	char line[1024];
	FILE *fp;

	if (conf_file != NULL) {
		if ((fp = fopen(conf_file, "r")) == NULL) {
			snprintf(err, errlen, "%s: %s", conf_file,
				 strerror(errno));
			return -1;
		}
		while (fgets(line, sizeof(line), fp) != NULL) {
			char *eq = strchr(line, '=');

			line[strcspn(line, "\r\n")] = '\0';
			if (line[0] == '#' || eq == NULL)
				continue;
			*eq = '\0';
			if (rd_kafka_conf_set(conf, line, eq + 1, err, errlen) !=
			    RD_KAFKA_CONF_OK) {
				fclose(fp);
				return -1;
			}
		}
		fclose(fp);
	}
	return rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err,
				 errlen) == RD_KAFKA_CONF_OK
		       ? 0
		       : -1;
}

/* ------------------------------------------------------------- topics --- */

static rd_kafka_t *
admin_client(const char *brokers, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;

	if (conf_base(conf, brokers, err, errlen) < 0) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
	if (rk == NULL)
		rd_kafka_conf_destroy(conf);
	return rk;
}

/* Partitions of topic with a leader, 0 if unknown yet, -1 on error. */
static int
topic_partitions(rd_kafka_t *rk, const char *topic)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	int n = 0;

	if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) !=
	    RD_KAFKA_RESP_ERR_NO_ERROR) {
		rd_kafka_topic_destroy(rkt);
		return -1;
	}
	if (md->topic_cnt == 1 && md->topics[0].err == 0) {
		n = md->topics[0].partition_cnt;
		for (int i = 0; i < md->topics[0].partition_cnt; i++)
			if (md->topics[0].partitions[i].leader < 0)
				n = 0;
	}
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return n;
}

int
kafka_topic_ensure(const char *brokers, const char *topic, char *err,
		   size_t errlen)
{
	rd_kafka_t *rk = admin_client(brokers, err, errlen);
	rd_kafka_NewTopic_t *nt;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	char why[256];
	int rc = -1;

	if (rk == NULL)
		return -1;
	/* -1: the broker's num.partitions, as for the auto-created topics
	 * the workers would otherwise produce into. */
	nt = rd_kafka_NewTopic_new(topic, -1, -1, why, sizeof(why));
	if (nt == NULL)
		nt = rd_kafka_NewTopic_new(topic, 4, 1, why, sizeof(why));
	q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
	ev = rd_kafka_queue_poll(q, 30000);
	if (ev == NULL) {
		snprintf(err, errlen, "create topic %s: no answer", topic);
	} else if (rd_kafka_event_error(ev)) {
		snprintf(err, errlen, "create topic %s: %s", topic,
			 rd_kafka_event_error_string(ev));
	} else {
		const rd_kafka_CreateTopics_result_t *res =
			rd_kafka_event_CreateTopics_result(ev);
		size_t n;
		const rd_kafka_topic_result_t **tr =
			rd_kafka_CreateTopics_result_topics(res, &n);
		rd_kafka_resp_err_t e = n ? rd_kafka_topic_result_error(tr[0])
					  : RD_KAFKA_RESP_ERR_NO_ERROR;

		if (e == RD_KAFKA_RESP_ERR_NO_ERROR ||
		    e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
			rc = 0;
		else
			snprintf(err, errlen, "create topic %s: %s", topic,
				 rd_kafka_err2str(e));
	}
	if (ev != NULL)
		rd_kafka_event_destroy(ev);
	rd_kafka_NewTopic_destroy(nt);
	rd_kafka_queue_destroy(q);
	if (rc == 0) {
		int64_t deadline = clock_mono_us() + 30000000;

		while (topic_partitions(rk, topic) <= 0) {
			if (clock_mono_us() > deadline || bench_stop) {
				snprintf(err, errlen,
					 "topic %s has no partitions", topic);
				rc = -1;
				break;
			}
			usleep(100000);
		}
	}
	rd_kafka_destroy(rk);
	return rc;
}

int
kafka_topics_delete_prefix(const char *brokers, const char *prefix)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_DeleteTopic_t **dt;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	char err[256];
	rd_kafka_t *rk;
	size_t n = 0;

	if (prefix == NULL || prefix[0] == '\0')
		return -1;
	rk = admin_client(brokers, err, sizeof(err));
	if (rk == NULL) {
		note("kafka: %s", err);
		return -1;
	}
	if (rd_kafka_metadata(rk, 1, NULL, &md, 10000) !=
	    RD_KAFKA_RESP_ERR_NO_ERROR) {
		note("kafka: no metadata from %s", brokers);
		rd_kafka_destroy(rk);
		return -1;
	}
	dt = xcalloc((size_t)md->topic_cnt + 1, sizeof(*dt));
	for (int i = 0; i < md->topic_cnt; i++)
		if (!strncmp(md->topics[i].topic, prefix, strlen(prefix)))
			dt[n++] = rd_kafka_DeleteTopic_new(md->topics[i].topic);
	rd_kafka_metadata_destroy(md);
	if (n > 0) {
		q = rd_kafka_queue_new(rk);
		rd_kafka_DeleteTopics(rk, dt, n, NULL, q);
		ev = rd_kafka_queue_poll(q, 30000);
		if (ev != NULL)
			rd_kafka_event_destroy(ev);
		rd_kafka_queue_destroy(q);
		rd_kafka_DeleteTopic_destroy_array(dt, n);
	}
	note("kafka: deleted %zu topic(s) starting with '%s'", n, prefix);
	xfree(dt);
	rd_kafka_destroy(rk);
	return 0;
}

/* ----------------------------------------------------------- consumer --- */

struct consumer {
	rd_kafka_t *rk;
	pthread_t thread;
	struct ledger *l;
	size_t plen;
	atomic_int stop;
	atomic_long msgs;
	int errors_noted;
};

static int64_t
header_int(rd_kafka_headers_t *h, const char *name)
{
	const void *v;
	size_t sz;
	char buf[32];

	if (h == NULL || rd_kafka_header_get_last(h, name, &v, &sz) ||
	    sz == 0 || sz >= sizeof(buf))
		return -1;
	memcpy(buf, v, sz);
	buf[sz] = '\0';
	return strtoll(buf, NULL, 10);
}

static void
consume_one(struct consumer *c, rd_kafka_message_t *m)
{
	struct ledger *l = c->l;
	int64_t recv = now_us(), fired;
	rd_kafka_headers_t *h = NULL;
	const void *v;
	size_t sz, seq = 0, i;
	const char *id;

	atomic_fetch_add(&c->msgs, 1);
	if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
	    rd_kafka_header_get_last(h, "prophet-id", &v, &sz) ||
	    sz <= c->plen || memcmp(v, l->prefix, c->plen)) {
		atomic_fetch_add(&l->foreign, 1);
		return;
	}
	id = v;
	for (i = c->plen; i < sz && id[i] >= '0' && id[i] <= '9'; i++)
		seq = seq * 10 + (size_t)(id[i] - '0');
	if (i != sz || seq >= l->n) {
		atomic_fetch_add(&l->foreign, 1);
		return;
	}
	fired = header_int(h, "prophet-fired-at");
	if (l->msg_cb != NULL)
		l->msg_cb(l->msg_arg, seq, header_int(h, "prophet-slot"),
			  header_int(h, "prophet-epoch"), fired);
	if (l->copies[seq] < UINT16_MAX)
		l->copies[seq]++;
	if (l->copies[seq] > 1) {
		atomic_fetch_add(&l->dups, 1);
		return;
	}
	l->fired_ms[seq] = fired;
	l->recv_us[seq] = recv;
	if ((fired >= 0 && fired < l->due_ms[seq]) ||
	    recv / 1000 < l->due_ms[seq])
		atomic_fetch_add(&l->early, 1);
	atomic_fetch_add(&l->received, 1);
}

static void *
consumer_main(void *arg)
{
	struct consumer *c = arg;

	while (!atomic_load(&c->stop)) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 100);

		if (m == NULL)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
			consume_one(c, m);
		else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
			 c->errors_noted++ < 5)
			note("consumer: %s", rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
	}
	return NULL;
}

struct consumer *
consumer_start(const char *brokers, const char *topic, struct ledger *l,
	       char *err, size_t errlen)
{
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_conf_t *conf;
	struct consumer *c;
	char group[256];
	int np;
	static const char *const props[][2] = {
		{"enable.auto.commit", "false"},
		{"enable.auto.offset.store", "false"},
		{"enable.partition.eof", "false"},
		{"fetch.wait.max.ms", "50"},
		{"fetch.error.backoff.ms", "10"},
		{"socket.nagle.disable", "true"},
		/* as the notifier reads: with kafka.exactly_once the records
		 * of an aborted transaction are not the tasks' */
		{"isolation.level", "read_committed"},
	};

	if (kafka_topic_ensure(brokers, topic, err, errlen) < 0)
		return NULL;
	c = xcalloc(1, sizeof(*c));
	c->l = l;
	c->plen = strlen(l->prefix);
	conf = rd_kafka_conf_new();
	snprintf(group, sizeof(group), "prophet-bench-%s", topic);
	if (conf_base(conf, brokers, err, errlen) < 0 ||
	    rd_kafka_conf_set(conf, "group.id", group, err, errlen) !=
		    RD_KAFKA_CONF_OK)
		goto fail_conf;
	for (size_t i = 0; i < sizeof(props) / sizeof(props[0]); i++)
		if (rd_kafka_conf_set(conf, props[i][0], props[i][1], err,
				      errlen) != RD_KAFKA_CONF_OK)
			goto fail_conf;
	c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
	if (c->rk == NULL)
		goto fail_conf;
	rd_kafka_poll_set_consumer(c->rk);
	np = topic_partitions(c->rk, topic);
	if (np <= 0) {
		snprintf(err, errlen, "topic %s: no partitions", topic);
		rd_kafka_destroy(c->rk);
		xfree(c);
		return NULL;
	}
	/* A fresh topic per scenario, read from its beginning: nothing the
	 * workers publish can be missed, however early. */
	parts = rd_kafka_topic_partition_list_new(np);
	for (int i = 0; i < np; i++)
		rd_kafka_topic_partition_list_add(parts, topic, i)->offset =
			RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(c->rk, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	pthread_create(&c->thread, NULL, consumer_main, c);
	return c;

fail_conf:
	rd_kafka_conf_destroy(conf);
	xfree(c);
	return NULL;
}

long
consumer_messages(const struct consumer *c)
{
	return atomic_load(&((struct consumer *)c)->msgs);
}

void
consumer_stop(struct consumer *c)
{
	if (c == NULL)
		return;
	atomic_store(&c->stop, 1);
	pthread_join(c->thread, NULL);
	rd_kafka_assign(c->rk, NULL);
	rd_kafka_consumer_close(c->rk);
	rd_kafka_destroy(c->rk);
	xfree(c);
}

/* ---------------------------------------------------------- kafka-raw --- */

struct raw_prod {
	atomic_long delivered;
	atomic_long failed;
	int64_t last_dr_mono;
	double *lat_ms; /* enqueue -> delivery report, per message */
	size_t nlat, cap;
	rd_kafka_resp_err_t first_err;
};

static void
raw_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	struct raw_prod *p = opaque;
	int64_t now = clock_mono_us();

	(void)rk;
	if (m->err) {
		if (atomic_fetch_add(&p->failed, 1) == 0)
			p->first_err = m->err;
		return;
	}
	atomic_fetch_add(&p->delivered, 1);
	p->last_dr_mono = now;
	if (p->nlat < p->cap)
		p->lat_ms[p->nlat++] =
			(double)(now - (int64_t)(intptr_t)m->_private) / 1000.0;
}

struct raw_progress {
	struct raw_prod *p;
	atomic_long sent;
	long total;
};

static void
raw_progress_cb(void *arg, char *buf, size_t len)
{
	struct raw_progress *rp = arg;

	snprintf(buf, len, "kafka-raw: produced %ld/%ld, delivered %ld",
		 atomic_load(&rp->sent), rp->total,
		 atomic_load(&rp->p->delivered));
}

int
scen_kafka_raw(struct bench_opts *o)
{
	struct raw_prod p = {0};
	struct raw_progress rp = {0};
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	struct progress *prog;
	struct report *r;
	char err[512], topic[256], linger[16], key[128], num[32];
	char *body;
	long count = o->count ? o->count : 500000, sent = 0;
	int64_t t0, t_end, deadline, real0 = 0;
	struct ledger *l = NULL;
	struct consumer *cons = NULL;
	struct fire_stats fs;
	rd_kafka_t *rk;

	if (o->topic)
		snprintf(topic, sizeof(topic), "%s%s", o->topic_prefix,
			 o->topic);
	else
		snprintf(topic, sizeof(topic), "%sbench-raw-%s",
			 o->topic_prefix, o->tag);
	if (kafka_topic_ensure(o->brokers, topic, err, sizeof(err)) < 0) {
		note("%s", err);
		rd_kafka_conf_destroy(conf);
		return -1;
	}
	snprintf(linger, sizeof(linger), "%d", o->linger_ms);
	/* The worker's producer settings (common/kafka.c). */
	if (conf_base(conf, o->brokers, err, sizeof(err)) < 0 ||
	    rd_kafka_conf_set(conf, "enable.idempotence", "true", err,
			      sizeof(err)) ||
	    rd_kafka_conf_set(conf, "linger.ms", linger, err, sizeof(err)) ||
	    rd_kafka_conf_set(conf, "socket.nagle.disable", "true", err,
			      sizeof(err)) ||
	    rd_kafka_conf_set(conf, "message.timeout.ms", "0", err,
			      sizeof(err)) ||
	    rd_kafka_conf_set(conf, "queue.buffering.max.messages", "200000",
			      err, sizeof(err))) {
		note("kafka: %s", err);
		rd_kafka_conf_destroy(conf);
		return -1;
	}
	p.cap = (size_t)count;
	p.lat_ms = xcalloc(p.cap, sizeof(double));
	rd_kafka_conf_set_opaque(conf, &p);
	rd_kafka_conf_set_dr_msg_cb(conf, raw_dr_cb);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL) {
		note("kafka: %s", err);
		rd_kafka_conf_destroy(conf);
		xfree(p.lat_ms);
		return -1;
	}
	body = xmalloc((size_t)o->body_size + 1);
	for (int i = 0; i < o->body_size; i++)
		body[i] = (char)('a' + i % 26);
	if (o->rate_set) {
		/* Paced: message i is "due" at real0 + i/rate, and a consumer
		 * measures what Kafka alone adds to the receive lateness. */
		snprintf(key, sizeof(key), "%s-raw-", o->tag);
		l = ledger_create(key, (size_t)count);
		cons = consumer_start(o->brokers, topic, l, err, sizeof(err));
		if (cons == NULL) {
			note("consumer: %s", err);
			ledger_destroy(l);
			rd_kafka_destroy(rk);
			xfree(body);
			xfree(p.lat_ms);
			return -1;
		}
		note("kafka-raw: %ld messages paced at %.0f/s to %s", count,
		     o->rate, topic);
	}
	/* Warm up: metadata, connection and producer id, so that the first
	 * measured messages do not wait for them. */
	snprintf(key, sizeof(key), "%s-raw-warmup", o->tag);
	if (rd_kafka_producev(
		    rk, RD_KAFKA_V_TOPIC(topic),
		    RD_KAFKA_V_KEY(key, strlen(key)),
		    RD_KAFKA_V_VALUE(body, (size_t)o->body_size),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		    RD_KAFKA_V_OPAQUE((void *)(intptr_t)clock_mono_us()),
		    RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_flush(rk, 30000);
	atomic_store(&p.delivered, 0);
	p.nlat = 0;
	rp.p = &p;
	rp.total = count;
	prog = progress_start(o, raw_progress_cb, &rp);
	t0 = clock_mono_us();
	real0 = now_us() + 200000;
	deadline = o->duration > 0 ? t0 + (int64_t)(o->duration * 1e6) : 0;
	for (sent = 0; sent < count && !bench_stop; sent++) {
		rd_kafka_headers_t *h = rd_kafka_headers_new(8);
		int64_t now_ms_v = now_us() / 1000, due_ms_v = now_ms_v;
		int klen =
			snprintf(key, sizeof(key), "%s-raw-%ld", o->tag, sent);
		rd_kafka_resp_err_t e;

		if (l != NULL) {
			int64_t due_us =
				real0 + (int64_t)((double)sent * 1e6 / o->rate);

			due_ms_v = (due_us + 999) / 1000;
			sleep_until_mono_us(t0 + due_ms_v * 1000 -
					    (real0 - 200000));
			now_ms_v = now_us() / 1000;
			l->due_ms[sent] = due_ms_v;
			l->accept_us[sent] = now_us();
			atomic_fetch_add(&l->accepted, 1);
			rd_kafka_poll(rk, 0);
		}
		rd_kafka_header_add(h, "prophet-id", -1, key, klen);
		snprintf(num, sizeof(num), "%" PRId64, due_ms_v);
		rd_kafka_header_add(h, "prophet-due-at", -1, num, -1);
		snprintf(num, sizeof(num), "%" PRId64, now_ms_v);
		rd_kafka_header_add(h, "prophet-fired-at", -1, num, -1);
		rd_kafka_header_add(h, "prophet-attempt", -1, "1", 1);
		snprintf(num, sizeof(num), "%ld", sent % 16);
		rd_kafka_header_add(h, "prophet-slot", -1, num, -1);
		rd_kafka_header_add(h, "prophet-epoch", -1, "1", 1);
		for (;;) {
			e = rd_kafka_producev(
				rk, RD_KAFKA_V_TOPIC(topic),
				RD_KAFKA_V_KEY(key, (size_t)klen),
				RD_KAFKA_V_VALUE(body, (size_t)o->body_size),
				RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
				RD_KAFKA_V_HEADERS(h),
				RD_KAFKA_V_OPAQUE(
					(void *)(intptr_t)clock_mono_us()),
				RD_KAFKA_V_END);
			if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || bench_stop)
				break;
			rd_kafka_poll(rk, 1);
		}
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
			rd_kafka_headers_destroy(h);
			note("kafka: produce: %s", rd_kafka_err2str(e));
			break;
		}
		atomic_store(&rp.sent, sent + 1);
		if (sent % 1000 == 0)
			rd_kafka_poll(rk, 0);
		if (deadline && sent % 1000 == 0 &&
		    clock_mono_us() > deadline) {
			sent++;
			break;
		}
	}
	while (atomic_load(&p.delivered) + atomic_load(&p.failed) < sent &&
	       !bench_stop)
		rd_kafka_poll(rk, 100);
	t_end = p.last_dr_mono ? p.last_dr_mono : clock_mono_us();
	if (cons != NULL) {
		wait_received(o, l, cons, l->due_ms[sent ? sent - 1 : 0]);
		consumer_stop(cons);
	}
	progress_stop(prog);

	r = report_create(o->label);
	report_str(r, "topic", "topic", topic);
	report_int(r, "body_size", "message body (bytes)", o->body_size);
	report_int(r, "linger_ms", "linger.ms", o->linger_ms);
	report_int(r, "messages", "messages produced", sent);
	report_int(r, "delivered", "delivered", atomic_load(&p.delivered));
	report_int(r, "failed", "failed", atomic_load(&p.failed));
	report_num(r, "seconds", "seconds", (double)(t_end - t0) / 1e6, "%.2f");
	report_num(r, "rate", "delivered messages/s",
		   (double)atomic_load(&p.delivered) /
			   ((double)(t_end - t0) / 1e6),
		   "%.0f");
	report_latency(r, "dr", "enqueue to delivery report", p.lat_ms, p.nlat);
	if (l != NULL) {
		report_num(r, "paced_rate", "paced at (messages/s)", o->rate,
			   "%.0f");
		fire_analyse(r, l, &fs);
		ledger_destroy(l);
	}
	report_print(r);
	report_destroy(r);
	if (atomic_load(&p.failed))
		note("kafka: first delivery error: %s",
		     rd_kafka_err2str(p.first_err));
	rd_kafka_destroy(rk);
	xfree(body);
	xfree(p.lat_ms);
	return atomic_load(&p.failed) ? -1 : 0;
}
