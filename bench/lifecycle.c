/*
 * The data lifecycle scenarios (issue 19): storage (DB bytes per pending
 * and per finished task, per index, from InnoDB's statistics), soak (a
 * long paced stream with the task table's row count sampled over time)
 * and backlog (millions of tasks far ahead: submit rate along the load,
 * DB size, Redis bytes; then the horizon loader's promotion and a rebuild
 * after a Redis flush, measured by the horizon scenario).
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <mysql.h>

#include "bench.h"
#include "xmalloc.h"

/* ------------------------------------------------------------ helpers --- */

/* The first column of the first row of a query, or -1. */
static long long
db_ll(MYSQL *my, const char *q)
{
	MYSQL_RES *res;
	MYSQL_ROW row;
	long long n = -1;

	if (mysql_query(my, q) != 0) {
		note("db: %s: %s", q, mysql_error(my));
		return -1;
	}
	if ((res = mysql_store_result(my)) == NULL)
		return -1;
	if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
		n = strtoll(row[0], NULL, 10);
	mysql_free_result(res);
	return n;
}

static double
db_double(MYSQL *my, const char *q)
{
	MYSQL_RES *res;
	MYSQL_ROW row;
	double v = NAN;

	if (mysql_query(my, q) != 0) {
		note("db: %s: %s", q, mysql_error(my));
		return NAN;
	}
	if ((res = mysql_store_result(my)) == NULL)
		return NAN;
	if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
		v = strtod(row[0], NULL);
	mysql_free_result(res);
	return v;
}

#define IDX_MAX 16

/* Bytes InnoDB allocated to each index of tasks and task_log ('size' in
 * pages from mysql.innodb_index_stats, after ANALYZE TABLE). */
struct idx_sizes {
	int n;
	char name[IDX_MAX][96]; /* table.index */
	long long bytes[IDX_MAX];
};

static void
idx_sample(MYSQL *my, struct idx_sizes *s)
{
	MYSQL_RES *res;
	MYSQL_ROW row;

	memset(s, 0, sizeof(*s));
	if (mysql_query(my, "ANALYZE TABLE tasks, task_log") == 0 &&
	    (res = mysql_store_result(my)) != NULL)
		mysql_free_result(res);
	if (mysql_query(my, "SELECT table_name, index_name, "
			    "stat_value * @@innodb_page_size "
			    "FROM mysql.innodb_index_stats "
			    "WHERE database_name = DATABASE() AND stat_name = "
			    "'size' AND table_name IN ('tasks', 'task_log') "
			    "ORDER BY table_name DESC, index_name = 'PRIMARY' "
			    "DESC, index_name") != 0) {
		note("db: index statistics: %s", mysql_error(my));
		return;
	}
	if ((res = mysql_store_result(my)) == NULL)
		return;
	while ((row = mysql_fetch_row(res)) != NULL && s->n < IDX_MAX) {
		snprintf(s->name[s->n], sizeof(s->name[s->n]), "%s.%s", row[0],
			 row[1]);
		s->bytes[s->n] = strtoll(row[2], NULL, 10);
		s->n++;
	}
	mysql_free_result(res);
}

static long long
idx_get(const struct idx_sizes *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->name[i], name))
			return s->bytes[i];
	return 0;
}

static long long
idx_total(const struct idx_sizes *s, const char *table)
{
	size_t tl = strlen(table);
	long long t = 0;

	for (int i = 0; i < s->n; i++)
		if (!strncmp(s->name[i], table, tl) && s->name[i][tl] == '.')
			t += s->bytes[i];
	return t;
}

/* "tasks.due_by_slot" -> "tasks_due_by_slot" (a JSON key). */
static void
idx_key(const char *name, const char *suffix, char *buf, size_t len)
{
	snprintf(buf, len, "%s_%s", name, suffix);
	for (char *p = buf; *p; p++)
		if (*p == '.')
			*p = '_';
}

