#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "daemon.h"
#include "db.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "redis.h"
#include "rindex.h"
#include "scripts.h"
#include "task.h"
#include "xmalloc.h"

/*
 * The future load: how many scheduled tasks fall due in each step of a
 * time range (GET /v1/schedule), and the gauge of the next minute.
 *
 * Where the counts come from, so that the cost stays bounded:
 * - Without a topic, the part of the range within the near window (due
 *   before now + task.bucket_near_ms - SCHED_REDIS_MARGIN_MS, where every
 *   scheduled task sits in its slot's due ZSET) is counted in Redis: one
 *   script per slot, one ZCOUNT (O(log n)) per step. A slot whose index is
 *   lost (no built marker) or a Redis that does not answer sends the whole
 *   part to the DB instead.
 * - The rest, and everything with a topic, is counted in the DB over an
 *   index, reading only index entries of scheduled tasks in the range:
 *   by_topic (topic, status, due_at) with a topic, due_by_slot (slot,
 *   status, due_at) without, as one range per slot (slot IN (all slots)),
 *   named with FORCE INDEX so that statistics cannot turn it into a scan.
 *   The statement is cut at SCHED_DB_TIMEOUT_S (max_statement_time): a
 *   503 then asks for a narrower range.
 * - by=topic adds a row per topic: the topics with scheduled tasks in the
 *   range (a loose index scan of by_topic, one step per topic), at most
 *   SCHED_TOPICS_MAX, then one by_topic count each.
 */

#define SCHED_STEP_MIN_MS 1000
#define SCHED_STEPS_MAX 10000
#define SCHED_TOPIC_STEPS_MAX 1000
#define SCHED_TOPICS_MAX 50
#define SCHED_RANGE_MAX_MS (INT64_C(400) * 86400000)
#define SCHED_DEFAULT_STEP_MS 3600000
#define SCHED_DEFAULT_RANGE_MS 86400000
#define SCHED_REDIS_MARGIN_MS 5000
#define SCHED_DB_TIMEOUT_S 10
#define SCHED_SAMPLE_INTERVAL_S 5

struct schedule {
	struct manager *mg;
	char *sql_slots; /* the count over due_by_slot, all slots */
	struct event *tick;
	struct metric *next_minute; /* prophet_schedule_booked_next_minute */
	int sampling;
	int stopped; /* shutting down: no new DB job */
};

struct sched_topic {
	char topic[TASK_TOPIC_MAX + 1];
	long long *counts;
};

struct sched {
	struct db_job job; /* first: the pool hands it back */
	struct manager *mg;
	struct evhttp_request *http; /* NULL: the gauge's sample */
	int64_t now, from, to, step;
	size_t nsteps;
	char topic[TASK_TOPIC_MAX + 1]; /* "" : all topics */
	int by_topic;
	int64_t redis_until; /* counted in Redis before this; from: none */
	int redis_out;
	int redis_failed;
	long long *counts;
	long long *redis_counts;
	struct sched_topic *topics;
	size_t ntopics;
	int truncated;
	unsigned int db_errno;
};

/* max_statement_time: SCHED_DB_TIMEOUT_S */
static const char SQL_SCHED_TOPIC[] =
	"SET STATEMENT max_statement_time = 10 FOR "
	"SELECT FLOOR((due_at - ?) / ?), COUNT(*) FROM tasks "
	"FORCE INDEX (by_topic) WHERE topic = ? AND status = 'scheduled' "
	"AND due_at >= ? AND due_at < ? GROUP BY 1 ORDER BY NULL";

/* The topics with scheduled tasks in a range: MIN() keeps it a loose
 * index scan of by_topic ("Using index for group-by"). */
static const char SQL_SCHED_TOPICS[] =
	"SET STATEMENT max_statement_time = 10 FOR "
	"SELECT topic, MIN(due_at) FROM tasks FORCE INDEX (by_topic) "
	"WHERE status = 'scheduled' AND due_at >= ? AND due_at < ? "
	"GROUP BY topic ORDER BY topic LIMIT ?";

static void sched_db_done_cb(struct db_job *job, int status, const char *err);

static void
sched_free(struct sched *s)
{
	for (size_t i = 0; i < s->ntopics; i++)
		xfree(s->topics[i].counts);
	xfree(s->topics);
	xfree(s->counts);
	xfree(s->redis_counts);
	xfree(s);
}

/* Adds the rows (step index, count) of a grouped count to counts. */
static void
add_rows(const struct db_rows *rows, long long *counts, size_t nsteps)
{
	for (size_t i = 0; i < rows->nrows; i++) {
		long long k = db_rows_int(rows, i, 0);

		if (k >= 0 && (size_t)k < nsteps)
			counts[k] += db_rows_int(rows, i, 1);
	}
}

