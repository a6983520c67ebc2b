#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "auth.h"
#include "cfg.h"
#include "daemon.h"
#include "db.h"
#include "http.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "slot.h"
#include "utf8.h"
#include "xmalloc.h"

/*
 * Bulk cancel and reschedule (issue 22; docs/architecture.md, "Bulk
 * jobs"). POST /v1/tasks/bulk {"filter":{...}, "action":..., ...} counts
 * the scheduled tasks a filter matches (dry run) or records a job in
 * bulk_jobs and answers 202; GET /v1/admin/jobs[/{id}] shows jobs.
 *
 * A job runs in chunks of task.bulk_chunk tasks in primary-key order,
 * each exactly as the single-task cancel and reschedule of tasks.c do it,
 * only for many tasks at once: the chunk is read, the decision taken in
 * Redis per slot (one script call a slot, atomic with the claim script's
 * view: a task in flight is reported as firing and left alone), then one
 * transaction locks the rows, changes those still scheduled (and, for a
 * reschedule, still due when they were read), writes a state-log row
 * each, and moves the job's cursor and counts. A manager killed at any
 * point leaves the cursor before the chunk it was doing, and the chunk
 * is done again: its Redis steps are idempotent, its DB changes happen
 * once (conditional on scheduled, in the transaction that moves the
 * cursor).
 *
 * One manager runs jobs at a time, oldest first: it takes the oldest
 * running job whose lease is free or its own (the lease is renewed by
 * every chunk), raising the job's epoch; every chunk's transaction locks
 * the job row and stops if the epoch is no longer its own. A manager
 * restarted on the same host and port takes its job back at once, others
 * once the lease ran out.
 */

#define BULK_LEASE_MS 15000
#define BULK_TICK_MS 1000
#define BULK_RETRY_MS 1000
#define FIRING_IDS_MAX 100
#define FILTER_TEXT_MAX 4096
#define JOBS_LIST_MAX 50

enum bulk_action { BA_CANCEL, BA_SHIFT, BA_SET_DUE, BA__COUNT };
static const char *const action_names[BA__COUNT] = {"cancel", "shift",
						    "set_due"};
enum bulk_outcome { BO_CHANGED, BO_FIRING, BO_SKIPPED, BO__COUNT };
static const char *const outcome_names[BO__COUNT] = {"changed", "firing",
						     "skipped"};

/* A task of a chunk, before its Redis step: BO__COUNT. */
#define BO_PENDING BO__COUNT

struct bulk_filter {
	int all;
	char topic[TASK_TOPIC_MAX + 1];
	int has_from, has_to;
	int64_t due_from, due_to;
	char prefix[TASK_ID_MAX + 1];
	char prefix_hi[TASK_ID_MAX + 1];
	char *key; /* NULL: any */
	size_t keylen;
};

struct bulk_spec {
	enum bulk_action action;
	struct bulk_filter f;
	int64_t by_ms;
	int64_t due_at;
	char *filter_text; /* canonical JSON of the filter */
};

static void
spec_clear(struct bulk_spec *s)
{
	xfree(s->f.key);
	xfree(s->filter_text);
	s->f.key = NULL;
	s->filter_text = NULL;
}

/* Filters and requests ------------------------------------------------ */

/* "filter.<name>" if the name is short and printable, else "filter". */
static void
filter_field(char *out, size_t len, const char *name)
{
	size_t n = strlen(name);
	int ok = n > 0 && n <= 32;

	for (size_t i = 0; ok && i < n; i++)
		ok = name[i] > 32 && name[i] < 127;
	snprintf(out, len, ok ? "filter.%s" : "filter", name);
}

static int
filter_int(const json_t *v, int64_t *out)
{
	if (!json_is_integer(v))
		return -1;
	*out = json_integer_value(v);
	return 0;
}

/*
 * The filter object into f; -1 with the field and a message. An empty
 * filter is refused: {"all": true} says "every scheduled task".
 */
static int
filter_parse(const json_t *in, struct bulk_filter *f, char *field, size_t flen,
	     char *msg, size_t mlen)
{
	const char *k;
	json_t *v;
	int any = 0;

	memset(f, 0, sizeof(*f));
	snprintf(field, flen, "filter");
	if (in == NULL) {
		snprintf(msg, mlen, "filter is required");
		return -1;
	}
	if (!json_is_object(in)) {
		snprintf(msg, mlen, "filter must be an object");
		return -1;
	}
	json_object_foreach ((json_t *)in, k, v) {
		filter_field(field, flen, k);
		if (!strcmp(k, "all")) {
			if (!json_is_true(v)) {
				snprintf(msg, mlen,
					 "all must be true (or left out)");
				return -1;
			}
			f->all = 1;
		} else if (!strcmp(k, "topic")) {
			const char *s = json_string_value(v);

			if (s == NULL || !task_topic_valid(s, strlen(s))) {
				snprintf(msg, mlen, "not a valid topic");
				return -1;
			}
			snprintf(f->topic, sizeof(f->topic), "%s", s);
			any = 1;
		} else if (!strcmp(k, "due_from")) {
			if (filter_int(v, &f->due_from) < 0) {
				snprintf(msg, mlen,
					 "due_from must be ms since the epoch");
				return -1;
			}
			f->has_from = any = 1;
		} else if (!strcmp(k, "due_to")) {
			if (filter_int(v, &f->due_to) < 0) {
				snprintf(msg, mlen,
					 "due_to must be ms since the epoch");
				return -1;
			}
			f->has_to = any = 1;
		} else if (!strcmp(k, "status")) {
			if (!json_is_string(v) ||
			    strcmp(json_string_value(v), "scheduled") != 0) {
				snprintf(msg, mlen,
					 "only scheduled tasks can be "
					 "cancelled or rescheduled: status "
					 "must be \"scheduled\"");
				return -1;
			}
		} else if (!strcmp(k, "id_prefix")) {
			const char *s = json_string_value(v);
			size_t n = s ? strlen(s) : 0;

			if (s == NULL || !task_id_valid(s, n)) {
				snprintf(msg, mlen,
					 "id_prefix must be 1..%d characters "
					 "of a task id",
					 TASK_ID_MAX);
				return -1;
			}
			memcpy(f->prefix, s, n + 1);
			/* The ids that start with it: [prefix, prefix
			 * with its last byte + 1), in ascii_bin order. */
			memcpy(f->prefix_hi, s, n + 1);
			f->prefix_hi[n - 1]++;
			any = 1;
		} else if (!strcmp(k, "key")) {
			const char *s = json_string_value(v);
			size_t n = s ? json_string_length(v) : 0;

			if (s == NULL || n == 0 || n > TASK_KEY_MAX) {
				snprintf(msg, mlen,
					 "key must be a string of 1..%d "
					 "bytes",
					 TASK_KEY_MAX);
				return -1;
			}
			xfree(f->key);
			f->key = xstrndup(s, n);
			f->keylen = n;
			any = 1;
		} else {
			snprintf(msg, mlen,
				 "unknown filter key: give topic, due_from, "
				 "due_to, status, id_prefix, key or all");
			return -1;
		}
	}
	snprintf(field, flen, "filter.due_to");
	if (f->has_from && f->has_to && f->due_from >= f->due_to) {
		snprintf(msg, mlen, "due_to must be after due_from");
		return -1;
	}
	snprintf(field, flen, "filter");
	if (!any && !f->all) {
		snprintf(msg, mlen,
			 "an empty filter would match every scheduled task: "
			 "give {\"all\": true} to mean that");
		return -1;
	}
	return 0;
}

/* The filter's conditions; the values are bound by filter_bind. */
static char *
filter_sql(const char *head, const struct bulk_filter *f, const char *tail)
{
	return xasprintf("%s%s%s%s%s%s%s", head,
			 f->topic[0] ? " AND topic = ?" : "",
			 f->has_from ? " AND due_at >= ?" : "",
			 f->has_to ? " AND due_at < ?" : "",
			 f->prefix[0] ? " AND id >= ? AND id < ?" : "",
			 f->key ? " AND msg_key = ?" : "", tail);
}

static void
filter_bind(struct db_params *p, const struct bulk_filter *f)
{
	if (f->topic[0])
		db_params_str(p, f->topic);
	if (f->has_from)
		db_params_int(p, f->due_from);
	if (f->has_to)
		db_params_int(p, f->due_to);
	if (f->prefix[0]) {
		db_params_str(p, f->prefix);
		db_params_str(p, f->prefix_hi);
	}
	if (f->key)
		db_params_blob(p, f->key, f->keylen);
}

static int
spec_fail(struct evhttp_request *req, const char *field, const char *msg)
{
	if (req != NULL)
		http_reply_error(req, 400, "invalid_value", field, "%s", msg);
	return -1;
}

/*
 * A request (or a stored job: req NULL, no range checks against now)
 * into s; -1 after the 400 answer.
 */
static int
spec_parse(struct manager *mg, struct evhttp_request *req, const json_t *in,
	   struct bulk_spec *s, int *dry_run)
{
	const json_t *a = json_object_get(in, "action"),
		     *by = json_object_get(in, "by_ms"),
		     *due = json_object_get(in, "due_at"),
		     *dry = json_object_get(in, "dry_run");
	char field[48], msg[256];
	const char *k;
	json_t *v;
	int64_t now = clock_now_ms(), max = mg->limits.max_delay_ms;