/* Bytes per task of each index between two samples. */
static void
idx_report(struct report *r, const struct idx_sizes *a,
	   const struct idx_sizes *b, long n, const char *what)
{
	char key[160], label[200];

	for (int i = 0; i < b->n; i++) {
		idx_key(b->name[i], what, key, sizeof(key));
		snprintf(label, sizeof(label), "%s: %s bytes/task", what,
			 b->name[i]);
		report_num(r, key, label,
			   n ? (double)(b->bytes[i] - idx_get(a, b->name[i])) /
					   (double)n
			     : NAN,
			   "%.0f");
	}
	snprintf(key, sizeof(key), "%s_tasks_bytes_per_task", what);
	snprintf(label, sizeof(label), "%s: tasks table (data + indexes)",
		 what);
	report_num(r, key, label,
		   n ? (double)(idx_total(b, "tasks") - idx_total(a, "tasks")) /
				   (double)n
		     : NAN,
		   "%.0f");
	snprintf(key, sizeof(key), "%s_log_bytes_per_task", what);
	snprintf(label, sizeof(label), "%s: task_log (data + index)", what);
	report_num(r, key, label,
		   n ? (double)(idx_total(b, "task_log") -
				idx_total(a, "task_log")) /
				   (double)n
		     : NAN,
		   "%.0f");
	snprintf(key, sizeof(key), "%s_bytes_per_task", what);
	snprintf(label, sizeof(label), "%s: all, bytes/task", what);
	report_num(
		r, key, label,
		n ? (double)(idx_total(b, "tasks") + idx_total(b, "task_log") -
			     idx_total(a, "tasks") - idx_total(a, "task_log")) /
				(double)n
		  : NAN,
		"%.0f");
}

/* Submits a ledger's tasks as fast as the API takes them. */
static void
load(struct bench_opts *o, struct ledger *l, const char *topic,
     const char *what, struct submit_stats *st)
{
	struct ingest_progress lp = {NULL, l, what};
	struct progress *prog;

	lp.s = submitter_start(o, l, topic, o->batch, NULL, 0);
	prog = progress_start(o, ingest_progress_cb, &lp);
	submitter_join(lp.s, st);
	progress_stop(prog);
}

/* ------------------------------------------------------------ storage --- */

/* Average stored length of the columns that vary, over the ids of a
 * ledger (the prefix is ours: [A-Za-z0-9.-], spliced). */
static void
column_report(struct report *r, MYSQL *my, const char *prefix)
{
	static const char *const cols[] = {"id", "topic", "body", "headers",
					   "callback"};
	char q[512], key[64], label[96];

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
		snprintf(q, sizeof(q),
			 "SELECT AVG(COALESCE(LENGTH(%s), 0)) FROM tasks "
			 "WHERE id LIKE '%s%%'",
			 cols[i], prefix);
		snprintf(key, sizeof(key), "avg_%s_bytes", cols[i]);
		snprintf(label, sizeof(label), "average stored %s (bytes)",
			 cols[i]);
		report_num(r, key, label, db_double(my, q), "%.1f");
	}
	snprintf(q, sizeof(q),
		 "SELECT COUNT(*) FROM task_log WHERE task_id LIKE '%s%%'",
		 prefix);
	report_int(r, "finished_log_rows", "finished: state-log rows",
		   db_ll(my, q));
}

/* The loads' defaults (4 connections, batches of 1,000) and the DB. */
static MYSQL *
load_db_open(struct bench_opts *o)
{
	char err[256];
	MYSQL *my;

	if (o->conns == 0)
		o->conns = 4;
	if (o->batch == 0)
		o->batch = 1000;
	if ((my = bench_db_open(o->db, err, sizeof(err))) == NULL)
		note("db: %s", err);
	return my;
}
/*
 * DB bytes per task: --count tasks due in 2-3 days (pending, beyond the
 * horizon), then --count due within seconds, fired and recorded
 * (finished, with their state-log rows); the growth of every index of
 * tasks and task_log between the samples, divided by the count.
 */
