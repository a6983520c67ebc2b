/*
 * The submitter: sends a ledger's tasks through the API on N kept-alive
 * connections, each on its own thread, in batches that may be paced.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xmalloc.h"

struct submitter {
	const struct bench_opts *o;
	struct ledger *l;
	char *topic_json; /* the "topic" member, escaped once */
	char *body_json;  /* the "body" member */
	int batch;
	size_t nbatches;
	const int64_t *send_mono_us;
	int64_t stop_mono; /* 0: no time limit */
	atomic_int halted; /* submitter_halt() */
	atomic_size_t next;
	atomic_long sent;
	pthread_t *threads;
	int nthreads;
	pthread_mutex_t mu; /* stats */
	struct submit_stats st;
	int64_t t0;
};

/* The tasks of a batch as JSON; returns the length. */
static size_t
build(struct submitter *s, size_t first, size_t n, char **buf, size_t *cap)
{
	size_t need = 64 + n * (strlen(s->topic_json) + strlen(s->body_json) +
				sizeof(s->l->prefix) + 96);
	size_t len = 0;
	char id[160];

	if (need > *cap) {
		*cap = need;
		*buf = xrealloc(*buf, *cap);
	}
	if (!s->o->single)
		len += (size_t)sprintf(*buf + len, "{\"tasks\":[");
	for (size_t i = first; i < first + n; i++) {
		ledger_id(s->l, i, id, sizeof(id));
		len += (size_t)sprintf(
			*buf + len,
			"%s{\"id\":\"%s\",%s,%s,\"due_at\":%" PRId64 "}",
			i > first ? "," : "", id, s->topic_json, s->body_json,
			s->l->due_ms[i]);
	}
	if (!s->o->single)
		len += (size_t)sprintf(*buf + len, "]}");
	return len;
}

/*
 * The integer "code" of each result in order ({"results":[{...,"code":201},
 * ...]}); an error result also has a nested string "code", skipped here.
 */
static size_t
parse_codes(const char *resp, int *codes, size_t n)
{
	const char *p = resp;
	size_t k = 0;

	while (k < n && (p = strstr(p, "\"code\":")) != NULL) {
		p += 7;
		while (*p == ' ')
			p++;
		if (*p >= '0' && *p <= '9')
			codes[k++] = atoi(p);
	}
	return k;
}

static void
count_code(struct submit_stats *st, int code, long n)
{
	if (code == 201)
		st->accepted += n;
	else if (code == 200)
		st->replayed += n;
	else if (code == 409)
		st->conflicts += n;
	else if (code >= 400 && code < 500)
		st->rejected += n;
	else if (code >= 500)
		st->unavailable += n;
	else
		st->neterr += n;
}

static void *
submit_main(void *arg)
{
	struct submitter *s = arg;
	const struct bench_opts *o = s->o;
	struct submit_stats local = {0};
	double *lat = NULL;
	size_t nlat = 0, latcap = 0, cap = 0;
	int *codes = xcalloc((size_t)s->batch, sizeof(int));
	char *buf = NULL, err[256] = "";
	struct httpc *c = httpc_create(o->api, err, sizeof(err));
	const char *path = o->single ? "/v1/tasks" : "/v1/tasks/batch";

	local.first_send_mono = INT64_MAX;
	for (;;) {
		size_t b = atomic_fetch_add(&s->next, 1), first, n, len;
		const char *resp;
		size_t rlen;
		int64_t t1, t2, ts;
		int status;

		if (b >= s->nbatches || bench_stop || atomic_load(&s->halted))
			break;
		if (s->send_mono_us != NULL) {
			sleep_until_mono_us(s->send_mono_us[b]);
			if (atomic_load(&s->halted))
				break;
			t1 = clock_mono_us();
			double lag = (double)(t1 - s->send_mono_us[b]) / 1e3;

			if (lag > local.max_send_lag_ms)
				local.max_send_lag_ms = lag;
			if (lag > 50)
				local.late_sends++;
		}
		t1 = clock_mono_us();
		if (s->stop_mono && t1 > s->stop_mono)
			break;
		first = b * (size_t)s->batch;
		n = s->l->n - first < (size_t)s->batch ? s->l->n - first
						       : (size_t)s->batch;
		len = build(s, first, n, &buf, &cap);
		if (t1 < local.first_send_mono)
			local.first_send_mono = t1;
		status = c ? httpc_request(c, "POST", path, buf, len, &resp,
					   &rlen, err, sizeof(err))
			   : -1;
		t2 = clock_mono_us();
		ts = now_us();
		local.last_done_mono = t2;
		local.requests++;
		local.tasks_sent += (long)n;
		atomic_fetch_add(&s->sent, (long)n);
		if (nlat == latcap) {
			latcap = latcap ? 2 * latcap : 4096;
			lat = xrealloc(lat, latcap * sizeof(double));
		}
		lat[nlat++] = (double)(t2 - t1) / 1e3;
		if (status < 0) {
			local.neterr += (long)n;
			snprintf(local.last_error, sizeof(local.last_error),
				 "%s", err);
			if (c == NULL)
				c = httpc_create(o->api, err, sizeof(err));
			continue;
		}
		if (o->single) {
			count_code(&local, status, 1);
			if (status == 201 || status == 200) {
				s->l->accept_us[first] = ts;
				atomic_fetch_add(&s->l->accepted, 1);
			} else {
				snprintf(local.last_error,
					 sizeof(local.last_error),
					 "HTTP %d: %.200s", status, resp);
			}
			continue;
		}
		if (status != 200) {
			count_code(&local, status, (long)n);
			snprintf(local.last_error, sizeof(local.last_error),
				 "HTTP %d: %.200s", status, resp);
			continue;
		}
		if (parse_codes(resp, codes, n) != n) {
			local.neterr += (long)n;
			snprintf(local.last_error, sizeof(local.last_error),
				 "unparsable batch answer: %.200s", resp);
			continue;
		}
		for (size_t i = 0; i < n; i++) {
			count_code(&local, codes[i], 1);
			if (codes[i] == 201 || codes[i] == 200) {
				s->l->accept_us[first + i] = ts;
				atomic_fetch_add(&s->l->accepted, 1);
			}
		}
	}
	httpc_destroy(c);
	xfree(buf);
	xfree(codes);

	pthread_mutex_lock(&s->mu);
	s->st.requests += local.requests;
	s->st.tasks_sent += local.tasks_sent;
	s->st.accepted += local.accepted;
	s->st.replayed += local.replayed;
	s->st.conflicts += local.conflicts;
	s->st.rejected += local.rejected;
	s->st.unavailable += local.unavailable;
	s->st.neterr += local.neterr;
	s->st.late_sends += local.late_sends;
	if (local.max_send_lag_ms > s->st.max_send_lag_ms)
		s->st.max_send_lag_ms = local.max_send_lag_ms;
	if (local.requests && local.first_send_mono < s->st.first_send_mono)
		s->st.first_send_mono = local.first_send_mono;
	if (local.last_done_mono > s->st.last_done_mono)
		s->st.last_done_mono = local.last_done_mono;
	if (local.last_error[0])
		memcpy(s->st.last_error, local.last_error,
		       sizeof(local.last_error));
	s->st.req_ms = xrealloc(s->st.req_ms,
				(s->st.nreq + nlat + 1) * sizeof(double));
	if (nlat)
		memcpy(s->st.req_ms + s->st.nreq, lat, nlat * sizeof(double));
	s->st.nreq += nlat;
	pthread_mutex_unlock(&s->mu);
	xfree(lat);
	return NULL;
}

