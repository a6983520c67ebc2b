/*
 * The pull scenario: tasks taken over HTTP (GET /v1/topics/{topic}/next,
 * POST .../ack) by --clients pull clients of one group.
 *
 * Without --rate (throughput): --count tasks are fired first (all due
 * within a second), then the clients drain the group: tasks/s through the
 * clients, beside the rate of a raw librdkafka consumer reading the same
 * messages from the topic (what the pull path costs over Kafka itself).
 *
 * With --rate R: the clients wait (long poll) from the start, and
 * --duration s of tasks due at R per second arrive: due -> handed out, and
 * the same for a raw Kafka consumer of the topic running alongside (the
 * lateness the pull path adds).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "xmalloc.h"

struct puller {
	const struct bench_opts *o;
	struct ledger *l;
	pthread_t thread;
	char path[512];
	char ack_path[512];
	const char *group;
	atomic_int *stop;
	long requests, acks, errors, tasks;
	char last_error[256];
};

/* The sequence number of one of our ids, or -1. */
static long
seq_of(const struct ledger *l, const char *id)
{
	size_t plen = strlen(l->prefix);
	char *end;
	unsigned long seq;

	if (id == NULL || strncmp(id, l->prefix, plen) != 0)
		return -1;
	seq = strtoul(id + plen, &end, 10);
	if (end == id + plen || *end != '\0' || seq >= l->n)
		return -1;
	return (long)seq;
}

/* Records one answer's tasks; appends their receipts to ack (JSON). */
static size_t
take_answer(struct puller *p, const char *body, size_t len, char **ack,
	    size_t *acklen, size_t *ackcap)
{
	int64_t recv = now_us();
	json_t *j = json_loadb(body, len, 0, NULL), *t;
	json_t *tasks = json_object_get(j, "tasks");
	size_t i, n = 0;

	json_array_foreach (tasks, i, t) {
		const char *rc =
			json_string_value(json_object_get(t, "receipt"));
		long seq = seq_of(p->l,
				  json_string_value(json_object_get(t, "id")));
		const char *fired = json_string_value(json_object_get(
			json_object_get(t, "headers"), "prophet-fired-at"));
		size_t need = (rc ? strlen(rc) : 0) + 4;

		n++;
		if (rc != NULL) {
			if (*acklen + need + 64 > *ackcap) {
				*ackcap = (*ackcap + need + 64) * 2;
				*ack = xrealloc(*ack, *ackcap);
			}
			*acklen += (size_t)snprintf(
				*ack + *acklen, *ackcap - *acklen, "%s\"%s\"",
				n > 1 ? "," : "", rc);
		}
		if (seq < 0) {
			atomic_fetch_add(&p->l->foreign, 1);
			continue;
		}
		if (p->l->copies[seq] < UINT16_MAX)
			p->l->copies[seq]++;
		if (p->l->copies[seq] > 1) {
			atomic_fetch_add(&p->l->dups, 1);
			continue;
		}
		p->l->recv_us[seq] = recv;
		p->l->fired_ms[seq] = fired ? atoll(fired) : -1;
		if (recv / 1000 < p->l->due_ms[seq])
			atomic_fetch_add(&p->l->early, 1);
		atomic_fetch_add(&p->l->received, 1);
	}
	json_decref(j);
	return n;
}

static void *
puller_main(void *arg)
{
	struct puller *p = arg;
	struct httpc *c;
	char err[256];
	size_t cap = 4096;
	char *ack = xmalloc(cap);

	c = httpc_create(p->o->api, err, sizeof(err));
	if (c == NULL) {
		snprintf(p->last_error, sizeof(p->last_error), "%s", err);
		p->errors++;
		xfree(ack);
		return NULL;
	}
	while (!atomic_load(p->stop) && !bench_stop) {
		const char *resp;
		size_t rlen, alen, n;
		int st = httpc_request(c, "GET", p->path, NULL, 0, &resp, &rlen,
				       err, sizeof(err));

		p->requests++;
		if (st != 200) {
			p->errors++;
			snprintf(p->last_error, sizeof(p->last_error),
				 "next: %d %.200s", st, st < 0 ? err : resp);
			usleep(100000);
			continue;
		}
		alen = (size_t)snprintf(
			ack, cap, "{\"group\":\"%s\",\"receipts\":[", p->group);
		n = take_answer(p, resp, rlen, &ack, &alen, &cap);
		p->tasks += (long)n;
		if (n == 0)
			continue;
		alen += (size_t)snprintf(ack + alen, cap - alen, "]}");
		st = httpc_request(c, "POST", p->ack_path, ack, alen, &resp,
				   &rlen, err, sizeof(err));
		p->acks++;
		if (st != 200) {
			p->errors++;
			snprintf(p->last_error, sizeof(p->last_error),
				 "ack: %d %.200s", st, st < 0 ? err : resp);
		}
	}
	httpc_destroy(c);
	xfree(ack);
	return NULL;
}