int
scen_storage(struct bench_opts *o)
{
	struct idx_sizes s0, s1, s2;
	struct submit_stats st_p = {0}, st_f = {0};
	struct names nm, nm_f;
	struct ledger *lp, *lf;
	struct consumer *c;
	struct fire_stats fs;
	struct report *r;
	const char *label = o->label;
	char lbuf[96];
	long count = o->count ? o->count : 200000;
	int64_t now, t0;
	MYSQL *my;

	if (o->db == NULL) {
		note("storage: --db URL is required");
		return -1;
	}
	if ((my = load_db_open(o)) == NULL)
		return -1;
	idx_sample(my, &s0);
	if (s0.n == 0) {
		mysql_close(my);
		return -1;
	}

	snprintf(lbuf, sizeof(lbuf), "%s-pending", label);
	o->label = lbuf;
	names_init(o, &nm);
	o->label = label;
	lp = ledger_create(nm.id_prefix, (size_t)count);
	now = now_us() / 1000;
	for (long i = 0; i < count; i++)
		lp->due_ms[i] =
			now + 2 * 86400000LL +
			(int64_t)(86400000.0 * (double)i / (double)count);
	note("%s: %ld pending tasks due in 2-3 days", o->label, count);
	load(o, lp, nm.topic, lbuf, &st_p);
	idx_sample(my, &s1);

	snprintf(lbuf, sizeof(lbuf), "%s-finished", label);
	o->label = lbuf;
	names_init(o, &nm_f);
	lf = ledger_create(nm_f.id_prefix, (size_t)count);
	if (start_consumer(o, &nm_f, lf, &c) < 0) {
		o->label = label;
		ledger_destroy(lp);
		ledger_destroy(lf);
		mysql_close(my);
		return -1;
	}
	o->label = label;
	/* Due at 10k/s, a margin after the submission at 20k/s. */
	t0 = now_us() / 1000 + 3000 + count / 20;
	for (long i = 0; i < count; i++)
		lf->due_ms[i] = t0 + i / 10;
	note("%s: %ld tasks due at 10k/s, fired and recorded", o->label, count);
	load(o, lf, nm_f.topic, lbuf, &st_f);
	wait_received(o, lf, c, lf->due_ms[count - 1]);
	consumer_stop(c);
	quiesce(o);
	idx_sample(my, &s2);

	r = report_create(o->label);
	report_int(r, "count", "tasks per phase", count);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	report_int(r, "pending_accepted", "pending: accepted", st_p.accepted);
	report_int(r, "finished_accepted", "finished: accepted", st_f.accepted);
	fs.lost = 0;
	fire_analyse(r, lf, &fs);
	idx_report(r, &s0, &s1, st_p.accepted, "pending");
	idx_report(r, &s1, &s2, st_f.accepted, "finished");
	column_report(r, my, nm_f.id_prefix);
	report_print(r);
	report_destroy(r);
	xfree(st_p.req_ms);
	xfree(st_f.req_ms);
	ledger_destroy(lp);
	ledger_destroy(lf);
	mysql_close(my);
	return st_p.accepted == count && fs.lost == 0 ? 0 : -1;
}

/* --------------------------------------------------------------- soak --- */

#define SAMPLES_MAX 4096

struct db_sampler {
	const struct bench_opts *o;
	pthread_t thread;
	atomic_int stop;
	int64_t t0;
	size_t n;
	double t[SAMPLES_MAX];
	long long tasks[SAMPLES_MAX];
	long long logs[SAMPLES_MAX];
};

static void *
sampler_main(void *arg)
{
	struct db_sampler *s = arg;
	char err[256];
	MYSQL *my;

	mysql_thread_init();
	my = bench_db_open(s->o->db, err, sizeof(err));
	if (my == NULL) {
		note("sampler: %s", err);
		mysql_thread_end();
		return NULL;
	}
	while (!atomic_load(&s->stop) && s->n < SAMPLES_MAX) {
		int64_t next =
			clock_mono_us() + (int64_t)(s->o->sample_s * 1e6);

		s->t[s->n] = (double)(clock_mono_us() - s->t0) / 1e6;
		s->tasks[s->n] = db_ll(my, "SELECT COUNT(*) FROM tasks");
		s->logs[s->n] = db_ll(my, "SELECT COUNT(*) FROM task_log");
		s->n++;
		while (!atomic_load(&s->stop) && clock_mono_us() < next)
			usleep(100000);
	}
	mysql_close(my);
	mysql_thread_end();
	return NULL;
}

