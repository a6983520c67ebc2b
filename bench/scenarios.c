/* The API scenarios: ingest, steady, burst, far. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "xmalloc.h"

/* -------------------------------------------------------------- names --- */

void
names_init(const struct bench_opts *o, struct names *nm)
{
	char label[48];
	size_t i;

	snprintf(label, sizeof(label), "%s", o->label);
	for (i = 0; label[i]; i++) {
		char ch = label[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
			label[i] = '-';
	}
	if (o->topic)
		snprintf(nm->topic, sizeof(nm->topic), "%s", o->topic);
	else
		snprintf(nm->topic, sizeof(nm->topic), "bench-%s-%s", label,
			 o->tag);
	snprintf(nm->kafka_topic, sizeof(nm->kafka_topic), "%s%s",
		 o->topic_prefix, nm->topic);
	snprintf(nm->id_prefix, sizeof(nm->id_prefix), "%s-%s-", o->tag, label);
}

/* ----------------------------------------------------- worker metrics --- */

#define HIST_MAX 40

/* prophet_fire_lateness_seconds summed over the workers, and their claim
 * calls (prophet_claim_calls_total). */
struct hist {
	int n;
	double le[HIST_MAX];
	double cum[HIST_MAX];
	double count, sum;
	double claims;
	int ok;
};

static void
hist_scrape_one(const char *base, struct hist *h)
{
	static const char name[] = "prophet_fire_lateness_seconds";
	char err[256];
	struct httpc *c = httpc_create(base, err, sizeof(err));
	const char *resp, *p;
	size_t rlen;
	int i = 0;

	if (c == NULL || httpc_request(c, "GET", "/metrics", NULL, 0, &resp,
				       &rlen, err, sizeof(err)) != 200) {
		httpc_destroy(c);
		return;
	}
	for (p = resp; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (!strncmp(p, "prophet_claim_calls_total ", 26))
			h->claims += strtod(p + 26, NULL);
		if (strncmp(p, name, sizeof(name) - 1))
			continue;
		const char *rest = p + sizeof(name) - 1;

		if (!strncmp(rest, "_bucket{le=\"", 12)) {
			const char *q = rest + 12;
			double le = !strncmp(q, "+Inf", 4) ? INFINITY
							   : strtod(q, NULL);
			const char *v = strstr(q, "} ");

			if (v == NULL || i >= HIST_MAX)
				continue;
			h->le[i] = le;
			h->cum[i] += strtod(v + 2, NULL);
			i++;
		} else if (!strncmp(rest, "_count ", 7)) {
			h->count += strtod(rest + 7, NULL);
		} else if (!strncmp(rest, "_sum ", 5)) {
			h->sum += strtod(rest + 5, NULL);
		}
	}
	if (i > h->n)
		h->n = i;
	h->ok = 1;
	httpc_destroy(c);
}

static void
hist_scrape(const char *urls, struct hist *h)
{
	char *list, *save = NULL;

	memset(h, 0, sizeof(*h));
	if (urls == NULL)
		return;
	list = xstrdup(urls);
	for (char *u = strtok_r(list, ",", &save); u;
	     u = strtok_r(NULL, ",", &save))
		hist_scrape_one(u, h);
	xfree(list);
}

/* Upper bound (ms) of the bucket where the q-quantile of after-before is. */
static double
hist_quantile(const struct hist *a, const struct hist *b, double q)
{
	double total = a->count - b->count;

	if (total <= 0)
		return NAN;
	for (int i = 0; i < a->n; i++)
		if (a->cum[i] - (i < b->n ? b->cum[i] : 0) >= q * total)
			return a->le[i] * 1000;
	return INFINITY;
}

static void
hist_report(struct report *r, const struct bench_opts *o,
	    const struct hist *before, const struct hist *after)
{
	if (o->worker_metrics == NULL || !after->ok)
		return;
	report_num(r, "worker_fired", "worker: fired (metric delta)",
		   after->count - before->count, "%.0f");
	if (after->count > before->count)
		report_num(r, "worker_claims_per_task",
			   "worker: claim calls a fired task",
			   (after->claims - before->claims) /
				   (after->count - before->count),
			   "%.3f");
	report_num(r, "worker_lateness_p50_le_ms",
		   "worker: lateness p50 <= (ms, bucket)",
		   hist_quantile(after, before, 0.5), "%.1f");
	report_num(r, "worker_lateness_p99_le_ms",
		   "worker: lateness p99 <= (ms, bucket)",
		   hist_quantile(after, before, 0.99), "%.1f");
	report_num(r, "worker_lateness_p999_le_ms",
		   "worker: lateness p99.9 <= (ms, bucket)",
		   hist_quantile(after, before, 0.999), "%.1f");
}

/* ---------------------------------------------------------- progress --- */

struct fire_progress {
	const char *what;
	struct ledger *l;
	struct submitter *s; /* NULL once joined */
	struct consumer *c;
	long sent_final;
};

static void
fire_progress_cb(void *arg, char *buf, size_t len)
{
	struct fire_progress *fp = arg;
	struct ledger *l = fp->l;
	long sent = fp->s ? submitter_sent(fp->s) : fp->sent_final;

	int64_t now = now_us() / 1000;
	size_t lo = 0, hi = l->n;

	/* Tasks due by now (due times ascend). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (l->due_ms[mid] <= now)
			lo = mid + 1;
		else
			hi = mid;
	}
	snprintf(buf, len,
		 "%s: sent %ld/%zu accepted %ld, due %zu received %ld "
		 "dups %ld",
		 fp->what, sent, l->n, atomic_load(&l->accepted), lo,
		 atomic_load(&l->received), atomic_load(&l->dups));
}

void
wait_received(const struct bench_opts *o, struct ledger *l, struct consumer *c,
	      int64_t last_due_ms)
{
	int64_t last_change = clock_mono_us();
	long last_msgs = consumer_messages(c);

	while (!bench_stop) {
		long msgs = consumer_messages(c);
		int64_t now = clock_mono_us();

		if (atomic_load(&l->received) >= atomic_load(&l->accepted) &&
		    now_us() / 1000 >= last_due_ms)
			break;
		if (msgs != last_msgs) {
			last_msgs = msgs;
			last_change = now;
		}
		if (now_us() / 1000 >
			    last_due_ms + (int64_t)(o->grace * 1000) &&
		    now - last_change > 3000000)
			break;
		usleep(20000);
	}
	if (o->settle > 0 && !bench_stop)
		usleep((useconds_t)(o->settle * 1e6));
}

/*
 * Waits until no task is in flight in Redis: the workers have recorded
 * every delivery in the DB (and cleaned up), so the next scenario starts on
 * a quiet cluster. Returns the seconds waited, or -1 without --redis.
 */
double
quiesce(const struct bench_opts *o)
{
	struct redis_mem m;
	int64_t t0 = clock_mono_us(), last_note = t0;
	char err[256];

	if (o->redis == NULL)
		return -1;
	while (!bench_stop) {
		if (redis_mem_sample(o->redis, &m, 0, err, sizeof(err)) < 0) {
			note("redis: %s", err);
			return -1;
		}
		if (m.inflight == 0)
			break;
		if (clock_mono_us() - t0 > 900000000) {
			note("%s: %lld tasks still in flight after 900 s",
			     o->label, m.inflight);
			break;
		}
		if (!o->quiet && clock_mono_us() - last_note >= 2000000) {
			last_note = clock_mono_us();
			note("%s: waiting for the workers to record "
			     "deliveries: "
			     "%lld in flight",
			     o->label, m.inflight);
		}
		usleep(100000);
	}
	return (double)(clock_mono_us() - t0) / 1e6;
}

/* How long the DB recording of deliveries trailed the consumer. */
void
report_quiesce(struct report *r, double waited_s)
{
	if (waited_s >= 0)
		report_num(r, "record_wait_s",
			   "wait for DB delivery records after all "
			   "received+settle (s)",
			   waited_s, "%.1f");
}

void
fire_analyse(struct report *r, struct ledger *l, struct fire_stats *fs)
{
	double *fired = xcalloc(l->n ? l->n : 1, sizeof(double));
	double *recv = xcalloc(l->n ? l->n : 1, sizeof(double));
	double *leg = xcalloc(l->n ? l->n : 1, sizeof(double));
	size_t nf = 0, nr = 0, nl = 0;

	memset(fs, 0, sizeof(*fs));
	fs->min_fired_ms = INT64_MAX;
	for (size_t i = 0; i < l->n; i++) {
		if (l->accept_us[i] == 0)
			continue;
		fs->accepted++;
		if (l->accept_us[i] / 1000 > l->due_ms[i])
			fs->late_submits++;
		if (l->copies[i] == 0) {
			fs->lost++;
			continue;
		}
		fs->received++;
		fs->dups += l->copies[i] - 1;
		if (l->fired_ms[i] >= 0) {
			fired[nf++] = (double)(l->fired_ms[i] - l->due_ms[i]);
			if (l->fired_ms[i] < fs->min_fired_ms)
				fs->min_fired_ms = l->fired_ms[i];
			if (l->fired_ms[i] > fs->max_fired_ms)
				fs->max_fired_ms = l->fired_ms[i];
		}
		recv[nr++] =
			(double)l->recv_us[i] / 1000.0 - (double)l->due_ms[i];
		if (l->fired_ms[i] >= 0)
			leg[nl++] = (double)l->recv_us[i] / 1000.0 -
				    (double)l->fired_ms[i];
		if (l->recv_us[i] > fs->max_recv_us)
			fs->max_recv_us = l->recv_us[i];
	}
	fs->early = atomic_load(&l->early);
	report_int(r, "received", "received (distinct ids)", fs->received);
	report_int(r, "lost", "lost (accepted, never received)", fs->lost);
	report_int(r, "duplicates", "duplicates (extra copies)", fs->dups);
	report_int(r, "early", "published before due (must be 0)", fs->early);
	report_int(r, "late_submits", "accepted only after due (bench lag)",
		   fs->late_submits);
	report_int(r, "foreign", "other messages on the topic",
		   atomic_load(&l->foreign));
	report_latency(r, "fired_lateness", "fired-at - due", fired, nf);
	report_latency(r, "recv_lateness", "consumer receive - due", recv, nr);
	report_latency(r, "kafka_leg", "consumer receive - fired-at", leg, nl);
	xfree(fired);
	xfree(recv);
	xfree(leg);
}

/*
 * The task topic made before anything is submitted to it, as a deployment
 * does: the manager refuses tasks for a topic that does not exist (422
 * topic_unknown) unless kafka.create_task_topics is set. Scenarios with a
 * consumer get it from consumer_start.
 */
static int
topic_made(const struct bench_opts *o, const struct names *nm)
{
	char err[512];

	if (o->brokers == NULL ||
	    kafka_topic_ensure(o->brokers, nm->kafka_topic, err,
			       sizeof(err)) == 0)
		return 0;
	note("%s: %s", o->label, err);
	return -1;
}

/*
 * Starts the consumer, then sends one task due now and waits for it, so
 * that the workers' producer knows the fresh topic and the consumer is
 * fetching before the measured tasks come (a long-lived topic's steady
 * state).
 */
int
start_consumer(const struct bench_opts *o, const struct names *nm,
	       struct ledger *l, struct consumer **c)
{
	char err[512], body[512];
	struct httpc *h;
	const char *resp;
	size_t rlen;
	int64_t t0 = clock_mono_us();
	int status;

	*c = consumer_start(o->brokers, nm->kafka_topic, l, err, sizeof(err));
	if (*c == NULL) {
		note("consumer: %s", err);
		return -1;
	}
	h = httpc_create(o->api, err, sizeof(err));
	if (h == NULL) {
		note("warm-up: %s", err);
		return 0;
	}
	snprintf(body, sizeof(body),
		 "{\"id\":\"%swarmup\",\"topic\":\"%s\",\"body\":\"warm-up\","
		 "\"delay_ms\":0}",
		 nm->id_prefix, nm->topic);
	status = httpc_request(h, "POST", "/v1/tasks", body, strlen(body),
			       &resp, &rlen, err, sizeof(err));
	httpc_destroy(h);
	if (status != 201 && status != 200) {
		note("warm-up task: %s", status < 0 ? err : resp);
		return 0;
	}
	while (consumer_messages(*c) == 0 && !bench_stop &&
	       clock_mono_us() - t0 < 30000000)
		usleep(10000);
	note("warm-up task received after %.0f ms",
	     (double)(clock_mono_us() - t0) / 1e3);
	return 0;
}

/* ------------------------------------------------------------- ingest --- */

void
ingest_progress_cb(void *arg, char *buf, size_t len)
{
	struct ingest_progress *ip = arg;

	snprintf(buf, len, "%s: sent %ld/%zu, accepted %ld", ip->what,
		 submitter_sent(ip->s), ip->l->n,
		 atomic_load(&ip->l->accepted));
}

int
scen_ingest(struct bench_opts *o)
{
	struct names nm;
	struct ledger *l;
	struct submit_stats st;
	struct ingest_progress ip;
	struct progress *prog;
	struct report *r;
	int64_t due;
	double secs;
	long count;

	if (o->conns == 0)
		o->conns = o->single ? 64 : 4;
	if (o->batch == 0)
		o->batch = 1000;
	count = o->count ? o->count : (o->single ? 100000 : 200000);
	names_init(o, &nm);
	if (topic_made(o, &nm) < 0)
		return -1;
	l = ledger_create(nm.id_prefix, (size_t)count);
	due = now_us() / 1000 + o->delay_ms;
	for (long i = 0; i < count; i++)
		l->due_ms[i] = due + i % 1000;
	note("%s: %ld tasks, %s, %d connection(s), due in %ld ms, topic %s",
	     o->label, count,
	     o->single ? "POST /v1/tasks" : "POST /v1/tasks/batch", o->conns,
	     o->delay_ms, nm.topic);
	ip.l = l;
	ip.what = o->label;
	ip.s = submitter_start(o, l, nm.topic, o->batch, NULL, o->duration);
	prog = progress_start(o, ingest_progress_cb, &ip);
	submitter_join(ip.s, &st);
	progress_stop(prog);
	secs = (double)(st.last_done_mono - st.first_send_mono) / 1e6;

	r = report_create(o->label);
	report_str(r, "mode", "endpoint",
		   o->single ? "POST /v1/tasks" : "POST /v1/tasks/batch");
	report_int(r, "conns", "connections", o->conns);
	if (!o->single)
		report_int(r, "batch", "tasks per request", o->batch);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	submit_report(r, &st);
	report_num(r, "seconds", "seconds", secs, "%.2f");
	report_num(r, "rate", "accepted tasks/s",
		   secs > 0 ? (double)st.accepted / secs : NAN, "%.0f");
	report_num(r, "req_rate", "requests/s",
		   secs > 0 ? (double)st.requests / secs : NAN, "%.0f");
	report_latency(r, "req", "request latency", st.req_ms, st.nreq);
	if (o->db) {
		char err[256];
		long long rows =
			db_count_prefix(o->db, nm.id_prefix, err, sizeof(err));

		if (rows < 0)
			note("db: %s", err);
		report_int(r, "db_rows", "rows in the DB (durable)", rows);
	}
	report_print(r);
	report_destroy(r);
	xfree(st.req_ms);
	ledger_destroy(l);
	return st.accepted > 0 ? 0 : -1;
}

/* ------------------------------------------------------------- steady --- */

/* One line per task, for a look at lateness over time (what a percentile
 * hides: stalls, their period): due ms, accepted us, fired-at ms, received
 * us, all wall clock (0 or -1: never). */
static void
ledger_write(const struct ledger *l, const char *path)
{
	FILE *f = fopen(path, "w");

	if (f == NULL) {
		note("ledger %s: %s", path, strerror(errno));
		return;
	}
	fprintf(f, "due_ms\taccept_us\tfired_ms\trecv_us\n");
	for (size_t i = 0; i < l->n; i++)
		fprintf(f,
			"%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\n",
			l->due_ms[i], l->accept_us[i], l->fired_ms[i],
			l->recv_us[i]);
	if (fclose(f) != 0)
		note("ledger %s: %s", path, strerror(errno));
}

int
scen_steady(struct bench_opts *o)
{
	struct names nm;
	struct ledger *l;
	struct consumer *c;
	struct submit_stats st;
	struct fire_progress fp = {0};
	struct fire_stats fs;
	struct hist h0, h1;
	struct progress *prog;
	struct report *r;
	struct db_sampler *sampler;
	int64_t t0_ms, mono0, real0, *send;
	double dur = o->duration > 0 ? o->duration : 10, waited;
	long count = (long)llround(o->rate * dur);
	size_t nb;
	int batch;

	/* Preloaded: everything is submitted first, as fast as possible (at
	 * an assumed 20k/s), so only firing is measured. */
	if (o->lead_ms < 0)
		o->lead_ms = o->preload ? 5000 + count / 20 : 5000;
	if (o->conns == 0)
		o->conns = 4;
	/* Paced: about one request every 10 ms. */
	batch = o->single ? 1 : o->preload ? 1000 : (int)ceil(o->rate / 100);
	if (batch < 1)
		batch = 1;
	if (o->batch && batch > o->batch)
		batch = o->batch;
	if (batch > 1000)
		batch = 1000;
	names_init(o, &nm);
	l = ledger_create(nm.id_prefix, (size_t)count);
	if (start_consumer(o, &nm, l, &c) < 0) {
		ledger_destroy(l);
		return -1;
	}
	hist_scrape(o->worker_metrics, &h0);
	/* Task i is due at t0 + i/rate; its batch is sent lead ms earlier. */
	real0 = now_us();
	mono0 = clock_mono_us();
	t0_ms = real0 / 1000 + o->lead_ms + 500;
	for (long i = 0; i < count; i++)
		l->due_ms[i] =
			t0_ms + (int64_t)floor((double)i * 1000.0 / o->rate);
	nb = ((size_t)count + (size_t)batch - 1) / (size_t)batch;
	send = xcalloc(nb ? nb : 1, sizeof(*send));
	for (size_t b = 0; b < nb; b++)
		send[b] = mono0 +
			  (l->due_ms[b * (size_t)batch] - o->lead_ms) * 1000 -
			  real0;
	if (o->preload)
		note("%s: %ld tasks, %.0f due/s for %.0f s from %+.1f s, all "
		     "submitted first in batches of %d on %d connection(s), "
		     "topic %s",
		     o->label, count, o->rate, dur,
		     (double)(t0_ms * 1000 - real0) / 1e6, batch, o->conns,
		     nm.kafka_topic);
	else
		note("%s: %ld tasks, %.0f due/s for %.0f s from %+.1f s, "
		     "submitted %ld ms ahead in batches of %d on %d "
		     "connection(s), topic %s",
		     o->label, count, o->rate, dur,
		     (double)(t0_ms * 1000 - real0) / 1e6, o->lead_ms, batch,
		     o->conns, nm.kafka_topic);
	fp.what = o->label;
	fp.l = l;
	fp.c = c;
	fp.s = submitter_start(o, l, nm.topic, batch, o->preload ? NULL : send,
			       0);
	prog = progress_start(o, fire_progress_cb, &fp);
	sampler = db_sampler_start(o);
	submitter_join(fp.s, &st);
	fp.sent_final = st.tasks_sent;
	fp.s = NULL;
	wait_received(o, l, c, count ? l->due_ms[count - 1] : t0_ms);
	progress_stop(prog);
	consumer_stop(c);
	hist_scrape(o->worker_metrics, &h1);
	waited = quiesce(o);

	r = report_create(o->label);
	report_num(r, "rate", "due rate (tasks/s)", o->rate, "%.0f");
	report_num(r, "duration_s", "duration (s)", dur, "%.0f");
	report_str(r, "submission", "submission",
		   o->preload ? "preloaded (all before the first due)"
			      : "paced, concurrent with firing");
	report_int(r, "lead_ms",
		   o->preload ? "first due after start (ms)"
			      : "submitted ahead of due (ms)",
		   o->lead_ms);
	report_int(r, "batch", "tasks per request", batch);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	submit_report(r, &st);
	report_int(r, "late_sends", "requests sent > 50 ms behind plan",
		   st.late_sends);
	report_num(r, "max_send_lag_ms", "max send lag (ms)",
		   st.max_send_lag_ms, "%.1f");
	fire_analyse(r, l, &fs);
	report_quiesce(r, waited);
	if (fs.received > 1 && fs.max_fired_ms > fs.min_fired_ms)
		report_num(r, "fire_rate", "fired tasks/s (first to last)",
			   (double)fs.received * 1000.0 /
				   (double)(fs.max_fired_ms - fs.min_fired_ms),
			   "%.0f");
	hist_report(r, o, &h0, &h1);
	if (sampler != NULL) {
		db_sampler_report(sampler, r);
		lateness_windows(r, l, o->window_s > 0 ? o->window_s : 60);
	}
	report_print(r);
	report_destroy(r);
	xfree(st.req_ms);
	xfree(send);
	if (o->ledger_out != NULL)
		ledger_write(l, o->ledger_out);
	ledger_destroy(l);
	return fs.lost == 0 && fs.early == 0 && st.accepted > 0 ? 0 : -1;
}

/* -------------------------------------------------------------- burst --- */

int
scen_burst(struct bench_opts *o)
{
	struct names nm;
	struct ledger *l;
	struct consumer *c;
	struct submit_stats st;
	struct fire_progress fp = {0};
	struct fire_stats fs;
	struct hist h0, h1;
	struct progress *prog;
	struct report *r;
	long count = o->count ? o->count : 100000;
	int64_t t0_ms, sub_end_ms;
	double waited;
	double secs, drain_s;

	if (o->conns == 0)
		o->conns = 4;
	if (o->batch == 0)
		o->batch = 1000;
	/* Enough time to submit at 10k/s, plus 3 s. */
	if (o->lead_ms < 0)
		o->lead_ms = 3000 + count / 10;
	names_init(o, &nm);
	l = ledger_create(nm.id_prefix, (size_t)count);
	if (start_consumer(o, &nm, l, &c) < 0) {
		ledger_destroy(l);
		return -1;
	}
	hist_scrape(o->worker_metrics, &h0);
	t0_ms = now_us() / 1000 + o->lead_ms;
	for (long i = 0; i < count; i++)
		l->due_ms[i] =
			t0_ms + (int64_t)((double)i * (double)o->spread_ms /
					  (double)count);
	note("%s: %ld tasks due within %ld ms, %.1f s from now, submitted in "
	     "batches of %d on %d connection(s), topic %s",
	     o->label, count, o->spread_ms, (double)o->lead_ms / 1e3, o->batch,
	     o->conns, nm.kafka_topic);
	fp.what = o->label;
	fp.l = l;
	fp.c = c;
	fp.s = submitter_start(o, l, nm.topic, o->batch, NULL, 0);
	prog = progress_start(o, fire_progress_cb, &fp);
	submitter_join(fp.s, &st);
	sub_end_ms = now_us() / 1000;
	fp.sent_final = st.tasks_sent;
	fp.s = NULL;
	if (sub_end_ms > t0_ms)
		note("%s: submission ended %.1f s after the first due time; "
		     "raise --lead",
		     o->label, (double)(sub_end_ms - t0_ms) / 1e3);
	wait_received(o, l, c, t0_ms + o->spread_ms);
	progress_stop(prog);
	consumer_stop(c);
	hist_scrape(o->worker_metrics, &h1);
	waited = quiesce(o);

	secs = (double)(st.last_done_mono - st.first_send_mono) / 1e6;
	r = report_create(o->label);
	report_int(r, "count", "tasks", count);
	report_int(r, "spread_ms", "due within (ms)", o->spread_ms);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	submit_report(r, &st);
	report_num(r, "submit_rate", "submission rate (tasks/s)",
		   secs > 0 ? (double)st.accepted / secs : NAN, "%.0f");
	report_num(r, "submit_margin_s", "submission done before first due (s)",
		   (double)(t0_ms - sub_end_ms) / 1e3, "%.1f");
	fire_analyse(r, l, &fs);
	report_quiesce(r, waited);
	drain_s = fs.max_recv_us
			  ? (double)fs.max_recv_us / 1e6 - (double)t0_ms / 1e3
			  : NAN;
	report_num(r, "drain_s", "drain: first due -> last received (s)",
		   drain_s, "%.2f");
	report_num(
		r, "fire_rate", "fire rate: tasks / (last fired - first due)",
		fs.max_fired_ms > t0_ms
			? (double)fs.received * 1000.0 /
				  (double)(fs.max_fired_ms >
							   t0_ms + o->spread_ms
						   ? fs.max_fired_ms - t0_ms
						   : o->spread_ms)
			: NAN,
		"%.0f");
	report_num(r, "drain_rate",
		   "drain rate: tasks / (last received - first due)",
		   drain_s > 0 ? (double)fs.received / drain_s : NAN, "%.0f");
	hist_report(r, o, &h0, &h1);
	report_print(r);
	report_destroy(r);
	xfree(st.req_ms);
	ledger_destroy(l);
	return fs.lost == 0 && fs.early == 0 && st.accepted > 0 ? 0 : -1;
}

/* ---------------------------------------------------------------- far --- */

/* Submits count tasks due uniformly in [from, to) ms from now. */
static int
far_phase(struct bench_opts *o, const char *what, long count, int64_t from,
	  int64_t to, struct submit_stats *st, char *prefix, size_t plen)
{
	struct names nm;
	struct ledger *l;
	struct ingest_progress ip;
	struct progress *prog;
	const char *label = o->label;
	char lbuf[96];
	int64_t now = now_us() / 1000;

	snprintf(lbuf, sizeof(lbuf), "%s-%s", o->label, what);
	o->label = lbuf;
	names_init(o, &nm);
	o->label = label;
	if (topic_made(o, &nm) < 0)
		return -1;
	snprintf(prefix, plen, "%s", nm.id_prefix);
	l = ledger_create(nm.id_prefix, (size_t)count);
	for (long i = 0; i < count; i++)
		l->due_ms[i] = now + from +
			       (int64_t)((double)(to - from) * (double)i /
					 (double)count);
	ip.l = l;
	ip.what = lbuf;
	ip.s = submitter_start(o, l, nm.topic, o->batch, NULL, 0);
	prog = progress_start(o, ingest_progress_cb, &ip);
	submitter_join(ip.s, st);
	progress_stop(prog);
	xfree(st->req_ms);
	st->req_ms = NULL;
	ledger_destroy(l);
	return st->accepted == count ? 0 : -1;
}

/*
 * Waits until the Redis index stops changing (the manager indexes after
 * answering; workers may still be cleaning up delivered tasks of an earlier
 * scenario), then takes a full sample with MEMORY USAGE.
 */
static void
redis_settle(const char *redis, struct redis_mem *m)
{
	struct redis_mem prev = {.due_ids = -1};
	char err[256];
	int i;

	for (i = 0; i < 120 && !bench_stop; i++) {
		if (redis_mem_sample(redis, m, 0, err, sizeof(err)) < 0) {
			note("redis: %s", err);
			return;
		}
		if (m->due_ids == prev.due_ids &&
		    m->payloads == prev.payloads &&
		    m->bucketed == prev.bucketed && m->inflight == 0 &&
		    m->keys == prev.keys)
			break;
		prev = *m;
		usleep(500000);
	}
	if (i == 120)
		note("redis: index still changing after 60 s; figures are "
		     "noisy");
	if (redis_mem_sample(redis, m, 1, err, sizeof(err)) < 0)
		note("redis: %s", err);
}

int
scen_far(struct bench_opts *o)
{
	struct redis_mem m0, m1, m2;
	struct submit_stats st_near = {0}, st_far = {0};
	struct report *r;
	char err[256], near_prefix[96], far_prefix[96];
	long count = o->count ? o->count : 100000;
	long near = o->near_count >= 0 ? o->near_count : count;
	long long rows_near = -1, rows_far = -1;
	long near_due = -1, near_task = -1, far_due = -1, far_task = -1;
	double near_bytes, far_bytes;

	if (o->redis == NULL) {
		note("far: --redis HOST:PORT/DB (the cluster's Redis) is "
		     "required");
		return -1;
	}
	if (o->conns == 0)
		o->conns = 4;
	if (o->batch == 0)
		o->batch = 1000;
	if (redis_mem_sample(o->redis, &m0, 0, err, sizeof(err)) < 0) {
		note("redis: %s", err);
		return -1;
	}
	redis_settle(o->redis, &m0);
	note("%s: %ld tasks due in 10-25 min (inside the 30 min horizon), "
	     "then %ld due in 2 h - 7 d",
	     o->label, near, count);
	if (near > 0)
		far_phase(o, "near", near, 10 * 60000, 25 * 60000, &st_near,
			  near_prefix, sizeof(near_prefix));
	redis_settle(o->redis, &m1);
	far_phase(o, "far", count, 2 * 3600000LL, 7 * 86400000LL, &st_far,
		  far_prefix, sizeof(far_prefix));
	redis_settle(o->redis, &m2);
	if (near > 0 &&
	    redis_ids_present(o->redis, near_prefix, near, o->slots, &near_due,
			      &near_task, err, sizeof(err)) < 0)
		note("%s", err);
	if (redis_ids_present(o->redis, far_prefix, count, o->slots, &far_due,
			      &far_task, err, sizeof(err)) < 0)
		note("%s", err);
	if (o->db) {
		if (near > 0)
			rows_near = db_count_prefix(o->db, near_prefix, err,
						    sizeof(err));
		rows_far = db_count_prefix(o->db, far_prefix, err, sizeof(err));
		if (rows_far < 0)
			note("db: %s", err);
	}
	near_bytes = st_near.accepted
			     ? (double)(m1.keys_bytes - m0.keys_bytes) /
				       (double)st_near.accepted
			     : NAN;
	far_bytes = st_far.accepted ? (double)(m2.keys_bytes - m1.keys_bytes) /
					      (double)st_far.accepted
				    : NAN;

	r = report_create(o->label);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	report_int(r, "near_accepted", "inside horizon: accepted",
		   st_near.accepted);
	report_int(r, "near_db_rows", "inside horizon: DB rows", rows_near);
	report_int(r, "near_redis_due", "inside horizon: ours in Redis due set",
		   near_due);
	report_int(r, "near_redis_payloads",
		   "inside horizon: ours in Redis payload hash", near_task);
	report_int(r, "near_redis_bucketed",
		   "inside horizon: Redis bucket elements (all tasks)",
		   m1.bucketed - m0.bucketed);
	report_num(r, "near_bytes_per_task",
		   "inside horizon: Redis bytes/task (MEMORY USAGE)",
		   near_bytes, "%.0f");
	report_num(r, "near_overhead_per_task",
		   "inside horizon: bytes/task beyond the body",
		   near_bytes - o->body_size, "%.0f");
	report_num(r, "near_used_memory_per_task",
		   "inside horizon: INFO used_memory delta/task",
		   st_near.accepted
			   ? (double)(m1.used_memory - m0.used_memory) /
				     (double)st_near.accepted
			   : NAN,
		   "%.0f");
	report_int(r, "far_accepted", "beyond horizon: accepted",
		   st_far.accepted);
	report_int(r, "far_db_rows", "beyond horizon: DB rows", rows_far);
	report_int(r, "far_redis_due", "beyond horizon: ours in Redis due set",
		   far_due);
	report_int(r, "far_redis_payloads",
		   "beyond horizon: ours in Redis payload hash", far_task);
	report_int(r, "far_redis_bucketed",
		   "beyond horizon: Redis bucket elements (all tasks)",
		   m2.bucketed - m1.bucketed);
	report_num(r, "far_bytes_per_task",
		   "beyond horizon: Redis bytes/task (MEMORY USAGE)", far_bytes,
		   "%.1f");
	report_num(r, "far_used_memory_per_task",
		   "beyond horizon: INFO used_memory delta/task",
		   st_far.accepted ? (double)(m2.used_memory - m1.used_memory) /
					     (double)st_far.accepted
				   : NAN,
		   "%.1f");
	report_int(r, "redis_keys_bytes", "Redis: bytes of the db's keys",
		   m2.keys_bytes);
	report_int(r, "errors", "not accepted",
		   (st_near.tasks_sent - st_near.accepted) +
			   (st_far.tasks_sent - st_far.accepted));
	if (st_far.last_error[0] || st_near.last_error[0])
		report_str(r, "last_error", "last error",
			   st_far.last_error[0] ? st_far.last_error
						: st_near.last_error);
	report_print(r);
	report_destroy(r);
	return st_far.accepted == count && st_near.accepted == near ? 0 : -1;
}