	memset(s, 0, sizeof(*s));
	json_object_foreach ((json_t *)in, k, v) {
		if (strcmp(k, "filter") && strcmp(k, "action") &&
		    strcmp(k, "by_ms") && strcmp(k, "due_at") &&
		    strcmp(k, "dry_run")) {
			filter_field(field, sizeof(field), k);
			/* The member's own name, without "filter.". */
			return spec_fail(req,
					 field[6] == '.' ? field + 7 : NULL,
					 "unknown member: give filter, "
					 "action, by_ms, due_at, dry_run");
		}
	}
	if (!json_is_string(a))
		return spec_fail(req, "action",
				 "action must be cancel, shift or set_due");
	for (s->action = 0; s->action < BA__COUNT; s->action++)
		if (!strcmp(json_string_value(a), action_names[s->action]))
			break;
	if (s->action == BA__COUNT)
		return spec_fail(req, "action",
				 "action must be cancel, shift or set_due");
	if (dry != NULL && !json_is_boolean(dry))
		return spec_fail(req, "dry_run",
				 "dry_run must be true or false");
	if (dry_run != NULL)
		*dry_run = json_is_true(dry);
	if (by != NULL && s->action != BA_SHIFT)
		return spec_fail(req, "by_ms", "by_ms goes with action shift");
	if (due != NULL && s->action != BA_SET_DUE)
		return spec_fail(req, "due_at",
				 "due_at goes with action set_due");
	if (s->action == BA_SHIFT) {
		if (!json_is_integer(by) || json_integer_value(by) == 0 ||
		    json_integer_value(by) > max ||
		    json_integer_value(by) < -max) {
			snprintf(msg, sizeof(msg),
				 "shift needs by_ms, a non-zero integer of "
				 "at most %lld ms either way",
				 (long long)max);
			return spec_fail(req, "by_ms", msg);
		}
		s->by_ms = json_integer_value(by);
	}
	if (s->action == BA_SET_DUE) {
		if (!json_is_integer(due) || json_integer_value(due) < 0 ||
		    (req != NULL && json_integer_value(due) > now + max)) {
			snprintf(msg, sizeof(msg),
				 "set_due needs due_at, ms since the epoch, "
				 "at most %lld ms ahead",
				 (long long)max);
			return spec_fail(req, "due_at", msg);
		}
		s->due_at = json_integer_value(due);
	}
	if (filter_parse(json_object_get(in, "filter"), &s->f, field,
			 sizeof(field), msg, sizeof(msg)) < 0) {
		spec_clear(s);
		return spec_fail(req, field, msg);
	}
	s->filter_text = json_dumps(json_object_get(in, "filter"),
				    JSON_COMPACT | JSON_SORT_KEYS);
	if (strlen(s->filter_text) > FILTER_TEXT_MAX) {
		spec_clear(s);
		return spec_fail(req, "filter", "filter too large");
	}
	return 0;
}

/* Who asked: the token's fingerprint (its SHA-256, as a tokens file may
 * store it, cut to 16 hex digits), or anonymous without tokens. */
static void
requester(struct manager *mg, struct evhttp_request *req, char *out, size_t len)
{
	const char *h = evhttp_find_header(
		evhttp_request_get_input_headers(req), "Authorization");
	char hash[AUTH_HASH_TEXT_LEN];

	if (!auth_enabled(mg->auth) || h == NULL ||
	    strncasecmp(h, "Bearer ", 7) != 0) {
		snprintf(out, len, "anonymous");
		return;
	}
	h += 7;
	while (*h == ' ')
		h++;
	auth_token_hash(h, strlen(h), hash);
	snprintf(out, len, "token %.23s", hash);
}

/* Job rows as JSON ------------------------------------------------------ */

#define SQL_BULK_COLS                                                       \
	"id, action, filter, by_ms, due_at, who, state, total, cursor_id, " \
	"scanned, changed, firing, skipped, firing_ids, chunks, resumed, "  \
	"epoch, owner, lease_until, created_at, started_at, finished_at, "  \
	"updated_at, cancelled_by"
enum {
	BC_ID,
	BC_ACTION,
	BC_FILTER,
	BC_BY_MS,
	BC_DUE_AT,
	BC_WHO,
	BC_STATE,
	BC_TOTAL,
	BC_CURSOR,
	BC_SCANNED,
	BC_CHANGED,
	BC_FIRING,
	BC_SKIPPED,
	BC_FIRING_IDS,
	BC_CHUNKS,
	BC_RESUMED,
	BC_EPOCH,
	BC_OWNER,
	BC_LEASE,
	BC_CREATED,
	BC_STARTED,
	BC_FINISHED,
	BC_UPDATED,
	BC_CANCELLED_BY
};

static json_t *
cell_int_or_null(const struct db_rows *r, size_t i, size_t col)
{
	return db_rows_get(r, i, col, NULL)
		       ? json_integer(db_rows_int(r, i, col))
		       : json_null();
}

static json_t *
job_json(const struct db_rows *r, size_t i)
{
	const char *st = db_rows_get(r, i, BC_STATE, NULL);
	const char *fi = db_rows_get(r, i, BC_FIRING_IDS, NULL);
	json_t *j = json_object(), *f;

	json_object_set_new(j, "job", json_integer(db_rows_int(r, i, BC_ID)));
	json_object_set_new(j, "action",
			    json_string(db_rows_get(r, i, BC_ACTION, NULL)));
	f = json_loads(db_rows_get(r, i, BC_FILTER, NULL), 0, NULL);
	json_object_set_new(j, "filter", f ? f : json_null());
	if (db_rows_get(r, i, BC_BY_MS, NULL))
		json_object_set_new(j, "by_ms",
				    json_integer(db_rows_int(r, i, BC_BY_MS)));
	if (db_rows_get(r, i, BC_DUE_AT, NULL))
		json_object_set_new(j, "due_at",
				    json_integer(db_rows_int(r, i, BC_DUE_AT)));
	json_object_set_new(j, "who",
			    utf8_json_str(db_rows_get(r, i, BC_WHO, NULL)));
	json_object_set_new(j, "state", json_string(st));
	/* finished: its last chunk written, or cancelled */
	json_object_set_new(j, "done", json_boolean(strcmp(st, "running")));
	json_object_set_new(j, "cancelled_by",
			    db_rows_get(r, i, BC_CANCELLED_BY, NULL)
				    ? utf8_json_str(db_rows_get(
					      r, i, BC_CANCELLED_BY, NULL))
				    : json_null());
	json_object_set_new(j, "total",
			    json_integer(db_rows_int(r, i, BC_TOTAL)));
	json_object_set_new(j, "scanned",
			    json_integer(db_rows_int(r, i, BC_SCANNED)));
	json_object_set_new(j, "changed",
			    json_integer(db_rows_int(r, i, BC_CHANGED)));
	json_object_set_new(j, "firing",
			    json_integer(db_rows_int(r, i, BC_FIRING)));
	json_object_set_new(j, "skipped",
			    json_integer(db_rows_int(r, i, BC_SKIPPED)));
	f = fi ? json_loads(fi, 0, NULL) : NULL;
	json_object_set_new(j, "firing_ids", f ? f : json_array());
	json_object_set_new(j, "chunks",
			    json_integer(db_rows_int(r, i, BC_CHUNKS)));
	json_object_set_new(j, "resumed",
			    json_integer(db_rows_int(r, i, BC_RESUMED)));
	json_object_set_new(j, "cursor",
			    json_string(db_rows_get(r, i, BC_CURSOR, NULL)));
	json_object_set_new(
		j, "owner",
		db_rows_get(r, i, BC_OWNER, NULL)
			? utf8_json_str(db_rows_get(r, i, BC_OWNER, NULL))
			: json_null());
	json_object_set_new(j, "created_at",
			    json_integer(db_rows_int(r, i, BC_CREATED)));
	json_object_set_new(j, "started_at",
			    cell_int_or_null(r, i, BC_STARTED));
	json_object_set_new(j, "finished_at",
			    cell_int_or_null(r, i, BC_FINISHED));
	json_object_set_new(j, "updated_at",
			    json_integer(db_rows_int(r, i, BC_UPDATED)));
	return j;
}

/* The runner ------------------------------------------------------------ */

/* A task of the chunk being done. */
struct item {
	char *id;
	int slot;
	int series; /* recurring (a cancel ends the series) */
	int64_t old_due;
	int64_t new_due;
	char *topic;   /* its held set's, if the topic is paused */
	char *payload; /* reschedule: "" beyond the horizon */
	char *note;    /* its log row's (bound by pointer) */
	int outcome;   /* BO_*, BO_PENDING until decided */
	int64_t score; /* cancel: what Redis removed (uncancel) */
	int redis_changed;
	int locked_cancelled; /* the row was cancelled by someone else */
	int far;	      /* cancel: beyond every index, no Redis step */
};

struct job_state {
	int64_t id;
	int64_t epoch;
	struct bulk_spec spec;
	char who[130];
	char cursor[TASK_ID_MAX + 1];
	json_t *firing_ids;
	long long counts[BO__COUNT];
	long long scanned;
	int64_t started_mono;
	/* read, Redis, write: where a job's time goes (a chunk's read and
	 * Redis step overlap the previous chunk's write) */
	long long step_us[3];
	long long write_us[4];
};

/* The chunk after the one being written. */
enum next_state { NX_NONE, NX_READING, NX_DECIDING, NX_READY, NX_EMPTY };

struct bulk_runner {
	struct manager *mg;
	struct db_pool *db; /* a connection of its own */
	char id[300];
	int chunk, pause_ms;
	struct event *tick_ev;
	struct event *step_ev;
	int out;	   /* DB jobs out */
	int redis_pending; /* replies awaited */
	int redis_failed;
	int64_t redis_t0;
	int stopping;
	int cancelled;	  /* the job lost was cancelled */
	int64_t released; /* that job, put back: its owner cleared next */
	int dead;	  /* destroyed while Redis replies were awaited */
	int lost;	  /* a step found the job taken over */
	int retry;	  /* a step failed: on from the job's cursor, later */
	int wrote;	  /* a chunk was just written (task.bulk_pause_ms) */
	struct job_state *job;
	enum next_state next;
	struct item *items; /* the next chunk, read or decided */
	size_t nitems;
	struct metric *tasks_total;
	struct metric *running;
	const char *label_sets[BA__COUNT * BO__COUNT];
	char label_buf[BA__COUNT * BO__COUNT][64];
};