struct db_sampler *
db_sampler_start(const struct bench_opts *o)
{
	struct db_sampler *s;

	if (o->sample_s <= 0 || o->db == NULL)
		return NULL;
	s = xcalloc(1, sizeof(*s));
	s->o = o;
	s->t0 = clock_mono_us();
	if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
		xfree(s);
		return NULL;
	}
	return s;
}

void
db_sampler_report(struct db_sampler *s, struct report *r)
{
	json_t *a = json_array();
	char cell[512] = "";
	long long max = 0;
	double tail = 0;
	size_t k = 0, nt = 0;

	atomic_store(&s->stop, 1);
	pthread_join(s->thread, NULL);
	for (size_t i = 0; i < s->n; i++) {
		json_array_append_new(a, json_pack("[f, I, I]", s->t[i],
						   (json_int_t)s->tasks[i],
						   (json_int_t)s->logs[i]));
		if (s->tasks[i] > max)
			max = s->tasks[i];
	}
	/* The level: the mean of the last third of the samples. */
	for (size_t i = s->n - s->n / 3; i < s->n && s->n > 0; i++, nt++)
		tail += (double)s->tasks[i];
	for (size_t i = 0; i < s->n && k + 24 < sizeof(cell); i += 1 + s->n / 8)
		k += (size_t)snprintf(cell + k, sizeof(cell) - k,
				      "%s%.0fs:%lld", k ? " " : "", s->t[i],
				      s->tasks[i]);
	report_json(r, "rows", "task rows over time (t: rows)", a, cell);
	report_int(r, "rows_max", "task rows, most sampled", max);
	report_num(r, "rows_level", "task rows, mean of the last third",
		   nt ? tail / (double)nt : NAN, "%.0f");
	report_int(r, "rows_last", "task rows at the end",
		   s->n ? s->tasks[s->n - 1] : -1);
	report_int(r, "log_rows_last", "log rows at the end",
		   s->n ? s->logs[s->n - 1] : -1);
	xfree(s);
}

void
lateness_windows(struct report *r, const struct ledger *l, double window_s)
{
	int64_t t0 = INT64_MAX, t1 = INT64_MIN;
	size_t nw, *cnt;
	double **v, *p99s;
	json_t *a;
	char cell[512] = "";
	size_t k = 0, np = 0;

	if (l->n == 0)
		return;
	for (size_t i = 0; i < l->n; i++) {
		if (l->due_ms[i] < t0)
			t0 = l->due_ms[i];
		if (l->due_ms[i] > t1)
			t1 = l->due_ms[i];
	}
	a = json_array();
	nw = (size_t)((double)(t1 - t0) / (window_s * 1000)) + 1;
	cnt = xcalloc(nw, sizeof(*cnt));
	v = xcalloc(nw, sizeof(*v));
	p99s = xcalloc(nw, sizeof(*p99s));
	for (size_t i = 0; i < l->n; i++)
		if (l->copies[i] > 0 && l->fired_ms[i] >= 0)
			cnt[(size_t)((double)(l->due_ms[i] - t0) /
				     (window_s * 1000))]++;
	for (size_t w = 0; w < nw; w++)
		v[w] = xcalloc(cnt[w] + 1, sizeof(double));
	memset(cnt, 0, nw * sizeof(*cnt));
	for (size_t i = 0; i < l->n; i++) {
		size_t w;

		if (l->copies[i] == 0 || l->fired_ms[i] < 0)
			continue;
		w = (size_t)((double)(l->due_ms[i] - t0) / (window_s * 1000));
		v[w][cnt[w]++] = (double)(l->fired_ms[i] - l->due_ms[i]);
	}
	for (size_t w = 0; w < nw; w++) {
		double p50, p99;

		if (cnt[w] == 0)
			continue;
		sort_doubles(v[w], cnt[w]);
		p50 = pct_sorted(v[w], cnt[w], 50);
		p99 = pct_sorted(v[w], cnt[w], 99);
		p99s[np++] = p99;
		json_array_append_new(
			a,
			json_pack("[f, f, f]", (double)w * window_s, p50, p99));
		if (k + 16 < sizeof(cell))
			k += (size_t)snprintf(cell + k, sizeof(cell) - k,
					      "%s%.0f", k ? " " : "", p99);
	}
	report_json(r, "windows", "fired-at p99 per window (ms)", a, cell);
	report_num(r, "window_s", "window (s)", window_s, "%.0f");
	if (np > 0) {
		sort_doubles(p99s, np);
		report_num(r, "window_p99_median_ms",
			   "fired-at p99 of a window: median (ms)",
			   pct_sorted(p99s, np, 50), "%.0f");
		report_num(r, "window_p99_min_ms",
			   "fired-at p99 of a window: lowest (ms)", p99s[0],
			   "%.0f");
		report_num(r, "window_p99_max_ms",
			   "fired-at p99 of a window: highest (ms)",
			   p99s[np - 1], "%.0f");
	}
	for (size_t w = 0; w < nw; w++)
		xfree(v[w]);
	xfree(v);
	xfree(cnt);
	xfree(p99s);
}