static int
count_db(struct db_conn *c, const struct sched *s, const char *topic,
	 int64_t from, long long *counts)
{
	struct db_params p;
	struct db_rows rows = {0};
	int rc;

	db_params_init(&p, (size_t)s->mg->nslots + 4);
	db_params_int(&p, s->from);
	db_params_int(&p, s->step);
	if (topic != NULL) {
		db_params_str(&p, topic);
	} else {
		for (int i = 0; i < s->mg->nslots; i++)
			db_params_int(&p, i);
	}
	db_params_int(&p, from);
	db_params_int(&p, s->to);
	rc = db_query(
		c, topic != NULL ? SQL_SCHED_TOPIC : s->mg->schedule->sql_slots,
		&p, &rows);
	db_params_free(&p);
	if (rc == 0)
		add_rows(&rows, counts, s->nsteps);
	db_rows_free(&rows);
	return rc;
}

static int
list_topics(struct db_conn *c, struct sched *s)
{
	struct db_params p;
	struct db_rows rows = {0};
	int rc;

	db_params_init(&p, 3);
	db_params_int(&p, s->from);
	db_params_int(&p, s->to);
	db_params_int(&p, SCHED_TOPICS_MAX + 1);
	rc = db_query(c, SQL_SCHED_TOPICS, &p, &rows);
	db_params_free(&p);
	if (rc == 0) {
		s->truncated = rows.nrows > SCHED_TOPICS_MAX;
		s->ntopics = s->truncated ? SCHED_TOPICS_MAX : rows.nrows;
		s->topics = xcalloc(s->ntopics + 1, sizeof(*s->topics));
		for (size_t i = 0; i < s->ntopics; i++) {
			snprintf(s->topics[i].topic, sizeof(s->topics[i].topic),
				 "%s", db_rows_get(&rows, i, 0, NULL));
			s->topics[i].counts =
				xcalloc(s->nsteps, sizeof(long long));
		}
	}
	db_rows_free(&rows);
	return rc;
}

/* On a pool thread: the DB part of the counts. */
static int
sched_db_run(struct db_conn *c, struct db_job *job)
{
	struct sched *s = (struct sched *)job;
	int64_t from = s->redis_failed ? s->from : s->redis_until;
	int rc = 0;

	if (from < s->to)
		rc = count_db(c, s, s->topic[0] ? s->topic : NULL, from,
			      s->counts);
	if (rc == 0 && s->by_topic)
		rc = list_topics(c, s);
	for (size_t i = 0; rc == 0 && i < s->ntopics; i++)
		rc = count_db(c, s, s->topics[i].topic, s->from,
			      s->topics[i].counts);
	if (rc < 0)
		s->db_errno = db_conn_errno(c);
	return rc;
}

static json_t *
counts_json(const long long *counts, size_t n, long long *total)
{
	json_t *a = json_array();

	*total = 0;
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(a, json_integer(counts[i]));
		*total += counts[i];
	}
	return a;
}

static void
sched_reply(struct sched *s)
{
	long long total, t;
	json_t *out, *counts = counts_json(s->counts, s->nsteps, &total);

	out = json_pack("{s:I, s:I, s:I, s:I, s:I, s:o, s:I}", "at",
			(json_int_t)s->now, "from", (json_int_t)s->from, "to",
			(json_int_t)s->to, "step", (json_int_t)s->step, "steps",
			(json_int_t)s->nsteps, "counts", counts, "total",
			(json_int_t)total);
	json_object_set_new(out, "topic",
			    s->topic[0] ? json_string(s->topic) : json_null());
	json_object_set_new(out, "redis_until",
			    !s->redis_failed && s->redis_until > s->from
				    ? json_integer(s->redis_until)
				    : json_null());
	if (s->by_topic) {
		json_t *arr = json_array();

		for (size_t i = 0; i < s->ntopics; i++) {
			json_t *c =
				counts_json(s->topics[i].counts, s->nsteps, &t);

			json_array_append_new(
				arr, json_pack("{s:s, s:I, s:o}", "topic",
					       s->topics[i].topic, "total",
					       (json_int_t)t, "counts", c));
		}
		json_object_set_new(out, "topics", arr);
		json_object_set_new(out, "truncated",
				    json_boolean(s->truncated));
	}
	http_reply_json(s->http, 200, out);
}