enum rjob_kind { RJ_TAKE, RJ_READ, RJ_WRITE, RJ_FINISH };

struct runner_job {
	struct db_job job;
	struct bulk_runner *p;
	enum rjob_kind kind;
	/* copies of what run() needs */
	char owner[300];
	int64_t job_id, epoch;
	int chunk;
	struct bulk_spec *spec; /* borrowed: the loop leaves it alone */
	char cursor[TASK_ID_MAX + 1];
	char note[200];
	char *firing_text;
	int64_t horizon_edge;
	int64_t out_of_reach; /* cancel: tasks_out_of_reach() at the read */
	int64_t max_due;
	char retry_topic[TASK_TOPIC_MAX + 1]; /* notifier.retry_topic */
	struct item *items; /* RJ_READ fills, RJ_WRITE decides */
	size_t nitems;
	/* results */
	int fenced;
	int cancelled;	  /* fenced by POST /v1/admin/jobs/{id}/cancel */
	int64_t released; /* take: the cancelled job this runner put back */
	int abandoned;	  /* take: cancelled jobs found abandoned */
	struct {
		int slot;
		char *id;
	} * repair; /* take: tasks whose tombstones go (abandoned_window) */
	size_t nrepair;
	struct db_rows rows;
	long long counts[BO__COUNT];
	long long run_us;      /* the step's time on the pool thread */
	long long write_us[4]; /* lock, update, log rows, cursor + commit */
};

static void runner_step(struct bulk_runner *p);
static void runner_later(struct bulk_runner *p, int ms);

static void
items_free(struct item *it, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		xfree(it[i].id);
		xfree(it[i].payload);
		xfree(it[i].topic);
		xfree(it[i].note);
	}
	xfree(it);
}

static void
job_state_free(struct job_state *js)
{
	if (js == NULL)
		return;
	spec_clear(&js->spec);
	json_decref(js->firing_ids);
	xfree(js);
}

/* Sub-lists of ids, so that the connection prepares few texts (a chunk
 * of the default 2,000 tasks is one statement). */
static const size_t in_sizes[] = {2000, 500, 100, 20, 4, 1};

struct in_arg {
	const struct item *items;
	const size_t *idx;
	const int64_t *lead;
	size_t nlead;
	void (*row_cb)(const struct db_rows *r, void *arg);
	void *arg;
};

static void
in_bind(struct db_params *p, size_t from, size_t m, void *arg)
{
	struct in_arg *a = arg;

	for (size_t i = 0; i < a->nlead; i++)
		db_params_int(p, a->lead[i]);
	for (size_t i = 0; i < m; i++)
		db_params_str(p, a->items[a->idx[from + i]].id);
}

static void
in_rows(struct db_rows *r, void *arg)
{
	struct in_arg *a = arg;

	a->row_cb(r, a->arg);
	db_rows_free(r);
}

/*
 * prefix + IN list + suffix over the ids of items[idx[0..n)], nlead
 * integers bound first; with rows, each result is handed to row_cb,
 * else the affected rows are added to *affected.
 */
static int
in_run(struct db_conn *c, const char *prefix, const char *suffix,
       const struct item *items, const size_t *idx, size_t n,
       const int64_t *lead, size_t nlead,
       void (*row_cb)(const struct db_rows *r, void *arg), void *arg,
       unsigned long long *affected)
{
	struct in_arg a = {items, idx, lead, nlead, row_cb, arg};
	struct db_list l = {
		.prefix = prefix,
		.item = "?",
		.suffix = suffix,
		.sizes = in_sizes,
		.nsizes = sizeof(in_sizes) / sizeof(in_sizes[0]),
		.bind = in_bind,
		.rows_cb = row_cb != NULL ? in_rows : NULL,
		.arg = &a,
	};

	return db_run_list(c, &l, n, affected);
}

/* On the pool thread ----------------------------------------------------- */

static int
fence_ok(struct db_conn *c, struct runner_job *j)
{
	struct db_params p;
	struct db_rows rows;
	int rc;

	db_params_init(&p, 1);
	db_params_int(&p, j->job_id);
	rc = db_query(c,
		      "SELECT epoch, state FROM bulk_jobs WHERE id = ? FOR "
		      "UPDATE",
		      &p, &rows);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	j->fenced = rows.nrows != 1 || db_rows_int(&rows, 0, 0) != j->epoch;
	j->cancelled = rows.nrows == 1 &&
		       !strcmp(db_rows_get(&rows, 0, 1, NULL), "cancelled");
	db_rows_free(&rows);
	return 0;
}

/*
 * A cancel job abandoned mid-chunk: its runner's last Redis steps may
 * have tombstoned up to two chunks of tasks after the committed cursor
 * that the job will never cancel now. The scheduled tasks the filter
 * matches in a window of four chunks after the cursor are listed in
 * j->repair ("slot id" pairs): their tombstones are dropped before every
 * slot is rebuilt (runner_done_cb), so they are indexed again.
 */
static int
abandoned_window(struct db_conn *c, struct runner_job *j, int64_t id)
{
	struct bulk_filter f;
	struct db_params p;
	struct db_rows rows;
	char field[64], msg[200], cursor[TASK_ID_MAX + 1], *sql;
	json_t *fj;
	int rc;

	db_params_init(&p, 12);
	db_params_int(&p, id);
	rc = db_query(c,
		      "SELECT action, filter, cursor_id FROM bulk_jobs WHERE "
		      "id = ?",
		      &p, &rows);
	if (rc < 0 || rows.nrows != 1 ||
	    strcmp(db_rows_get(&rows, 0, 0, NULL), "cancel") != 0) {
		db_params_free(&p);
		if (rc == 0)
			db_rows_free(&rows);
		return rc; /* a reschedule's slots are all rebuilt: enough */
	}
	memset(&f, 0, sizeof(f));
	fj = json_loads(db_rows_get(&rows, 0, 1, NULL), 0, NULL);
	if (fj == NULL ||
	    filter_parse(fj, &f, field, sizeof(field), msg, sizeof(msg)) < 0) {
		json_decref(fj);
		xfree(f.key);
		db_rows_free(&rows);
		db_params_free(&p);
		return 0; /* recorded by a POST that parsed it: not here */
	}
	json_decref(fj);
	/* parameters are bound by pointer: the cursor copied out of rows */
	snprintf(cursor, sizeof(cursor), "%s", db_rows_get(&rows, 0, 2, NULL));
	db_rows_free(&rows);
	p.n = 0;
	db_params_str(&p, cursor);
	filter_bind(&p, &f);
	db_params_int(&p, 4LL * j->chunk);
	sql = filter_sql("SELECT slot, id FROM tasks FORCE INDEX (PRIMARY) "
			 "WHERE id > ? AND status = 'scheduled'",
			 &f, " ORDER BY id LIMIT ?");
	rc = db_query(c, sql, &p, &rows);
	xfree(sql);
	xfree(f.key);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	for (size_t i = 0; i < rows.nrows; i++) {
		j->repair = xrealloc(j->repair,
				     (j->nrepair + 1) * sizeof(*j->repair));
		j->repair[j->nrepair].slot = (int)db_rows_int(&rows, i, 0);
		j->repair[j->nrepair].id =
			xstrdup(db_rows_get(&rows, i, 1, NULL));
		j->nrepair++;
	}
	db_rows_free(&rows);
	return 0;
}

/* The oldest running job, if no other manager holds one. */
static int
take_run(struct db_conn *c, struct runner_job *j)
{
	struct db_rows rows;
	struct db_params p;
	int64_t now = clock_now_ms(), take = -1;
	int rc;

	if (db_begin(c) < 0)
		return -1;
	/*
	 * A cancelled job keeps its owner until the owner's runner has put
	 * back what the Redis steps of its unwritten chunks changed (the job
	 * this runner just gave up: j->released). One still owned by a
	 * manager whose lease ran out, or by this one in an earlier life,
	 * was abandoned mid-chunk: which tasks those steps changed is not
	 * known, so every slot's index is rebuilt from the DB (j->abandoned).
	 */
	if (db_query(c,
		     "SELECT id, owner, lease_until FROM bulk_jobs WHERE "
		     "state = 'cancelled' AND owner IS NOT NULL FOR UPDATE",
		     NULL, &rows) < 0)
		goto fail;
	for (size_t i = 0; i < rows.nrows; i++) {
		const char *o = db_rows_get(&rows, i, 1, NULL);
		int64_t id = db_rows_int(&rows, i, 0);
		int mine = !strcmp(o, j->owner);

		if (mine && id == j->released) {
			/* put back already */
		} else if (mine || db_rows_int(&rows, i, 2) < now) {
			j->abandoned++;
			if (abandoned_window(c, j, id) < 0) {
				db_rows_free(&rows);
				goto fail;
			}
		} else {
			continue; /* its runner is still at it */
		}
		db_params_init(&p, 1);
		db_params_int(&p, id);
		rc = db_exec(c,
			     "UPDATE bulk_jobs SET owner = NULL, lease_until "
			     "= 0 WHERE id = ?",
			     &p, NULL);
		db_params_free(&p);
		if (rc < 0) {
			db_rows_free(&rows);
			goto fail;
		}
	}
	db_rows_free(&rows);
	if (db_query(c,
		     "SELECT id, owner, lease_until FROM bulk_jobs WHERE "
		     "state = 'running' ORDER BY id FOR UPDATE",
		     NULL, &rows) < 0)
		goto fail;
	for (size_t i = 0; i < rows.nrows; i++) {
		const char *o = db_rows_get(&rows, i, 1, NULL);

		if (o != NULL && strcmp(o, j->owner) != 0 &&
		    db_rows_int(&rows, i, 2) > now) {
			take = -1; /* another manager runs jobs */
			break;
		}
		if (take < 0)
			take = db_rows_int(&rows, i, 0);
	}
	db_rows_free(&rows);
	if (take < 0)
		return db_commit(c);
	db_params_init(&p, 5);
	db_params_int(&p, now + BULK_LEASE_MS);
	db_params_int(&p, now);
	db_params_str(&p, j->owner);
	db_params_int(&p, now);
	db_params_int(&p, take);
	/* resumed counts the takes of a job begun before (assignments run
	 * left to right: started_at is still the old one there). */
	rc = db_exec(c,
		     "UPDATE bulk_jobs SET epoch = epoch + 1, lease_until = ?, "
		     "resumed = resumed + (started_at IS NOT NULL), "
		     "started_at = COALESCE(started_at, ?), owner = ?, "
		     "updated_at = ? WHERE id = ?",
		     &p, NULL);
	p.n = 0;
	db_params_int(&p, take);
	if (rc == 0)
		rc = db_query(c,
			      "SELECT " SQL_BULK_COLS
			      " FROM bulk_jobs WHERE id = ?",
			      &p, &j->rows);
	db_params_free(&p);
	if (rc < 0)
		goto fail;
	return db_commit(c);
fail:
	db_rollback(c);
	return -1;
}