struct pull_progress {
	struct ledger *pulled, *raw;
	const char *what;
};

static void
progress_cb(void *arg, char *buf, size_t len)
{
	struct pull_progress *pp = arg;

	snprintf(buf, len,
		 "%s: accepted %ld, in Kafka %ld, pulled %ld (dups %ld)",
		 pp->what, atomic_load(&pp->pulled->accepted),
		 atomic_load(&pp->raw->received),
		 atomic_load(&pp->pulled->received),
		 atomic_load(&pp->pulled->dups));
}

/* Waits until l holds every accepted task, or 5 s without progress once
 * the last one is due + grace. */
static void
wait_pulled(const struct bench_opts *o, struct ledger *l, int64_t last_due_ms)
{
	long last = -1;
	int64_t last_change = clock_mono_us();

	while (!bench_stop) {
		long got = atomic_load(&l->received);

		if (got >= atomic_load(&l->accepted))
			break;
		if (got != last) {
			last = got;
			last_change = clock_mono_us();
		}
		if (now_us() / 1000 >
			    last_due_ms + (int64_t)(o->grace * 1000) &&
		    clock_mono_us() - last_change > 5000000)
			break;
		usleep(5000);
	}
	if (o->settle > 0 && !bench_stop)
		usleep((useconds_t)(o->settle * 1e6));
}

/* First to last receive of l's tasks: tasks/s. */
static double
rate_of(const struct ledger *l)
{
	int64_t lo = INT64_MAX, hi = 0;
	long n = 0;

	for (size_t i = 0; i < l->n; i++) {
		if (l->recv_us[i] == 0)
			continue;
		n++;
		if (l->recv_us[i] < lo)
			lo = l->recv_us[i];
		if (l->recv_us[i] > hi)
			hi = l->recv_us[i];
	}
	return n > 1 && hi > lo ? (double)(n - 1) * 1e6 / (double)(hi - lo)
				: NAN;
}

static void
lateness(struct report *r, const char *key, const char *label,
	 const struct ledger *l, const struct ledger *base)
{
	double *v = xcalloc(l->n ? l->n : 1, sizeof(double));
	size_t n = 0;

	for (size_t i = 0; i < l->n; i++) {
		if (l->recv_us[i] == 0 || (base && base->recv_us[i] == 0))
			continue;
		v[n++] = (double)l->recv_us[i] / 1e3 -
			 (base ? (double)base->recv_us[i] / 1e3
			       : (double)l->due_ms[i]);
	}
	if (n > 0)
		report_latency(r, key, label, v, n);
	xfree(v);
}