/* ------------------------------------------------------------ backlog --- */

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* A permutation-like spread of due times: the index sees them in
 * random order, as it would from many clients. */
static uint64_t
mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static long long
db_bytes(MYSQL *my)
{
	return db_ll(my, "SELECT SUM(data_length + index_length) FROM "
			 "information_schema.tables WHERE table_schema = "
			 "DATABASE()");
}

/*
 * --count tasks (10M) through the batch API as fast as it takes them,
 * due 1 h to 1 year ahead in random order, the first --near-count (1M)
 * within [1 h, 2 h) so that a horizon of a little over 2 h holds them
 * (scen_horizon). Reports the submit rate along the load (per 5 %),
 * the DB's size and bytes per task, the Redis bytes the load added (0
 * expected: nothing is within the horizon), and with --alter-index what
 * building migration 4's index on the loaded table costs.
 */
int
scen_backlog(struct bench_opts *o)
{
	struct idx_sizes s0, s1;
	struct redis_mem m0, m1;
	struct submit_stats st = {0};
	struct names nm;
	struct ledger *l;
	struct report *r;
	char err[256], cell[512] = "";
	long count = o->count ? o->count : 10000000;
	long near = o->near_count >= 0 ? o->near_count : count / 10;
	int64_t now, *acc;
	size_t nacc = 0;
	double rates[20], secs;
	json_t *a = json_array();
	long long db0, db1;
	size_t k = 0;
	MYSQL *my;

	if (o->db == NULL || o->redis == NULL) {
		note("backlog: --db and --redis are required");
		return -1;
	}
	if ((my = load_db_open(o)) == NULL)
		return -1;
	idx_sample(my, &s0);
	db0 = db_bytes(my);
	if (redis_mem_sample(o->redis, &m0, 1, err, sizeof(err)) < 0) {
		note("redis: %s", err);
		mysql_close(my);
		return -1;
	}
	names_init(o, &nm);
	l = ledger_create(nm.id_prefix, (size_t)count);
	now = now_us() / 1000;
	for (long i = 0; i < count; i++) {
		uint64_t h = mix64((uint64_t)i);

		l->due_ms[i] =
			i < near ? now + 3600000LL + (int64_t)(h % 3600000ULL)
				 : now + 7200000LL +
					   (int64_t)(h % (365 * 86400000ULL -
							  7200000ULL));
	}
	note("%s: %ld tasks due 1 h - 1 year ahead (%ld within [1 h, 2 h)), "
	     "batches of %d on %d connection(s)",
	     o->label, count, near, o->batch, o->conns);
	load(o, l, nm.topic, o->label, &st);
	secs = (double)(st.last_done_mono - st.first_send_mono) / 1e6;
	/* Per 5 % of the tasks in the order they were accepted: batches of
	 * several connections overlap, so by acceptance time, not by index. */
	acc = xcalloc((size_t)count + 1, sizeof(*acc));
	for (long i = 0; i < count; i++)
		if (l->accept_us[i] != 0)
			acc[nacc++] = l->accept_us[i];
	qsort(acc, nacc, sizeof(*acc), cmp_i64);
	for (int s = 0; s < 20; s++) {
		size_t a0 = nacc * (size_t)s / 20,
		       a1 = nacc * (size_t)(s + 1) / 20;
		double dt =
			a1 > a0 + 1 ? (double)(acc[a1 - 1] - acc[a0]) / 1e6 : 0;

		rates[s] = dt > 0 ? (double)(a1 - a0 - 1) / dt : NAN;
		json_array_append_new(a, isnan(rates[s])
						 ? json_null()
						 : json_real(round(rates[s])));
		if (k + 12 < sizeof(cell))
			k += (size_t)snprintf(cell + k, sizeof(cell) - k,
					      "%s%.0f", k ? " " : "", rates[s]);
	}
	xfree(acc);
	usleep(2000000);
	if (redis_mem_sample(o->redis, &m1, 1, err, sizeof(err)) < 0)
		note("redis: %s", err);
	idx_sample(my, &s1);
	db1 = db_bytes(my);

	r = report_create(o->label);
	report_int(r, "count", "tasks", count);
	report_int(r, "near_count", "of which due within [1 h, 2 h)", near);
	report_int(r, "body_size", "body (bytes)", o->body_size);
	submit_report(r, &st);
	report_num(r, "seconds", "load (s)", secs, "%.1f");
	report_num(r, "rate", "accepted tasks/s, whole load",
		   secs > 0 ? (double)st.accepted / secs : NAN, "%.0f");
	report_json(r, "segment_rates", "tasks/s per 5 % of the load", a, cell);
	report_num(r, "rate_first_5pct", "tasks/s, first 5 %", rates[0],
		   "%.0f");
	report_num(r, "rate_last_5pct", "tasks/s, last 5 %", rates[19], "%.0f");
	report_num(r, "rate_end_vs_start", "last 5 % / first 5 %",
		   rates[19] / rates[0], "%.2f");
	report_latency(r, "req", "request latency", st.req_ms, st.nreq);
	report_num(r, "db_mb", "DB size after (data + indexes, MB)",
		   (double)db1 / 1048576.0, "%.0f");
	report_num(r, "db_bytes_per_task", "DB bytes per task (all tables)",
		   st.accepted ? (double)(db1 - db0) / (double)st.accepted
			       : NAN,
		   "%.0f");
	idx_report(r, &s0, &s1, st.accepted, "pending");
	report_int(r, "redis_bytes_added", "Redis: bytes the load added",
		   m1.keys_bytes - m0.keys_bytes);
	report_int(r, "redis_items_added",
		   "Redis: due + payload + bucket entries added",
		   (m1.due_ids + m1.payloads + m1.bucketed) -
			   (m0.due_ids + m0.payloads + m0.bucketed));
	if (o->alter_index) {
		int64_t t0;

		note("%s: dropping and re-adding the retention index on %ld "
		     "rows (ALGORITHM=INPLACE, LOCK=NONE)",
		     o->label, st.accepted);
		if (mysql_query(my, "ALTER TABLE tasks DROP INDEX "
				    "by_status_updated") != 0)
			note("db: %s", mysql_error(my));
		t0 = clock_mono_us();
		if (mysql_query(my, "ALTER TABLE tasks ADD INDEX IF NOT EXISTS "
				    "by_status_updated (status, updated_at), "
				    "ALGORITHM=INPLACE, LOCK=NONE") != 0)
			note("db: %s", mysql_error(my));
		report_num(r, "alter_index_s",
			   "migration 4's index built on the loaded table (s)",
			   (double)(clock_mono_us() - t0) / 1e6, "%.1f");
	}
	report_print(r);
	report_destroy(r);
	xfree(st.req_ms);
	ledger_destroy(l);
	mysql_close(my);
	return st.accepted == count ? 0 : -1;
}