/* A reschedule reads what the index needs; a cancel only its own
 * columns, at the same places (id and due_at first). */
#define READ_COLS SQL_TASK_COLS_INDEX ", slot, cron IS NOT NULL"
#define READ_COLS_CANCEL "id, due_at, slot, cron IS NOT NULL, topic"

/* The next chunk after the cursor: items with their Redis arguments. */
static int
read_run(struct db_conn *c, struct runner_job *j)
{
	const struct bulk_spec *s = j->spec;
	struct db_params p;
	char *sql;
	int rc;
	long long epoch;

	/* Not ours any more: not even a Redis step. */
	db_params_init(&p, 12);
	db_params_int(&p, j->job_id);
	rc = db_query_int(c,
			  "SELECT IF(state = 'cancelled', -1, epoch) FROM "
			  "bulk_jobs WHERE id = ?",
			  &p, -1, &epoch);
	if (rc < 0 || epoch != j->epoch) {
		j->fenced = rc == 0;
		j->cancelled = rc == 0 && epoch == -1;
		db_params_free(&p);
		return rc;
	}
	p.n = 0;
	sql = filter_sql(s->action == BA_CANCEL
				 ? "SELECT " READ_COLS_CANCEL
				   " FROM tasks FORCE INDEX (PRIMARY) WHERE "
				   "id > ? AND status = 'scheduled'"
				 : "SELECT " READ_COLS
				   " FROM tasks FORCE INDEX (PRIMARY) WHERE "
				   "id > ? AND status = 'scheduled'",
			 &s->f, " ORDER BY id LIMIT ?");
	db_params_str(&p, j->cursor);
	filter_bind(&p, &s->f);
	db_params_int(&p, j->chunk);
	rc = db_query(c, sql, &p, &j->rows);
	xfree(sql);
	db_params_free(&p);
	if (rc < 0)
		return -1;
	j->nitems = j->rows.nrows;
	j->items = xcalloc(j->nitems + 1, sizeof(*j->items));
	for (size_t i = 0; i < j->nitems; i++) {
		struct item *it = &j->items[i];

		int cancel = s->action == BA_CANCEL;

		it->id = xstrdup(db_rows_get(&j->rows, i, PC_ID, NULL));
		it->old_due = db_rows_int(&j->rows, i, cancel ? 1 : PC_DUE_AT);
		it->slot =
			(int)db_rows_int(&j->rows, i, cancel ? 2 : PC__COUNT);
		it->series = db_rows_int(&j->rows, i,
					 cancel ? 3 : PC__COUNT + 1) != 0;
		it->topic = xstrdup(
			db_rows_get(&j->rows, i, cancel ? 4 : PC_TOPIC, NULL));
		it->outcome = BO_PENDING;
		if (s->action == BA_CANCEL) {
			it->far = !it->series && it->old_due >= j->out_of_reach;
			continue;
		}
		it->new_due = s->action == BA_SHIFT ? it->old_due + s->by_ms
						    : s->due_at;
		/* A series keeps its expression (PATCH its cron); a shift
		 * may not leave the accepted range. */
		if (it->series || it->new_due < 0 || it->new_due > j->max_due) {
			it->outcome = BO_SKIPPED;
			continue;
		}
		if (it->new_due < j->horizon_edge) {
			struct task t;
			size_t plen;

			payload_row_task(&j->rows, i, &t);
			t.due_at = it->new_due;
			t.attempt = 0;
			it->payload = payload_encode(&t, &plen);
			payload_row_clear(&t);
		} else {
			it->payload = xstrdup("");
		}
	}
	db_rows_free(&j->rows);
	return 0;
}