int
scen_pull(struct bench_opts *o)
{
	struct names nm;
	struct ledger *l, *raw, *raw2 = NULL;
	struct consumer *c, *c2 = NULL;
	struct submit_stats st;
	struct pull_progress pp;
	struct progress *prog;
	struct report *r;
	struct puller *ps;
	atomic_int stop = 0;
	int paced = o->rate_set;
	int clients = o->clients ? o->clients : 1;
	int max = o->batch ? o->batch : 100;
	double dur = o->duration > 0 ? o->duration : 10;
	long count = paced ? (long)llround(o->rate * dur)
			   : (o->count ? o->count : 20000);
	char group[128];
	int64_t t0_ms;
	long lost = 0, requests = 0, errors = 0, acks = 0;
	int rc;

	if (o->lead_ms < 0)
		o->lead_ms = 3000 + count / 10;
	if (o->conns == 0)
		o->conns = 4;
	names_init(o, &nm);
	snprintf(group, sizeof(group), "bench-%s", o->tag);
	raw = ledger_create(nm.id_prefix, (size_t)count);
	l = ledger_create(nm.id_prefix, (size_t)count);
	/* The raw consumer reads the topic from its start into raw (and
	 * warms the topic up: workers' producer, broker). */
	if (start_consumer(o, &nm, raw, &c) < 0) {
		ledger_destroy(raw);
		ledger_destroy(l);
		return -1;
	}
	t0_ms = now_us() / 1000 + o->lead_ms;
	for (long i = 0; i < count; i++) {
		raw->due_ms[i] =
			paced ? t0_ms + (int64_t)floor((double)i * 1000.0 /
						       o->rate)
			      : t0_ms + (int64_t)((double)i * 1000.0 /
						  (double)count);
		l->due_ms[i] = raw->due_ms[i];
	}
	ps = xcalloc((size_t)clients, sizeof(*ps));
	for (int k = 0; k < clients; k++) {
		ps[k].o = o;
		ps[k].l = l;
		ps[k].group = group;
		ps[k].stop = &stop;
		snprintf(ps[k].path, sizeof(ps[k].path),
			 "/v1/topics/%s/next?group=%s&max=%d&wait_ms=%d",
			 nm.topic, group, max, 2000);
		snprintf(ps[k].ack_path, sizeof(ps[k].ack_path),
			 "/v1/topics/%s/ack", nm.topic);
	}
	note("%s: %ld tasks, %s, %d pull client(s) of group %s taking up to "
	     "%d a request, topic %s",
	     o->label, count,
	     paced ? "due at the rate while the clients wait"
		   : "fired first, then drained",
	     clients, group, max, nm.kafka_topic);
	pp.pulled = l;
	pp.raw = raw;
	pp.what = o->label;
	prog = progress_start(o, progress_cb, &pp);
	if (paced)
		for (int k = 0; k < clients; k++)
			pthread_create(&ps[k].thread, NULL, puller_main,
				       &ps[k]);
	{
		struct submitter *s =
			submitter_start(o, raw, nm.topic, 1000, NULL, 0);

		submitter_join(s, &st);
	}
	atomic_store(&l->accepted, atomic_load(&raw->accepted));
	memcpy(l->accept_us, raw->accept_us, (size_t)count * sizeof(int64_t));
	if (!paced) {
		/* Everything in Kafka first; then a second raw consumer
		 * reads it all (Kafka's own consume rate), then the pull
		 * clients drain it. */
		wait_received(o, raw, c, raw->due_ms[count - 1]);
		raw2 = ledger_create(nm.id_prefix, (size_t)count);
		memcpy(raw2->due_ms, raw->due_ms,
		       (size_t)count * sizeof(int64_t));
		atomic_store(&raw2->accepted, atomic_load(&raw->accepted));
		{
			char err[256];

			c2 = consumer_start(o->brokers, nm.kafka_topic, raw2,
					    err, sizeof(err));
			if (c2 == NULL)
				note("second consumer: %s", err);
			else
				wait_received(o, raw2, c2, 0);
		}
		for (int k = 0; k < clients; k++)
			pthread_create(&ps[k].thread, NULL, puller_main,
				       &ps[k]);
	}
	wait_pulled(o, l, raw->due_ms[count - 1]);
	atomic_store(&stop, 1);
	for (int k = 0; k < clients; k++) {
		pthread_join(ps[k].thread, NULL);
		requests += ps[k].requests;
		acks += ps[k].acks;
		errors += ps[k].errors;
		if (ps[k].last_error[0])
			note("client %d: %s", k, ps[k].last_error);
	}
	progress_stop(prog);
	consumer_stop(c);
	consumer_stop(c2);
	for (long i = 0; i < count; i++)
		if (l->accept_us[i] != 0 && l->copies[i] == 0)
			lost++;

	r = report_create(o->label);
	report_str(r, "mode", "mode",
		   paced ? "paced: due at the rate, clients waiting"
			 : "drain: fired first, then pulled");
	report_int(r, "count", "tasks", count);
	if (paced)
		report_num(r, "rate", "due rate (tasks/s)", o->rate, "%.0f");
	report_int(r, "clients", "pull clients", clients);
	report_int(r, "max", "tasks per next (max)", max);
	report_int(r, "accepted", "accepted", atomic_load(&l->accepted));
	report_int(r, "pulled", "handed out (distinct ids)",
		   atomic_load(&l->received));
	report_int(r, "lost", "never handed out", lost);
	report_int(r, "duplicates", "handed out again", atomic_load(&l->dups));
	report_int(r, "early", "handed out before due (must be 0)",
		   atomic_load(&l->early));
	report_int(r, "requests", "next requests", requests);
	report_int(r, "acks", "ack requests", acks);
	report_int(r, "errors", "failed requests", errors);
	report_num(r, "pull_rate",
		   "tasks/s through the clients (first to last)", rate_of(l),
		   "%.0f");
	if (raw2 != NULL) {
		report_num(r, "kafka_rate",
			   "tasks/s of a raw Kafka consumer (same messages)",
			   rate_of(raw2), "%.0f");
		report_num(r, "pull_vs_kafka", "pull rate / raw Kafka rate",
			   rate_of(l) / rate_of(raw2), "%.2f");
	}
	lateness(r, "pull_lateness", "due -> handed out", l, NULL);
	if (paced) {
		lateness(r, "kafka_lateness", "due -> raw Kafka consumer", raw,
			 NULL);
		lateness(r, "pull_added", "raw Kafka consumer -> handed out", l,
			 raw);
	}
	report_print(r);
	report_destroy(r);
	rc = lost == 0 && atomic_load(&l->early) == 0 && st.accepted > 0 ? 0
									 : -1;
	xfree(st.req_ms);
	xfree(ps);
	ledger_destroy(l);
	ledger_destroy(raw);
	ledger_destroy(raw2);
	return rc;
}