struct submitter *
submitter_start(const struct bench_opts *o, struct ledger *l, const char *topic,
		int batch, const int64_t *send_mono_us, double stop_after_s)
{
	struct submitter *s = xcalloc(1, sizeof(*s));
	char *body = xmalloc((size_t)o->body_size + 1);

	for (int i = 0; i < o->body_size; i++)
		body[i] = (char)('a' + i % 26);
	body[o->body_size] = '\0';
	s->o = o;
	s->l = l;
	s->batch = o->single ? 1 : batch;
	s->nbatches = (l->n + (size_t)s->batch - 1) / (size_t)s->batch;
	s->send_mono_us = send_mono_us;
	s->topic_json = xasprintf("\"topic\":\"%s\"", topic);
	if (o->callback_url != NULL)
		s->body_json = xasprintf("\"body\":\"%s\",\"callback\":"
					 "{\"url\":\"%s\"}",
					 body, o->callback_url);
	else
		s->body_json = xasprintf("\"body\":\"%s\"", body);
	xfree(body);
	s->t0 = clock_mono_us();
	s->stop_mono =
		stop_after_s > 0 ? s->t0 + (int64_t)(stop_after_s * 1e6) : 0;
	s->st.first_send_mono = INT64_MAX;
	pthread_mutex_init(&s->mu, NULL);
	s->nthreads = o->conns;
	s->threads = xcalloc((size_t)s->nthreads, sizeof(pthread_t));
	for (int i = 0; i < s->nthreads; i++)
		pthread_create(&s->threads[i], NULL, submit_main, s);
	return s;
}

void
submitter_halt(struct submitter *s)
{
	atomic_store(&s->halted, 1);
}

long
submitter_sent(struct submitter *s)
{
	return atomic_load(&s->sent);
}

void
submitter_join(struct submitter *s, struct submit_stats *st)
{
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	*st = s->st;
	if (st->first_send_mono == INT64_MAX)
		st->first_send_mono = st->last_done_mono = clock_mono_us();
	pthread_mutex_destroy(&s->mu);
	xfree(s->threads);
	xfree(s->topic_json);
	xfree(s->body_json);
	xfree(s);
}

void
submit_report(struct report *r, const struct submit_stats *st)
{
	report_int(r, "requests", "HTTP requests", st->requests);
	report_int(r, "tasks_sent", "tasks sent", st->tasks_sent);
	report_int(r, "accepted", "accepted (201)", st->accepted);
	if (st->replayed)
		report_int(r, "replayed", "replayed (200)", st->replayed);
	report_int(r, "errors", "not accepted (409/4xx/5xx/transport)",
		   st->conflicts + st->rejected + st->unavailable + st->neterr);
	if (st->unavailable)
		report_int(r, "unavailable", "  of which 5xx", st->unavailable);
	if (st->neterr)
		report_int(r, "neterr", "  of which transport", st->neterr);
	if (st->last_error[0])
		report_str(r, "last_error", "last error", st->last_error);
}