static void
sched_db_done_cb(struct db_job *job, int status, const char *err)
{
	struct sched *s = (struct sched *)job;
	struct manager *mg = s->mg;

	if (s->http == NULL) {
		long long total = 0;

		for (size_t i = 0; i < s->nsteps; i++)
			total += s->counts[i];
		metric_set(mg->schedule->next_minute,
			   status < 0 ? NAN : (double)total);
		mg->schedule->sampling = 0;
	} else if (status < 0 && s->db_errno == DB_ER_STATEMENT_TIMEOUT) {
		http_reply_error(s->http, 503, "unavailable", NULL,
				 "counting took longer than %d s: narrow the "
				 "range or give a topic",
				 SCHED_DB_TIMEOUT_S);
		mg->inflight--;
	} else if (status < 0) {
		http_reply_error(s->http, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
		mg->inflight--;
	} else {
		sched_reply(s);
		mg->inflight--;
	}
	sched_free(s);
}

static void
sched_db_start(struct sched *s)
{
	if (s->http == NULL && s->mg->schedule->stopped) {
		sched_free(s);
		return;
	}
	if (!s->redis_failed && s->redis_until > s->from) {
		for (size_t i = 0; i < s->nsteps; i++)
			s->counts[i] += s->redis_counts[i];
	}
	s->job.run = sched_db_run;
	s->job.done_cb = sched_db_done_cb;
	db_pool_submit(s->mg->db, &s->job);
}

static void
sched_redis_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct sched *s = arg;

	(void)r;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
		s->redis_failed = 1;
	} else {
		for (size_t i = 0; i < reply->elements && i < s->nsteps; i++)
			if (reply->element[i]->type == REDIS_REPLY_INTEGER)
				s->redis_counts[i] +=
					reply->element[i]->integer;
			else
				s->redis_failed = 1;
	}
	if (--s->redis_out == 0)
		sched_db_start(s);
}

/* Counts s: Redis first (its part of the range), then the DB. */
static void
sched_start(struct sched *s)
{
	struct manager *mg = s->mg;
	int64_t near = mg->bucket_near_ms - SCHED_REDIS_MARGIN_MS;
	int64_t until = s->now + near < s->to ? s->now + near : s->to;
	size_t k;

	s->counts = xcalloc(s->nsteps, sizeof(long long));
	s->redis_until = s->from;
	if (s->topic[0] || near <= 0 || until <= s->from ||
	    !redis_up(mg->redis)) {
		s->redis_failed = 1;
		sched_db_start(s);
		return;
	}
	s->redis_until = until;
	k = (size_t)((until - s->from + s->step - 1) / s->step);
	s->redis_counts = xcalloc(s->nsteps, sizeof(long long));
	s->redis_out = 1; /* ours, dropped below */
	for (int i = 0; i < mg->nslots; i++) {
		struct slot_eval ev;

		slot_eval_init(&ev, SCRIPT_SCHED_COUNT, i, "dm");
		redis_args_addint(&ev.a, s->from);
		redis_args_addint(&ev.a, s->step);
		redis_args_addint(&ev.a, (long long)k);
		redis_args_addint(&ev.a, until);
		s->redis_out++;
		if (redis_eval_args(mg->redis, sched_redis_cb, s, &ev.a) < 0) {
			s->redis_out--;
			s->redis_failed = 1;
		}
		slot_eval_free(&ev);
	}
	if (--s->redis_out == 0)
		sched_db_start(s);
}

/* A query value as ms (or a count): digits only, no sign, no overflow. */
static int
param_int(const char *v, int64_t *out)
{
	char *end;
	long long n;

	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno != 0 || *end != '\0' || n > INT64_MAX / 4)
		return -1;
	*out = n;
	return 0;
}

static const char *const known_params[] = {"from",  "to", "step",
					   "topic", "by", NULL};

