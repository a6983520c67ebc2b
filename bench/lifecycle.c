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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

struct load_progress {
	struct submitter *s;
	struct ledger *l;
	const char *what;
};

static void
load_progress_cb(void *arg, char *buf, size_t len)
{
	struct load_progress *lp = arg;

	snprintf(buf, len, "%s: sent %ld/%zu, accepted %ld", lp->what,
		 submitter_sent(lp->s), lp->l->n,
		 atomic_load(&lp->l->accepted));
}

/* Submits a ledger's tasks as fast as the API takes them. */
static void
load(struct bench_opts *o, struct ledger *l, const char *topic,
     const char *what, struct submit_stats *st)
{
	struct load_progress lp = {NULL, l, what};
	struct progress *prog;

	lp.s = submitter_start(o, l, topic, o->batch, NULL, 0);
	prog = progress_start(o, load_progress_cb, &lp);
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
	char err[256];
	const char *label = o->label;
	char lbuf[96];
	long count = o->count ? o->count : 200000;
	int64_t now, t0;
	MYSQL *my;

	if (o->db == NULL) {
		note("storage: --db URL is required");
		return -1;
	}
	if (o->conns == 0)
		o->conns = 4;
	if (o->batch == 0)
		o->batch = 1000;
	if ((my = bench_db_open(o->db, err, sizeof(err))) == NULL) {
		note("db: %s", err);
		return -1;
	}
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