/* Items are in id order (the primary key's, ascii_bin: bytes). */
static struct item *
find_item(struct item *items, size_t n, const char *id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(items[mid].id, id);

		if (c == 0)
			return &items[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

struct lock_ctx {
	struct runner_job *j;
	enum bulk_action action;
};

/* The locked rows: a candidate stays one if still scheduled and, for a
 * reschedule, still due when it was read (else its Redis entry, written
 * for the time read, is corrected by a rebuild). */
static void
lock_cb(const struct db_rows *r, void *arg)
{
	struct lock_ctx *lc = arg;
	struct runner_job *j = lc->j;

	for (size_t i = 0; i < r->nrows; i++) {
		const char *id = db_rows_get(r, i, 0, NULL);
		const char *st = db_rows_get(r, i, 1, NULL);
		struct item *it = find_item(j->items, j->nitems, id);

		if (it == NULL)
			continue;
		if (!strcmp(st, "scheduled") &&
		    (lc->action == BA_CANCEL ||
		     db_rows_int(r, i, 2) == it->old_due))
			it->outcome = BO_CHANGED;
		else
			it->locked_cancelled = !strcmp(st, "cancelled");
	}
}

struct log_ctx {
	const struct runner_job *j;
	const size_t *idx;
	int64_t now;
};

static void
bind_log_row(struct db_params *p, size_t i, void *arg)
{
	const struct log_ctx *lc = arg;
	struct item *it = &lc->j->items[lc->idx[i]];
	int cancel = lc->j->spec->action == BA_CANCEL;

	xfree(it->note);
	it->note = cancel ? xstrdup(lc->j->note)
			  : xasprintf("%.199s, due_at %lld", lc->j->note,
				      (long long)it->new_due);
	db_params_str(p, it->id);
	db_params_str(p, "scheduled");
	db_params_str(p, cancel ? "cancelled" : "scheduled");
	db_params_str(p, "bulk");
	db_params_int(p, 0);
	db_params_int(p, 0);
	db_params_int(p, lc->now);
	db_params_str(p, it->note);
}

/* The chunk's transaction: fence, lock, change, log, cursor. */
static int
write_run(struct db_conn *c, struct runner_job *j)
{
	const struct bulk_spec *s = j->spec;
	size_t *idx = xcalloc(j->nitems + 1, sizeof(*idx)), n = 0;
	struct lock_ctx lc = {j, s->action};
	struct log_ctx logc;
	struct db_params p;
	unsigned long long affected = 0;
	int64_t now = clock_now_ms(), lead[2], t;
	const char *upd;

	if (db_begin(c) < 0)
		goto fail;
	if (fence_ok(c, j) < 0)
		goto fail;
	if (j->fenced) {
		db_rollback(c);
		xfree(idx);
		return 0;
	}
	for (size_t i = 0; i < j->nitems; i++)
		if (j->items[i].outcome == BO_PENDING)
			idx[n++] = i;
	t = clock_mono_us();
	if (in_run(c,
		   "SELECT id, status, due_at FROM tasks FORCE INDEX (PRIMARY) "
		   "WHERE id IN (",
		   ") FOR UPDATE", j->items, idx, n, NULL, 0, lock_cb, &lc,
		   NULL) < 0)
		goto fail;
	j->write_us[0] = clock_mono_us() - t;
	for (size_t i = 0; i < j->nitems; i++)
		if (j->items[i].outcome == BO_PENDING)
			j->items[i].outcome = BO_SKIPPED;
	n = 0;
	for (size_t i = 0; i < j->nitems; i++)
		if (j->items[i].outcome == BO_CHANGED)
			idx[n++] = i;
	if (s->action == BA_CANCEL) {
		upd = "UPDATE tasks FORCE INDEX (PRIMARY) SET status = "
		      "'cancelled', updated_at = ? "
		      "WHERE status = 'scheduled' AND id IN (";
		lead[0] = now;
	} else if (s->action == BA_SHIFT) {
		upd = "UPDATE tasks FORCE INDEX (PRIMARY) SET due_at = due_at "
		      "+ ?, updated_at = ? "
		      "WHERE status = 'scheduled' AND id IN (";
		lead[0] = s->by_ms;
		lead[1] = now;
	} else {
		upd = "UPDATE tasks FORCE INDEX (PRIMARY) SET due_at = ?, "
		      "updated_at = ? "
		      "WHERE status = 'scheduled' AND id IN (";
		lead[0] = s->due_at;
		lead[1] = now;
	}
	t = clock_mono_us();
	if (in_run(c, upd, ")", j->items, idx, n, lead,
		   s->action == BA_CANCEL ? 1 : 2, NULL, NULL, &affected) < 0)
		goto fail;
	j->write_us[1] = clock_mono_us() - t;
	t = clock_mono_us();
	logc.j = j;
	logc.idx = idx;
	logc.now = now;
	if (n > 0 &&
	    db_exec_rows(c, SQL_TASK_LOG_INSERT_PREFIX, SQL_TASK_LOG_INSERT_ROW,
			 n, SQL_TASK_LOG_INSERT_NCOLS, bind_log_row, &logc,
			 NULL) < 0)
		goto fail;
	for (size_t k = 0; s->action == BA_CANCEL && k < n; k++)
		if (!strcmp(j->items[idx[k]].topic, j->retry_topic) &&
		    tasks_retry_cancelled(c, j->items[idx[k]].id, "bulk", now) <
			    0)
			goto fail;
	j->write_us[2] = clock_mono_us() - t;
	t = clock_mono_us();
	for (size_t i = 0; i < j->nitems; i++)
		j->counts[j->items[i].outcome]++;
	db_params_init(&p, 10);
	db_params_str(&p, j->nitems ? j->items[j->nitems - 1].id : j->cursor);
	db_params_int(&p, (long long)j->nitems);
	db_params_int(&p, j->counts[BO_CHANGED]);
	db_params_int(&p, j->counts[BO_FIRING]);
	db_params_int(&p, j->counts[BO_SKIPPED]);
	db_params_str(&p, j->firing_text);
	db_params_int(&p, now + BULK_LEASE_MS);
	db_params_int(&p, now);
	db_params_int(&p, j->job_id);
	if (db_exec(c,
		    "UPDATE bulk_jobs SET cursor_id = ?, scanned = scanned + "
		    "?, "
		    "changed = changed + ?, firing = firing + ?, skipped = "
		    "skipped + ?, firing_ids = ?, chunks = chunks + 1, "
		    "lease_until = ?, updated_at = ? WHERE id = ?",
		    &p, NULL) < 0) {
		db_params_free(&p);
		goto fail;
	}
	db_params_free(&p);
	xfree(idx);
	if (db_commit(c) < 0)
		return -1;
	j->write_us[3] = clock_mono_us() - t;
	return 0;
fail:
	db_rollback(c);
	xfree(idx);
	return -1;
}

static int
finish_run(struct db_conn *c, struct runner_job *j)
{
	struct db_params p;
	int64_t now = clock_now_ms();

	if (db_begin(c) < 0 || fence_ok(c, j) < 0)
		goto fail;
	if (j->fenced) {
		db_rollback(c);
		return 0;
	}
	db_params_init(&p, 3);
	db_params_int(&p, now);
	db_params_int(&p, now);
	db_params_int(&p, j->job_id);
	if (db_exec(c,
		    "UPDATE bulk_jobs SET state = 'done', owner = NULL, "
		    "finished_at = ?, updated_at = ? WHERE id = ?",
		    &p, NULL) < 0) {
		db_params_free(&p);
		goto fail;
	}
	db_params_free(&p);
	return db_commit(c);
fail:
	db_rollback(c);
	return -1;
}

static int
runner_run(struct db_conn *c, struct db_job *job)
{
	struct runner_job *j = (struct runner_job *)job;
	int64_t t = clock_mono_us();
	int rc = -1;

	switch (j->kind) {
	case RJ_TAKE: rc = take_run(c, j); break;
	case RJ_READ: rc = read_run(c, j); break;
	case RJ_WRITE: rc = write_run(c, j); break;
	case RJ_FINISH: rc = finish_run(c, j); break;
	}
	j->run_us = clock_mono_us() - t;
	return rc;
}

/* On the loop ------------------------------------------------------------ */

static void runner_done_cb(struct db_job *job, int status, const char *err);

static struct runner_job *
rjob_new(struct bulk_runner *p, enum rjob_kind kind)
{
	struct runner_job *j = xcalloc(1, sizeof(*j));

	j->p = p;
	j->kind = kind;
	j->job.run = runner_run;
	j->job.done_cb = runner_done_cb;
	snprintf(j->owner, sizeof(j->owner), "%s", p->id);
	snprintf(j->retry_topic, sizeof(j->retry_topic), "%s",
		 cfg_str(p->mg->cfg, CFG_NOTIFIER_RETRY_TOPIC));
	if (p->job != NULL) {
		j->job_id = p->job->id;
		j->epoch = p->job->epoch;
		j->spec = &p->job->spec;
		memcpy(j->cursor, p->job->cursor, sizeof(j->cursor));
	}
	j->chunk = p->chunk;
	if (kind == RJ_TAKE)
		j->released = p->released;
	return j;
}

static void
rjob_submit(struct bulk_runner *p, struct runner_job *j)
{
	p->out++;
	p->mg->inflight++;
	db_pool_submit(p->db, &j->job);
}

/* Slot s's owner rebuilds its index from the DB (an index entry of ours
 * may be wrong: written for a chunk whose transaction did not go in). */
static void
rebuild_slot(struct bulk_runner *p, int slot)
{
	char kmark[RKEY_MAX];

	rkey_marker(kmark, sizeof(kmark), slot);
	if (redis_commandl(p->mg->redis, NULL, NULL, "DEL", kmark, NULL) < 0)
		p->mg->index_dirty[slot] = 1;
}

static void
lose_job(struct bulk_runner *p, const char *why)
{
	if (p->cancelled) {
		log_info("bulk job stopped: cancelled",
			 "job=%lld changed=%lld firing=%lld skipped=%lld",
			 (long long)p->job->id, p->job->counts[BO_CHANGED],
			 p->job->counts[BO_FIRING], p->job->counts[BO_SKIPPED]);
		p->released = p->job->id;
	} else
		log_warn("bulk job lost", "job=%lld reason=\"%s\"",
			 (long long)p->job->id, why);
	job_state_free(p->job);
	p->job = NULL;
	metric_set(p->running, 0);
}

static int
take_job(struct bulk_runner *p, const struct db_rows *r)
{
	struct job_state *js;
	json_t *in, *f;
	const char *fi;

	if (r->nrows != 1)
		return 0;
	js = xcalloc(1, sizeof(*js));
	js->id = db_rows_int(r, 0, BC_ID);
	js->epoch = db_rows_int(r, 0, BC_EPOCH);
	snprintf(js->who, sizeof(js->who), "%s",
		 db_rows_get(r, 0, BC_WHO, NULL));
	snprintf(js->cursor, sizeof(js->cursor), "%s",
		 db_rows_get(r, 0, BC_CURSOR, NULL));
	f = json_loads(db_rows_get(r, 0, BC_FILTER, NULL), 0, NULL);
	in = json_pack("{s:s, s:o*}", "action",
		       db_rows_get(r, 0, BC_ACTION, NULL), "filter", f);
	if (db_rows_get(r, 0, BC_BY_MS, NULL))
		json_object_set_new(in, "by_ms",
				    json_integer(db_rows_int(r, 0, BC_BY_MS)));
	if (db_rows_get(r, 0, BC_DUE_AT, NULL))
		json_object_set_new(in, "due_at",
				    json_integer(db_rows_int(r, 0, BC_DUE_AT)));
	if (spec_parse(p->mg, NULL, in, &js->spec, NULL) < 0) {
		log_error("bulk job unreadable: left as it is", "job=%lld",
			  (long long)js->id);
		json_decref(in);
		xfree(js);
		return 0;
	}
	json_decref(in);
	fi = db_rows_get(r, 0, BC_FIRING_IDS, NULL);
	js->firing_ids = fi ? json_loads(fi, 0, NULL) : NULL;
	if (!json_is_array(js->firing_ids)) {
		json_decref(js->firing_ids);
		js->firing_ids = json_array();
	}
	js->scanned = db_rows_int(r, 0, BC_SCANNED);
	js->counts[BO_CHANGED] = db_rows_int(r, 0, BC_CHANGED);
	js->counts[BO_FIRING] = db_rows_int(r, 0, BC_FIRING);
	js->counts[BO_SKIPPED] = db_rows_int(r, 0, BC_SKIPPED);
	js->started_mono = clock_mono_ms();
	p->job = js;
	metric_set(p->running, 1);
	log_info(js->cursor[0] ? "bulk job resumed" : "bulk job started",
		 "job=%lld action=%s who=\"%s\" filter=%s cursor=\"%s\"",
		 (long long)js->id, action_names[js->spec.action], js->who,
		 js->spec.filter_text, js->cursor);
	return 1;
}

struct slot_call {
	struct bulk_runner *p;
	size_t *idx; /* items of the slot, in argument order */
	size_t n;
};

static void runner_step(struct bulk_runner *p);
static void advance(struct bulk_runner *p);

static int
busy(const struct bulk_runner *p)
{
	return p->out > 0 || p->redis_pending > 0;
}

static void
drop_next(struct bulk_runner *p)
{
	items_free(p->items, p->nitems);
	p->items = NULL;
	p->nitems = 0;
	p->next = NX_NONE;
}

static void
decided_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct slot_call *sc = arg;
	struct bulk_runner *p = sc->p;
	int cancel;

	p->redis_pending--;
	if (p->dead) {
		xfree(sc->idx);
		xfree(sc);
		return;
	}
	cancel = p->job->spec.action == BA_CANCEL;
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements != sc->n) {
		p->redis_failed = 1;
	} else {
		for (size_t i = 0; i < sc->n; i++) {
			struct item *it = &p->items[sc->idx[i]];
			long long v = reply->element[i]->integer;

			if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
				p->redis_failed = 1;
				continue;
			}
			/* A series is tombstoned even with an occurrence
			 * in flight. */
			it->redis_changed = v >= 0 || (cancel && it->series);
			if (cancel && v == -1 && !it->series)
				it->outcome = BO_FIRING;
			else if (!cancel && v == -1)
				it->outcome = BO_FIRING;
			else if (!cancel && v == -2)
				it->outcome = BO_SKIPPED;
			/* A series' occurrence in flight completes; the
			 * series ends (tasks.c does the same). */
			if (cancel)
				it->score = v > 0 ? v : 0;
		}
	}
	xfree(sc->idx);
	xfree(sc);
	if (p->redis_pending > 0)
		return;
	p->mg->inflight--;
	p->job->step_us[1] += clock_mono_us() - p->redis_t0;
	if (p->redis_failed) {
		log_warn("bulk job: redis step failed, chunk retried",
			 "job=%lld", (long long)p->job->id);
		p->retry = 1;
	} else {
		p->next = NX_READY;
	}
	advance(p);
}