/* Fills s from the query; -1 with the 400 answered. */
static int
sched_parse(struct sched *s, struct evhttp_request *req)
{
	const char *q =
		evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	struct evkeyvalq kv;
	const char *v, *bad = NULL, *why = NULL;
	int64_t range;

	s->step = SCHED_DEFAULT_STEP_MS;
	s->from = s->now;
	s->to = -1;
	TAILQ_INIT(&kv);
	if (q != NULL &&
	    (evhttp_parse_query_str(q, &kv) != 0 || strstr(q, "%00") != NULL)) {
		http_reply_error(req, 400, "invalid_value", NULL,
				 "malformed query string");
		evhttp_clear_headers(&kv);
		return -1;
	}
	if (http_query_known(req, known_params) < 0) {
		evhttp_clear_headers(&kv);
		return -1;
	}
	if ((v = evhttp_find_header(&kv, "from")) != NULL &&
	    param_int(v, &s->from) < 0)
		bad = "from", why = "from must be ms since the epoch";
	else if ((v = evhttp_find_header(&kv, "to")) != NULL &&
		 param_int(v, &s->to) < 0)
		bad = "to", why = "to must be ms since the epoch";
	else if ((v = evhttp_find_header(&kv, "step")) != NULL &&
		 param_int(v, &s->step) < 0)
		bad = "step", why = "step must be an integer (ms)";
	else if (v != NULL && s->step < SCHED_STEP_MIN_MS)
		bad = "step", why = "step must be at least 1000 (ms)";
	else if ((v = evhttp_find_header(&kv, "topic")) != NULL &&
		 !task_topic_valid(v, strlen(v)))
		bad = "topic", why = "not a valid topic";
	else if ((v = evhttp_find_header(&kv, "by")) != NULL &&
		 strcmp(v, "topic") != 0)
		bad = "by", why = "by takes the value topic";
	if (bad == NULL) {
		if ((v = evhttp_find_header(&kv, "topic")) != NULL)
			snprintf(s->topic, sizeof(s->topic), "%s", v);
		s->by_topic = evhttp_find_header(&kv, "by") != NULL;
		if (s->to < 0)
			s->to = s->from + SCHED_DEFAULT_RANGE_MS;
		range = s->to - s->from;
		if (s->by_topic && s->topic[0])
			bad = "by", why = "by=topic lists every topic: give "
					  "it or topic, not both";
		else if (range <= 0)
			bad = "to", why = "to must be later than from";
		else if (range > SCHED_RANGE_MAX_MS)
			bad = "to", why = "the range (to - from) is at most "
					  "400 days";
		else if ((range + s->step - 1) / s->step >
			 (s->by_topic ? SCHED_TOPIC_STEPS_MAX
				      : SCHED_STEPS_MAX))
			bad = "step", why = s->by_topic
						    ? "at most 1000 steps with "
						      "by=topic: a larger step"
						    : "at most 10000 steps: a "
						      "larger step";
		else
			s->nsteps = (size_t)((range + s->step - 1) / s->step);
	}
	evhttp_clear_headers(&kv);
	if (bad != NULL) {
		http_reply_error(req, 400, "invalid_value", bad, "%s", why);
		return -1;
	}
	return 0;
}

void
schedule_get(struct manager *mg, struct evhttp_request *req)
{
	struct sched *s = xcalloc(1, sizeof(*s));

	s->mg = mg;
	s->http = req;
	s->now = clock_now_ms();
	if (sched_parse(s, req) < 0) {
		xfree(s);
		return;
	}
	mg->inflight++;
	sched_start(s);
}

static void
sample_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct schedule *sc = arg;
	struct sched *s;

	(void)fd;
	(void)what;
	if (sc->sampling)
		return; /* the last round is still out */
	sc->sampling = 1;
	s = xcalloc(1, sizeof(*s));
	s->mg = sc->mg;
	s->now = clock_now_ms();
	s->from = s->now;
	s->to = s->now + 60000;
	s->step = 60000;
	s->nsteps = 1;
	sched_start(s);
}

void
schedule_start(struct manager *mg)
{
	struct schedule *sc = xcalloc(1, sizeof(*sc));
	struct timeval tv = {SCHED_SAMPLE_INTERVAL_S, 0};
	size_t len = 0, cap = 512 + 2 * (size_t)mg->nslots;
	char *sql = xmalloc(cap);

	len += (size_t)snprintf(sql + len, cap - len,
				"SET STATEMENT max_statement_time = %d FOR "
				"SELECT FLOOR((due_at - ?) / ?), COUNT(*) "
				"FROM tasks FORCE INDEX (due_by_slot) "
				"WHERE slot IN (",
				SCHED_DB_TIMEOUT_S);
	for (int i = 0; i < mg->nslots; i++)
		len += (size_t)snprintf(sql + len, cap - len, "%s?",
					i ? "," : "");
	snprintf(sql + len, cap - len,
		 ") AND status = 'scheduled' AND due_at >= ? AND due_at < ? "
		 "GROUP BY 1 ORDER BY NULL");
	sc->sql_slots = sql;
	sc->mg = mg;
	mg->schedule = sc;
	sc->next_minute = metrics_register(
		METRIC_GAUGE, "prophet_schedule_booked_next_minute",
		"Scheduled tasks due in the next 60 s, all topics (sampled "
		"every 5 s, GET /v1/schedule)",
		NULL, 0);
	metric_set(sc->next_minute, NAN);
	sc->tick = event_new(mg->base, -1, EV_PERSIST, sample_tick_cb, sc);
	event_add(sc->tick, &tv);
	sample_tick_cb(-1, 0, sc);
}

/* After the DB pool is gone (no job of ours is left). */
void
schedule_destroy(struct manager *mg)
{
	struct schedule *sc = mg->schedule;

	if (sc == NULL)
		return;
	if (sc->tick != NULL)
		event_free(sc->tick);
	xfree(sc->sql_slots);
	xfree(sc);
	mg->schedule = NULL;
}

void
schedule_stop(struct manager *mg)
{
	if (mg->schedule == NULL)
		return;
	mg->schedule->stopped = 1;
	if (mg->schedule->tick != NULL)
		event_free(mg->schedule->tick);
	mg->schedule->tick = NULL;
}