/* Our tasks in the Redis index: due set + payloads of the near window +
 * bucket elements (each task is in one or the other). */
static long long
indexed(const struct bench_opts *o)
{
	struct redis_mem m;
	char err[256];

	if (redis_mem_sample(o->redis, &m, 0, err, sizeof(err)) < 0)
		return -1;
	return m.due_ids + m.bucketed;
}

/* Polls until n tasks are indexed or nothing moved for stall_s: the
 * seconds from t0 (mono us) to when 10/50/100 % were. */
static void
wait_indexed(const struct bench_opts *o, long long n, int64_t t0,
	     double stall_s, double at[3], long long *last)
{
	int64_t moved = clock_mono_us();
	long long prev = -1;

	at[0] = at[1] = at[2] = NAN;
	while (!bench_stop) {
		long long v = indexed(o);
		double t = (double)(clock_mono_us() - t0) / 1e6;

		if (v != prev)
			moved = clock_mono_us();
		prev = v;
		*last = v;
		if (isnan(at[0]) && v >= n / 10)
			at[0] = t;
		if (isnan(at[1]) && v >= n / 2)
			at[1] = t;
		if (v >= n) {
			at[2] = t;
			return;
		}
		if ((double)(clock_mono_us() - moved) / 1e6 > stall_s)
			return;
		if (!o->quiet)
			note("%s: %lld of %lld indexed after %.1f s", o->label,
			     v, n, t);
		usleep(250000);
	}
}