/* One script call per slot for the items still pending (or, with
 * changed_only, the ones the transaction changed: a reschedule's second
 * write, against a rebuild that read the old due time meanwhile). Returns
 * the calls sent. */
static int
redis_pass(struct bulk_runner *p, const struct item *items, size_t nitems,
	   int changed_only, redis_reply_fn cb)
{
	struct manager *mg = p->mg;
	int cancel = p->job->spec.action == BA_CANCEL, sent = 0;
	size_t *count = xcalloc((size_t)mg->nslots, sizeof(*count));

	for (size_t i = 0; i < nitems; i++) {
		int want = changed_only ? items[i].outcome == BO_CHANGED
					: items[i].outcome == BO_PENDING;

		if (want && !items[i].far)
			count[items[i].slot]++;
	}
	for (int s = 0; s < mg->nslots; s++) {
		struct slot_eval ev;
		struct slot_call *sc;

		if (count[s] == 0)
			continue;
		sc = xcalloc(1, sizeof(*sc));
		sc->p = p;
		sc->idx = xcalloc(count[s], sizeof(*sc->idx));
		if (cancel) {
			slot_eval_init(&ev, SCRIPT_BULK_CANCEL, s, "dich");
			redis_args_addint(&ev.a, clock_now_ms());
		} else {
			slot_eval_init(&ev, SCRIPT_BULK_RESCHEDULE, s,
				       "dtickbvh");
			redis_args_addint(&ev.a,
					  clock_now_ms() + mg->bucket_near_ms);
			redis_args_addint(&ev.a, mg->bucket_ms);
		}
		for (size_t i = 0; i < nitems; i++) {
			const struct item *it = &items[i];

			if (it->slot != s || it->far ||
			    (changed_only ? it->outcome != BO_CHANGED
					  : it->outcome != BO_PENDING))
				continue;
			sc->idx[sc->n++] = i;
			redis_args_addstr(&ev.a, it->id);
			if (cancel) {
				redis_args_addint(&ev.a, it->old_due);
				redis_args_addstr(&ev.a,
						  it->series ? "1" : "0");
			} else {
				redis_args_addint(&ev.a, it->new_due);
				redis_args_addstr(&ev.a, it->payload);
				redis_args_addint(&ev.a, it->old_due);
			}
			redis_args_addstr(&ev.a, it->topic);
		}
		if (redis_eval_args(mg->redis, cb, cb ? sc : NULL, &ev.a) < 0) {
			p->redis_failed = 1;
		} else {
			sent++;
			if (cb != NULL)
				p->redis_pending++;
		}
		if (cb == NULL || sc->n == 0) {
			xfree(sc->idx);
			xfree(sc);
		}
		slot_eval_free(&ev);
	}
	xfree(count);
	return sent;
}

/* The next chunk's Redis step: decided against claims, per slot. */
static void
decide_chunk(struct bulk_runner *p)
{
	p->next = NX_DECIDING;
	p->redis_failed = 0;
	p->redis_t0 = clock_mono_us();
	redis_pass(p, p->items, p->nitems, 0, decided_cb);
	if (p->redis_pending > 0) {
		p->mg->inflight++;
		return;
	}
	if (p->redis_failed)
		p->retry = 1;
	else
		p->next = NX_READY; /* nothing left to decide */
}

/* Hands the decided chunk to its transaction. */
static void
write_chunk(struct bulk_runner *p)
{
	struct runner_job *j = rjob_new(p, RJ_WRITE);
	struct job_state *js = p->job;
	char *text;

	/* The ids found in flight, reported (the first FIRING_IDS_MAX). */
	for (size_t i = 0; i < p->nitems; i++) {
		size_t k, n = json_array_size(js->firing_ids);

		if (p->items[i].outcome != BO_FIRING || n >= FIRING_IDS_MAX)
			continue;
		for (k = 0; k < n; k++)
			if (!strcmp(json_string_value(
					    json_array_get(js->firing_ids, k)),
				    p->items[i].id))
				break;
		if (k == n)
			json_array_append_new(js->firing_ids,
					      json_string(p->items[i].id));
	}
	text = json_dumps(js->firing_ids, JSON_COMPACT);
	j->firing_text = text;
	snprintf(j->note, sizeof(j->note), "bulk job %lld by %s: %s",
		 (long long)js->id, js->who, action_names[js->spec.action]);
	j->items = p->items;
	j->nitems = p->nitems;
	p->items = NULL;
	p->nitems = 0;
	p->next = NX_NONE;
	rjob_submit(p, j);
}

/* Reads the chunk after cursor (NULL: the job's). */
static void
read_chunk(struct bulk_runner *p, const char *cursor)
{
	struct manager *mg = p->mg;
	struct runner_job *j = rjob_new(p, RJ_READ);

	if (cursor != NULL)
		snprintf(j->cursor, sizeof(j->cursor), "%s", cursor);
	j->horizon_edge = clock_now_ms() + mg->horizon_ms + 60000;
	j->out_of_reach = tasks_out_of_reach(mg, clock_now_ms());
	j->max_due = clock_now_ms() + mg->limits.max_delay_ms;
	p->next = NX_READING;
	rjob_submit(p, j);
}

/* After the chunk's commit: what Redis still needs. */
static void
chunk_written(struct bulk_runner *p, struct runner_job *j)
{
	struct manager *mg = p->mg;
	struct job_state *js = p->job;
	int cancel = js->spec.action == BA_CANCEL;
	char *wake = xcalloc((size_t)mg->nslots, 1);
	size_t *hdel = xcalloc((size_t)mg->nslots, sizeof(*hdel));
	int64_t soon =
		clock_now_ms() + cfg_int(mg->cfg, CFG_WORKER_LOOKAHEAD_MS);

	for (size_t i = 0; i < j->nitems; i++) {
		struct item *it = &j->items[i];

		metric_vec_inc(p->tasks_total,
			       (size_t)js->spec.action * BO__COUNT +
				       it->outcome);
		if (cancel && it->outcome == BO_CHANGED) {
			hdel[it->slot] += !it->far;
		} else if (cancel && it->redis_changed &&
			   !it->locked_cancelled) {
			/* Not scheduled any more: the cancel is undone, as
			 * tasks.c undoes one whose update changed nothing. */
			tasks_uncancel(mg, it->slot, it->id, it->score);
			wake[it->slot] = 1;
		} else if (!cancel && it->outcome == BO_SKIPPED &&
			   it->redis_changed) {
			rebuild_slot(p, it->slot);
		}
		if (!cancel && it->outcome == BO_CHANGED && it->new_due < soon)
			wake[it->slot] = 1;
	}
	/* The cancelled tasks' payloads: an HDEL per slot and hash. */
	for (int sl = 0; cancel && sl < mg->nslots; sl++) {
		for (int h = 0; hdel[sl] > 0 && h < 2; h++) {
			struct redis_args a;
			char key[RKEY_MAX];

			if (h == 0)
				rkey_task(key, sizeof(key), sl);
			else
				rkey_attempt(key, sizeof(key), sl);
			redis_args_init(&a);
			redis_args_addstr(&a, "HDEL");
			redis_args_addstr(&a, key);
			for (size_t i = 0; i < j->nitems; i++)
				if (j->items[i].slot == sl &&
				    !j->items[i].far &&
				    j->items[i].outcome == BO_CHANGED)
					redis_args_addstr(&a, j->items[i].id);
			redis_command_argv(mg->redis, NULL, NULL, a.argc,
					   a.argv, a.len);
			redis_args_free(&a);
		}
	}
	xfree(hdel);
	for (size_t k = 0; k < BO__COUNT; k++)
		js->counts[k] += j->counts[k];
	js->scanned += (long long)j->nitems;
	if (j->nitems > 0)
		snprintf(js->cursor, sizeof(js->cursor), "%s",
			 j->items[j->nitems - 1].id);
	if (!cancel) {
		redis_pass(p, j->items, j->nitems, 1, NULL);
		for (int s = 0; s < mg->nslots; s++)
			if (wake[s])
				ingest_wake(mg, s);
	}
	xfree(wake);
}

/* A reschedule's Redis step may have changed tasks whose transaction did
 * not go in (the job was taken over): their slots are rebuilt (a
 * cancel's tombstones are left: the task stays out of the index until
 * the job's new holder cancels it). */
static void
undo_redis_step(struct bulk_runner *p, const struct item *items, size_t n)
{
	if (p->job->spec.action == BA_CANCEL) {
		/* Cancelled: nobody will redo the chunk, so what its Redis
		 * step took out of the index goes back, as tasks.c undoes a
		 * cancel whose update did not go in. */
		for (size_t i = 0; p->cancelled && i < n; i++)
			if (items[i].redis_changed && !items[i].far) {
				tasks_uncancel(p->mg, items[i].slot,
					       items[i].id, items[i].score);
				ingest_wake(p->mg, items[i].slot);
			}
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (items[i].redis_changed)
			rebuild_slot(p, items[i].slot);
}

static void
repair_free(struct runner_job *j)
{
	for (size_t k = 0; k < j->nrepair; k++)
		xfree(j->repair[k].id);
	xfree(j->repair);
	j->repair = NULL;
	j->nrepair = 0;
}

static void
runner_done_cb(struct db_job *job, int status, const char *err)
{
	struct runner_job *j = (struct runner_job *)job;
	struct bulk_runner *p = j->p;

	p->out--;
	p->mg->inflight--;
	if (status < 0) {
		log_warn("bulk job step failed, retried",
			 "step=%d error=\"%s\"", (int)j->kind, err);
		if (j->kind == RJ_READ)
			p->next = NX_NONE;
		p->retry = 1;
		goto out;
	}
	switch (j->kind) {
	case RJ_TAKE:
		p->released = 0;
		if (j->abandoned > 0) {
			log_warn("a cancelled bulk job was left mid-chunk by a "
				 "manager that stopped: every slot index is "
				 "rebuilt from the database",
				 "jobs=%d tombstones_dropped=%zu", j->abandoned,
				 j->nrepair);
			for (int sl = 0; sl < p->mg->nslots; sl++) {
				struct redis_args a;
				char key[RKEY_MAX];
				size_t n = 0;

				rkey_cancelled(key, sizeof(key), sl);
				redis_args_init(&a);
				redis_args_addstr(&a, "ZREM");
				redis_args_addstr(&a, key);
				for (size_t k = 0; k < j->nrepair; k++)
					if (j->repair[k].slot == sl) {
						redis_args_addstr(
							&a, j->repair[k].id);
						n++;
					}
				if (n > 0)
					redis_command_argv(p->mg->redis, NULL,
							   NULL, a.argc, a.argv,
							   a.len);
				redis_args_free(&a);
				rebuild_slot(p, sl);
			}
		}
		take_job(p, &j->rows);
		db_rows_free(&j->rows);
		if (p->job == NULL) {
			/* The tick looks again. */
			repair_free(j);
			xfree(j);
			return;
		}
		break;
	case RJ_READ:
		p->job->step_us[0] += j->run_us;
		if (j->fenced) {
			p->next = NX_NONE;
			p->lost = 1;
			p->cancelled |= j->cancelled;
		} else if (j->nitems == 0) {
			p->next = NX_EMPTY;
		} else {
			p->items = j->items;
			p->nitems = j->nitems;
			j->items = NULL;
			decide_chunk(p);
		}
		break;
	case RJ_WRITE:
		p->job->step_us[2] += j->run_us;
		if (j->fenced) {
			p->cancelled |= j->cancelled;
			undo_redis_step(p, j->items, j->nitems);
			p->lost = 1;
		} else {
			for (int k = 0; k < 4; k++)
				p->job->write_us[k] += j->write_us[k];
			chunk_written(p, j);
			p->wrote = 1;
		}
		break;
	case RJ_FINISH:
		if (!j->fenced) {
			struct job_state *js = p->job;

			log_info(
				"bulk job done",
				"job=%lld action=%s who=\"%s\" filter=%s "
				"scanned=%lld changed=%lld firing=%lld "
				"skipped=%lld duration_ms=%lld read_ms=%lld "
				"redis_ms=%lld write_ms=%lld (lock_ms=%lld "
				"update_ms=%lld log_ms=%lld commit_ms=%lld)",
				(long long)js->id,
				action_names[js->spec.action], js->who,
				js->spec.filter_text, js->scanned,
				js->counts[BO_CHANGED], js->counts[BO_FIRING],
				js->counts[BO_SKIPPED],
				(long long)(clock_mono_ms() - js->started_mono),
				js->step_us[0] / 1000, js->step_us[1] / 1000,
				js->step_us[2] / 1000, js->write_us[0] / 1000,
				js->write_us[1] / 1000, js->write_us[2] / 1000,
				js->write_us[3] / 1000);
			job_state_free(p->job);
			p->job = NULL;
			metric_set(p->running, 0);
		} else {
			p->lost = 1;
			p->cancelled |= j->cancelled;
		}
		break;
	}
out:
	repair_free(j);
	if (j->items != NULL)
		items_free(j->items, j->nitems);
	xfree(j->firing_text);
	xfree(j);
	advance(p);
}

/*
 * Once nothing is out (a chunk's transaction, the next chunk's read and
 * Redis step): the job was lost, a step failed (on from the job's cursor
 * a little later), the job is done, or the next chunk is written (after
 * task.bulk_pause_ms) while the one after it is read and decided.
 */
static void
advance(struct bulk_runner *p)
{
	if (busy(p) || p->dead)
		return;
	if (p->lost) {
		if (p->items != NULL)
			undo_redis_step(p, p->items, p->nitems);
		drop_next(p);
		p->lost = p->retry = p->wrote = 0;
		if (p->job != NULL)
			lose_job(p, "another manager took it over");
		p->cancelled = 0;
		runner_later(p, 0);
		return;
	}
	if (p->retry) {
		drop_next(p);
		p->retry = p->wrote = 0;
		runner_later(p, BULK_RETRY_MS);
		return;
	}
	if (p->next == NX_READY && p->wrote && p->pause_ms > 0) {
		p->wrote = 0;
		runner_later(p, p->pause_ms);
		return;
	}
	p->wrote = 0;
	runner_step(p);
}

static void
runner_step(struct bulk_runner *p)
{
	struct manager *mg = p->mg;

	if (busy(p) || p->stopping)
		return;
	if (p->job == NULL) {
		rjob_submit(p, rjob_new(p, RJ_TAKE));
		return;
	}
	if (p->next == NX_EMPTY) {
		p->next = NX_NONE;
		rjob_submit(p, rjob_new(p, RJ_FINISH));
		return;
	}
	if (p->next == NX_READY) {
		char cursor[TASK_ID_MAX + 1];

		snprintf(cursor, sizeof(cursor), "%s",
			 p->items[p->nitems - 1].id);
		write_chunk(p);
		/* The chunk after it, read and decided meanwhile. */
		if (redis_up(mg->redis))
			read_chunk(p, cursor);
		return;
	}
	if (!redis_up(mg->redis)) {
		/* Without Redis nothing can be decided against claims. */
		runner_later(p, BULK_RETRY_MS);
		return;
	}
	read_chunk(p, NULL);
}

static void
step_cb(evutil_socket_t fd, short what, void *arg)
{
	runner_step(arg);
}

static void
runner_later(struct bulk_runner *p, int ms)
{
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

	if (ms == 0) {
		runner_step(p);
		return;
	}
	event_add(p->step_ev, &tv);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct bulk_runner *p = arg;

	if (p->job == NULL && !busy(p))
		runner_step(p);
}

static struct bulk_runner *the_runner;

struct bulk_runner *
bulk_create(struct manager *mg)
{
	struct bulk_runner *p = xcalloc(1, sizeof(*p));
	struct timeval tick = {BULK_TICK_MS / 1000, 0};
	char host[256];

	p->mg = mg;
	p->chunk = (int)cfg_int(mg->cfg, CFG_TASK_BULK_CHUNK);
	p->pause_ms = (int)cfg_int(mg->cfg, CFG_TASK_BULK_PAUSE_MS);
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	/* The same after a restart on this host and port: the job is taken
	 * back at once. */
	snprintf(p->id, sizeof(p->id), "%.150s/%.100s", host,
		 cfg_str(mg->cfg, CFG_HTTP_LISTEN));
	/* Two connections: a chunk's transaction on one, the next chunk's
	 * read on the other. */
	p->db = db_pool_create(mg->base, mg->dsn, 2, "bulk");
	p->tasks_total = metrics_register(
		METRIC_COUNTER, "prophet_bulk_tasks_total",
		"Tasks of bulk jobs by action and outcome (changed; firing: in "
		"flight, left alone; skipped: no longer scheduled, changed "
		"meanwhile, a series for a reschedule, or out of range)",
		"action", BA__COUNT * BO__COUNT);
	for (int a = 0; a < BA__COUNT; a++)
		for (int o = 0; o < BO__COUNT; o++) {
			size_t i = (size_t)a * BO__COUNT + (size_t)o;

			snprintf(p->label_buf[i], sizeof(p->label_buf[i]),
				 "action=\"%s\",outcome=\"%s\"",
				 action_names[a], outcome_names[o]);
			p->label_sets[i] = p->label_buf[i];
		}
	metric_set_label_sets(p->tasks_total, p->label_sets);
	p->running = metrics_register(METRIC_GAUGE, "prophet_bulk_job_running",
				      "1 while this manager runs a bulk job",
				      NULL, 0);
	p->tick_ev = event_new(mg->base, -1, EV_PERSIST, tick_cb, p);
	p->step_ev = event_new(mg->base, -1, 0, step_cb, p);
	event_add(p->tick_ev, &tick);
	the_runner = p;
	return p;
}

void
bulk_stop(struct bulk_runner *p)
{
	if (p != NULL)
		p->stopping = 1;
}

void
bulk_destroy(struct bulk_runner *p)
{
	if (p == NULL)
		return;
	event_free(p->tick_ev);
	event_free(p->step_ev);
	db_pool_destroy(p->db);
	the_runner = NULL;
	if (p->redis_pending > 0) {
		/* Its replies come when Redis goes: they find it dead. */
		p->dead = 1;
		return;
	}
	items_free(p->items, p->nitems);
	job_state_free(p->job);
	xfree(p);
}

static void
kick(void)
{
	if (the_runner != NULL && the_runner->job == NULL && !busy(the_runner))
		runner_step(the_runner);
}

/* The API ---------------------------------------------------------------- */

struct api_job {
	struct db_job job;
	struct manager *mg;
	struct evhttp_request *req;
	struct bulk_spec spec;
	int dry_run;
	int list;
	int cancel; /* POST /v1/admin/jobs/{id}/cancel */
	int64_t id;
	char who[130];
	long long count;
	long long max_jobs; /* task.bulk_max_jobs */
	long long queued;   /* jobs queued or running, when max_jobs refused */
	char state[16];	    /* cancel: the state of a job not running */
	struct db_rows rows;
};

/* Cancels a running (or queued) job: its epoch raised fences the runner,
 * whose chunk in progress rolls back; chunks written stay written. */
static int
api_cancel_run(struct db_conn *c, struct api_job *a)
{
	struct db_params p;
	struct db_rows rows;
	int64_t now = clock_now_ms();
	int rc;

	if (db_begin(c) < 0)
		return -1;
	db_params_init(&p, 4);
	db_params_int(&p, a->id);
	rc = db_query(c, "SELECT state FROM bulk_jobs WHERE id = ? FOR UPDATE",
		      &p, &rows);
	if (rc < 0)
		goto fail;
	if (rows.nrows == 1)
		snprintf(a->state, sizeof(a->state), "%s",
			 db_rows_get(&rows, 0, 0, NULL));
	db_rows_free(&rows);
	if (a->state[0] != '\0' && !strcmp(a->state, "running")) {
		a->state[0] = '\0';
		p.n = 0;
		db_params_str(&p, a->who);
		db_params_int(&p, now);
		db_params_int(&p, now);
		db_params_int(&p, a->id);
		if (db_exec(c,
			    "UPDATE bulk_jobs SET state = 'cancelled', epoch = "
			    "epoch + 1, cancelled_by = ?, finished_at = ?, "
			    "updated_at = ? WHERE id = ?",
			    &p, NULL) < 0)
			goto fail;
	}
	p.n = 0;
	db_params_int(&p, a->id);
	rc = db_query(c, "SELECT " SQL_BULK_COLS " FROM bulk_jobs WHERE id = ?",
		      &p, &a->rows);
	db_params_free(&p);
	if (rc < 0) {
		db_rollback(c);
		return -1;
	}
	return db_commit(c);
fail:
	db_params_free(&p);
	db_rollback(c);
	return -1;
}

static int
api_run(struct db_conn *c, struct db_job *job)
{
	struct api_job *a = (struct api_job *)job;
	struct db_params p;
	int64_t now = clock_now_ms();
	long long id = 0;
	char *sql;
	int rc;

	if (a->cancel)
		return api_cancel_run(c, a);
	db_params_init(&p, 10);
	if (a->list || a->id > 0) {
		if (a->list)
			db_params_int(&p, JOBS_LIST_MAX);
		else
			db_params_int(&p, a->id);
		rc = db_query(c,
			      a->list ? "SELECT " SQL_BULK_COLS
					" FROM bulk_jobs ORDER BY id DESC "
					"LIMIT ?"
				      : "SELECT " SQL_BULK_COLS
					" FROM bulk_jobs WHERE id = ?",
			      &p, &a->rows);
		db_params_free(&p);
		return rc;
	}
	sql = filter_sql("SELECT COUNT(*) FROM tasks WHERE status = "
			 "'scheduled'",
			 &a->spec.f, "");
	filter_bind(&p, &a->spec.f);
	rc = db_query_int(c, sql, &p, 0, &a->count);
	xfree(sql);
	if (rc < 0 || a->dry_run) {
		db_params_free(&p);
		return rc;
	}
	/* At most task.bulk_max_jobs queued or running (two requests at
	 * once may both pass: a bound, not an exact count). */
	rc = db_query_int(c,
			  "SELECT COUNT(*) FROM bulk_jobs WHERE state = "
			  "'running'",
			  NULL, 0, &a->queued);
	if (rc < 0 || a->queued >= a->max_jobs) {
		db_params_free(&p);
		return rc;
	}
	a->queued = -1;
	p.n = 0;
	db_params_str(&p, action_names[a->spec.action]);
	db_params_str(&p, a->spec.filter_text);
	if (a->spec.action == BA_SHIFT)
		db_params_int(&p, a->spec.by_ms);
	else
		db_params_null(&p);
	if (a->spec.action == BA_SET_DUE)
		db_params_int(&p, a->spec.due_at);
	else
		db_params_null(&p);
	db_params_str(&p, a->who);
	db_params_int(&p, a->count);
	db_params_int(&p, now);
	db_params_int(&p, now);
	rc = db_exec(c,
		     "INSERT INTO bulk_jobs (action, filter, by_ms, due_at, "
		     "who, state, total, created_at, updated_at) VALUES "
		     "(?, ?, ?, ?, ?, 'running', ?, ?, ?)",
		     &p, NULL);
	if (rc == 0)
		rc = db_query_int(c, "SELECT LAST_INSERT_ID()", NULL, 0, &id);
	p.n = 0;
	db_params_int(&p, rc == 0 ? id : 0);
	if (rc == 0)
		rc = db_query(c,
			      "SELECT " SQL_BULK_COLS
			      " FROM bulk_jobs WHERE id = ?",
			      &p, &a->rows);
	db_params_free(&p);
	return rc;
}

static void
api_done_cb(struct db_job *job, int status, const char *err)
{
	struct api_job *a = (struct api_job *)job;

	if (status < 0) {
		http_reply_error(a->req, 503, "unavailable", NULL,
				 "database unavailable: %s", err);
	} else if (a->cancel) {
		if (a->rows.nrows == 0) {
			http_reply_error(a->req, 404, "not_found", "job",
					 "no bulk job %lld", (long long)a->id);
		} else if (a->state[0] != '\0') {
			http_reply_error(a->req, 409, "not_running", "job",
					 "bulk job %lld is %s, not running",
					 (long long)a->id, a->state);
		} else {
			log_info("bulk job cancelled", "job=%lld who=\"%s\"",
				 (long long)a->id, a->who);
			http_reply_json(a->req, 200, job_json(&a->rows, 0));
		}
	} else if (a->list) {
		json_t *arr = json_array();

		for (size_t i = 0; i < a->rows.nrows; i++)
			json_array_append_new(arr, job_json(&a->rows, i));
		http_reply_json(a->req, 200, json_pack("{s:o}", "jobs", arr));
	} else if (a->id > 0) {
		if (a->rows.nrows == 0)
			http_reply_error(a->req, 404, "not_found", "job",
					 "no bulk job %lld", (long long)a->id);
		else
			http_reply_json(a->req, 200, job_json(&a->rows, 0));
	} else if (!a->dry_run && a->queued >= 0) {
		http_reply_error(a->req, 429, "too_many_jobs", NULL,
				 "%lld bulk jobs are queued or running "
				 "(task.bulk_max_jobs %lld): wait for one to "
				 "finish, or cancel one (POST "
				 "/v1/admin/jobs/{id}/cancel)",
				 a->queued, a->max_jobs);
	} else if (a->dry_run) {
		json_t *out = json_pack("{s:b, s:s, s:I}", "dry_run", 1,
					"action", action_names[a->spec.action],
					"matched", (json_int_t)a->count);

		json_object_set_new(out, "filter",
				    json_loads(a->spec.filter_text, 0, NULL));
		http_reply_json(a->req, 200, out);
	} else if (a->rows.nrows == 1) {
		log_info("bulk job recorded",
			 "job=%s action=%s who=\"%s\" filter=%s matched=%lld",
			 db_rows_get(&a->rows, 0, BC_ID, NULL),
			 action_names[a->spec.action], a->who,
			 a->spec.filter_text, a->count);
		http_reply_json(a->req, 202, job_json(&a->rows, 0));
		kick();
	} else {
		http_reply_error(a->req, 503, "unavailable", NULL,
				 "the job row was not found after its insert");
	}
	db_rows_free(&a->rows);
	spec_clear(&a->spec);
	a->mg->inflight--;
	xfree(a);
}

static void
api_submit_job(struct manager *mg, struct api_job *a)
{
	a->mg = mg;
	a->job.run = api_run;
	a->job.done_cb = api_done_cb;
	mg->inflight++;
	db_pool_submit(mg->db, &a->job);
}

void
bulk_post(struct manager *mg, struct evhttp_request *req)
{
	struct api_job *a;
	json_t *in;

	if (api_body_object(req, 0, &in) < 0)
		return;
	if (in == NULL) {
		http_reply_error(req, 400, "invalid_json", NULL,
				 "expected {\"filter\":{...}, \"action\":...}");
		return;
	}
	a = xcalloc(1, sizeof(*a));
	a->req = req;
	if (spec_parse(mg, req, in, &a->spec, &a->dry_run) < 0) {
		json_decref(in);
		xfree(a);
		return;
	}
	json_decref(in);
	requester(mg, req, a->who, sizeof(a->who));
	a->max_jobs = cfg_int(mg->cfg, CFG_TASK_BULK_MAX_JOBS);
	api_submit_job(mg, a);
}

void
bulk_jobs_list(struct manager *mg, struct evhttp_request *req)
{
	struct api_job *a = xcalloc(1, sizeof(*a));

	a->req = req;
	a->list = 1;
	api_submit_job(mg, a);
}

static long long
job_id_parse(const char *id, size_t idlen)
{
	/* Digits only, no sign, no leading zero, within range. */
	if (idlen >= 1 && idlen <= 18 && id[0] != '0' &&
	    strspn(id, "0123456789") == idlen && strlen(id) == idlen)
		return strtoll(id, NULL, 10);
	return 0;
}

/* GET /v1/admin/jobs/{id} or, with cancel, its POST .../cancel. */
static void
job_request(struct manager *mg, struct evhttp_request *req, const char *id,
	    size_t idlen, int cancel)
{
	long long n = job_id_parse(id, idlen);
	struct api_job *a;

	if (n <= 0) {
		http_reply_error(req, 404, "not_found", "job", "no such job");
		return;
	}
	a = xcalloc(1, sizeof(*a));
	a->req = req;
	a->id = n;
	a->cancel = cancel;
	if (cancel)
		requester(mg, req, a->who, sizeof(a->who));
	api_submit_job(mg, a);
}

void
bulk_job_cancel(struct manager *mg, struct evhttp_request *req, const char *id,
		size_t idlen)
{
	job_request(mg, req, id, idlen, 1);
}

void
bulk_job_get(struct manager *mg, struct evhttp_request *req, const char *id,
	     size_t idlen)
{
	job_request(mg, req, id, idlen, 0);
}