/*
 * After scen_backlog, with the workers restarted with a horizon that
 * takes in its first hour: how fast the horizon loader brings --count
 * tasks into Redis; with --flush, then how fast the workers rebuild
 * that index from the DB after the Redis db is flushed (each slot's
 * marker gone: data loss).
 */
int
scen_horizon(struct bench_opts *o)
{
	struct report *r;
	long long n = o->count ? o->count : 1000000, got = 0;
	double at[3], rb[3];
	int64_t t0;

	if (o->redis == NULL) {
		note("horizon: --redis is required");
		return -1;
	}
	r = report_create(o->label);
	report_int(r, "count", "tasks expected in the index", n);
	t0 = clock_mono_us();
	note("%s: waiting for the horizon loader to index %lld tasks", o->label,
	     n);
	wait_indexed(o, n, t0, 60, at, &got);
	report_int(r, "loaded", "indexed by the loader", got);
	report_num(r, "load_s", "loader: all indexed after (s)", at[2], "%.1f");
	report_num(r, "load_rate",
		   "loader: tasks/s (10 % -> 100 %, the loader running)",
		   at[2] > at[0] ? (double)n * 0.9 / (at[2] - at[0]) : NAN,
		   "%.0f");
	if (o->flush) {
		char err[256];

		/* The --count tasks, not all indexed before the flush: the
		 * horizon keeps moving, a few more come in as it goes. */
		note("%s: FLUSHDB of the Redis db, then the rebuild", o->label);
		if (redis_flush(o->redis, err, sizeof(err)) < 0) {
			note("redis: %s", err);
		} else {
			t0 = clock_mono_us();
			wait_indexed(o, n, t0, 60, rb, &got);
			report_int(r, "rebuilt",
				   "indexed again after the flush", got);
			report_num(
				r, "rebuild_s",
				"rebuild: flush -> --count indexed again (s)",
				rb[2], "%.2f");
			report_num(r, "rebuild_rate",
				   "rebuild: tasks/s (flush -> --count)",
				   rb[2] > 0 ? (double)n / rb[2] : NAN, "%.0f");
			report_num(r, "rebuild_half_s",
				   "rebuild: half indexed after (s)", rb[1],
				   "%.2f");
		}
	}
	report_print(r);
	report_destroy(r);
	return got >= n ? 0 : -1;
}
