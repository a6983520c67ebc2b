#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "callback.h"
#include "cfg.h"
#include "crashpoint.h"
#include "daemon.h"
#include "db.h"
#include "hmap.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "payload.h"
#include "redis.h"
#include "rindex.h"
#include "schema.h"
#include "scripts.h"
#include "trace.h"
#include "tz.h"
#include "worker.h"
#include "xmalloc.h"

#define MARK_BATCH_MAX 2000
#define MARK_DELAY_US 2000
#define MARK_RETRY_MS 1000

/* Firing's own state (firing_start .. firing_free). */
struct firing {
	/* Tasks whose delivery (or expiry) waits for the DB update. */
	struct wtask *mark_head, *mark_tail;
	size_t mark_n;
	int marking;
	size_t publishing; /* sent to Kafka, no delivery report yet */
	int64_t mark_retry_at_ms;
	struct log_every unknown_log; /* warnings of an unknown topic */
	struct event *mark_ev;
};

static void mark_schedule(struct worker *w);

static void
mark_enqueue(struct worker *w, struct wtask *t)
{
	t->state = WT_MARKING;
	t->next = NULL;
	if (w->fi->mark_tail != NULL)
		w->fi->mark_tail->next = t;
	else
		w->fi->mark_head = t;
	w->fi->mark_tail = t;
	w->fi->mark_n++;
	mark_schedule(w);
}

void
firing_expire(struct worker *w, struct wtask *t)
{
	t->expire = 1;
	mark_enqueue(w, t);
}

/*
 * An occurrence of a recurring task: keeps what indexing the next one
 * needs, and decides about a misfire (fired later than the threshold).
 * fire_all publishes every occurrence whatever its lateness; fire_once
 * publishes a late one (the DB update then resumes the series after its
 * publish time); skip records it without publishing. Returns 1 when skipped (handed to the DB update).
 */
static int
recurring_prepare(struct worker *w, struct wtask *t, const struct task *pt,
		  int64_t now)
{
	struct task copy = *pt;
	size_t len;

	t->recurring = 1;
	copy.attempt = 0;
	xfree(t->payload);
	t->payload = payload_encode(&copy, &len);
	t->misfired = pt->misfire != TASK_MISFIRE_FIRE_ALL &&
		      now - pt->due_at > w->misfire_threshold_ms;
	if (!t->misfired)
		return 0;
	metric_inc(w->m.misfires);
	log_info("recurring task misfired",
		 "id=%s%s occurrence=%lld late_ms=%lld policy=%s", t->id,
		 t->trace, (long long)pt->due_at, (long long)(now - pt->due_at),
		 task_misfire_name(pt->misfire));
	if (pt->misfire != TASK_MISFIRE_SKIP)
		return 0;
	t->skip = 1;
	t->fired_at = 0;
	mark_enqueue(w, t);
	return 1;
}

#define UNKNOWN_WARN_MS 10000

/* Prophet never picks a partition itself: no partition means the
 * topic's are gone (deleted while the producer knew it). */
static int
is_unknown_topic(rd_kafka_resp_err_t err)
{
	return err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
	       err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
	       err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
}

/*
 * A task whose topic was deleted after it was accepted (or never made on
 * brokers that do not create topics): it goes back to due for a retry a
 * lease later (give_back), and fires once the topic exists. Counted, and
 * warned about at most every UNKNOWN_WARN_MS (there may be many).
 */
static void
unknown_topic(struct worker *w, const struct wtask *t, const char *topic)
{
	long skipped;

	metric_inc(w->m.unknown_topic);
	if (log_every(&w->fi->unknown_log, clock_mono_ms(), UNKNOWN_WARN_MS,
		      &skipped))
		log_warn("task topic does not exist in Kafka: the task is "
			 "retried after its lease; create the topic",
			 "topic=%s id=%s%s lease_ms=%lld "
			 "not_logged_since_last=%ld",
			 topic, t->id, t->trace, (long long)w->lease_ms,
			 skipped);
}

/* Errors of a delivery report that say the message was not written. */
static int
not_written(rd_kafka_resp_err_t err)
{
	return is_unknown_topic(err) ||
	       err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
	       err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
}

/*
 * A publish that did not reach Kafka (the topic is gone, the producer
 * refused it): the task waits for its retry, a lease from now as before,
 * in due rather than in flight, so that a cancel or a reschedule takes it
 * meanwhile (in flight they answer 409: a task whose topic never comes
 * back could not be cancelled). Fenced by its claim's lease end (SCRIPT_
 * GIVEBACK). Tasks claimed from the DB keep their lease there.
 */
static void
give_back(struct worker *w, const struct wtask *t)
{
	struct slot_eval ev;

	if (t->from_db || t->lease_until == 0)
		return;
	slot_eval_init(&ev, SCRIPT_GIVEBACK, t->slot, "di");
	redis_args_addint(&ev.a, worker_now(w) + w->lease_ms);
	redis_args_addstr(&ev.a, t->id);
	redis_args_addint(&ev.a, t->lease_until);
	if (redis_eval_args(w->redis, NULL, NULL, &ev.a) < 0)
		log_debug("redis give-back skipped (disconnected)",
			  "id=%s slot=%d", t->id, t->slot);
	slot_eval_free(&ev);
}

/* prefix + topic in buf, cut to its size (snprintf's "%s%s" at a tenth of
 * the instructions). */
static void
topic_name(char *buf, size_t size, const char *prefix, const char *topic)
{
	size_t pl = strnlen(prefix, size - 1),
	       tl = strnlen(topic, size - 1 - pl);

	memcpy(buf, prefix, pl);
	memcpy(buf + pl, topic, tl);
	buf[pl + tl] = '\0';
}

/* Returns 0 when handed to Kafka, 1 when expired or skipped instead, -1
 * when the task was dropped (and freed). */
int
firing_publish_task(struct worker *w, struct wtask *t, const struct task *pt)
{
	rd_kafka_resp_err_t err;
	rd_kafka_headers_t *h;
	int64_t now = worker_now(w);
	char topic[256];
	const char *k, *key;
	json_t *v;

	t->due_at = pt->due_at;
	trace_kv(t->trace, sizeof(t->trace), pt->headers);
	if (pt->misfire != TASK_MISFIRE_NONE &&
	    recurring_prepare(w, t, pt, now))
		return 1;
	if (pt->ttl_ms > 0 && now > pt->due_at + pt->ttl_ms) {
		log_info("task expired before it could fire",
			 "id=%s%s due_at=%lld ttl_ms=%lld", t->id, t->trace,
			 (long long)pt->due_at, (long long)pt->ttl_ms);
		firing_expire(w, t);
		return 1;
	}
	CRASHPOINT("after_claim_before_publish");
	if (FAULTPOINT("kafka_producer_fatal"))
		kafka_producer_test_fatal(w->kafka);
	h = rd_kafka_headers_new(
		9 + (pt->headers ? json_object_size(pt->headers) : 0));
	rd_kafka_header_add(h, KHDR_ID, -1, t->id, -1);
	kafka_header_add_int(h, KHDR_DUE_AT, pt->due_at);
	kafka_header_add_int(h, KHDR_FIRED_AT, now);
	kafka_header_add_int(h, KHDR_ATTEMPT, t->attempt);
	kafka_header_add_int(h, KHDR_SLOT, t->slot);
	kafka_header_add_int(h, KHDR_EPOCH, t->epoch);
	if (t->recurring)
		kafka_header_add_int(h, KHDR_OCCURRENCE, pt->due_at);
	if (pt->headers != NULL)
		json_object_foreach (pt->headers, k, v)
			rd_kafka_header_add(h, k, -1, json_string_value(v),
					    (ssize_t)json_string_length(v));
	if (pt->callback != NULL) {
		char *cb =
			callback_header_encode(pt->callback, pt->max_attempts);

		rd_kafka_header_add(h, KHDR_CALLBACK, -1, cb, -1);
		xfree(cb);
	}
	topic_name(topic, sizeof(topic), w->topic_prefix, pt->topic);
	key = pt->key != NULL ? pt->key : t->id;
	t->fired_at = now;
	t->state = WT_PUBLISHING;
	if (eos_enabled(w)) {
		if (eos_publish(w, t, topic, key, strlen(key), pt->body,
				pt->body_len, h) < 0)
			return -1;
		w->fi->publishing++;
		metric_inc(w->m.fired);
		metric_observe(w->m.lateness,
			       (double)(now - pt->due_at) / 1000.0);
		return 0;
	}
	xfree(t->ktopic);
	t->ktopic = xstrdup(topic);
	if (kafka_produce(w->kafka, topic, key, strlen(key), pt->body,
			  pt->body_len, h, t, &err) < 0) {
		/* Not written: back to due for a retry after a lease
		 * (Redis), or firing until its lease ends (DB). */
		if (is_unknown_topic(err))
			unknown_topic(w, t, topic);
		else
			log_warn("produce failed",
				 "id=%s%s topic=%s error=\"%s\"", t->id,
				 t->trace, topic, rd_kafka_err2str(err));
		metric_inc(w->m.publish_errors);
		give_back(w, t);
		wtask_release(w, t);
		return -1;
	}
	w->fi->publishing++;
	metric_inc(w->m.fired);
	metric_observe(w->m.lateness, (double)(now - pt->due_at) / 1000.0);
	return 0;
}

int
firing_decode(struct worker *w, struct wtask *t, const char *payload,
	      size_t len, struct task *pt)
{
	if (payload_decode(payload, len, pt) == 0)
		return 0;
	log_error("undecodable task payload in redis", "id=%s slot=%d", t->id,
		  t->slot);
	metric_inc(w->m.publish_errors);
	wtask_release(w, t);
	return -1;
}

void
firing_dr_cb(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
	struct worker *w = arg;
	struct wtask *t = opaque;

	w->fi->publishing--;
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (is_unknown_topic(err))
			unknown_topic(w, t, t->ktopic ? t->ktopic : "?");
		else
			log_warn("delivery failed", "id=%s%s error=\"%s\"",
				 t->id, t->trace, rd_kafka_err2str(err));
		metric_inc(w->m.publish_errors);
		if (not_written(err))
			give_back(w, t);
		wtask_release(w, t);
		return;
	}
	firing_published(w, t);
}

void
firing_published(struct worker *w, struct wtask *t)
{
	metric_inc(w->m.published);
	log_debug("task published", "id=%s%s slot=%d attempt=%d due_at=%lld",
		  t->id, t->trace, t->slot, t->attempt, (long long)t->due_at);
	CRASHPOINT("after_publish_before_mark");
	mark_enqueue(w, t);
}

void
firing_mark(struct worker *w, struct wtask *t)
{
	mark_enqueue(w, t);
}

/* The delivered/expired updates ------------------------------------- */

/* What a recurring task not updated by its batch does in Redis. */
enum { MK_FORGET, MK_LEAVE, MK_REINDEX };

/* One task of a batch, as the pool thread sees it: a copy of what the
 * update needs, taken on the loop, and room for what it finds. */
struct mark_item {
	char id[TASK_ID_MAX + 1];
	int slot;
	int attempt;
	int64_t epoch;
	int64_t due_at;
	int64_t fired_at;
	int expire;
	int from_db;
	int recurring;
	int misfired;
	int skip;
	/* results, read by mark_done_cb */
	int updated;
	int leave;	  /* recurring, not updated: MK_* */
	int64_t next_due; /* recurring: the next occurrence, -1: ended */
};

/* A task_log note, bound by pointer until its statement ran. */
#define MARK_NOTE_MAX 112

/*
 * mark_run reads and writes the job's own fields only, never w or tasks
 * (the loop's, parallel to items): mark_done_cb applies the results.
 */
struct mark_job {
	struct db_job job;
	struct worker *w;
	struct wtask **tasks;
	struct mark_item *items;
	size_t n;
	size_t *order; /* indices of the updated tasks */
	char (*notes)[MARK_NOTE_MAX];
	size_t nupdated;
	int nslots;
	char owner[128]; /* the worker's id */
	int64_t now;
};

static void
bind_log_row(struct db_params *p, size_t i, void *arg)
{
	struct mark_job *mj = arg;
	struct mark_item *t = &mj->items[mj->order[i]];
	char *note = mj->notes[i];

	if (t->recurring) {
		if (t->next_due >= 0)
			snprintf(note, MARK_NOTE_MAX,
				 "occurrence %lld %s%s, next %lld",
				 (long long)t->due_at,
				 t->skip ? "skipped" : "published",
				 t->misfired ? " (misfire)" : "",
				 (long long)t->next_due);
		else
			snprintf(note, MARK_NOTE_MAX,
				 "occurrence %lld %s%s, series ended",
				 (long long)t->due_at,
				 t->skip ? "skipped" : "published",
				 t->misfired ? " (misfire)" : "");
		db_params_str(p, t->id);
		db_params_str(p, t->from_db ? "firing" : "scheduled");
		db_params_str(p, t->next_due >= 0 ? "scheduled" : "delivered");
		db_params_str(p, mj->owner);
		db_params_int(p, t->epoch);
		db_params_int(p, t->attempt);
		db_params_int(p, t->skip ? mj->now : t->fired_at);
		db_params_str(p, note);
		return;
	}
	db_params_str(p, t->id);
	db_params_str(p, t->from_db ? "firing" : "scheduled");
	db_params_str(p, t->expire ? "expired" : "delivered");
	db_params_str(p, mj->owner);
	db_params_int(p, t->epoch);
	db_params_int(p, t->attempt);
	db_params_int(p, t->expire ? mj->now : t->fired_at);
	db_params_null(p);
}

/* The fences of the slots flagged in want, share-locked until commit so
 * that a new owner cannot raise one between our check and our update; 0
 * for a slot without a row. Up to FENCE_SLOTS slots a statement, the list
 * padded with a repeat (one text): one statement where there was one a
 * slot. The number of slots locked, or -1. */
static int
slot_fences(struct db_conn *c, const char *want, int nslots, int64_t *fence)
{
	int list[FENCE_SLOTS], n = 0, locked = 0;

	for (int slot = 0; slot <= nslots; slot++) {
		struct db_params p;
		struct db_rows rows;

		if (slot < nslots && want[slot])
			list[n++] = slot;
		if (n == 0 || (n < FENCE_SLOTS && slot < nslots))
			continue;
		db_params_init(&p, FENCE_SLOTS);
		for (int i = 0; i < FENCE_SLOTS; i++)
			db_params_int(&p, list[i < n ? i : 0]);
		for (int i = 0; i < n; i++)
			fence[list[i]] = 0;
		locked += n;
		n = 0;
		if (db_query(c, SQL_SLOT_FENCES_SHARED, &p, &rows) < 0) {
			db_params_free(&p);
			return -1;
		}
		db_params_free(&p);
		for (size_t r = 0; r < rows.nrows; r++) {
			long long s = db_rows_int(&rows, r, 0);

			if (s >= 0 && s < nslots)
				fence[s] = db_rows_int(&rows, r, 1);
		}
		db_rows_free(&rows);
	}
	return locked;
}

static void
append_list(char *sql, size_t *off, const char *item, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(item);

		memcpy(sql + *off, item, len);
		*off += len;
	}
}

static int
item_id_cmp(const void *a, const void *b)
{
	const struct mark_item *const *x = a, *const *y = b;

	return strcmp((*x)->id, (*y)->id);
}

/* Flags the items (sorted by id) whose id is the row's: a chunk of 256
 * compared each row with every item, 128 strcmp a task. */
static void
mark_updated(struct mark_item **by_id, size_t n, const char *id)
{
	size_t lo = 0, hi = n;

	if (id == NULL)
		return;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(by_id[mid]->id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n && !strcmp(by_id[lo]->id, id); lo++)
		by_id[lo]->updated = 1;
}

/*
 * Records n deliveries with two statements of size (256, 64, 16, 4 or 1)
 * rows, the last of the n repeated to fill them: lock the rows still
 * scheduled/firing (they are the ones this batch moves), then one UPDATE
 * with per-row values in CASE expressions. attempt and epoch are nearly
 * always the same for the whole chunk (mark_run sorts by them): then
 * they are plain values, as two CASEs of 256 arms cost MariaDB about 15
 * us a row (a fifth of the UPDATE). The statement texts depend only on
 * the size and that.
 */
#define PAD(i) idx[(i) < n ? (i) : n - 1]
static int
mark_chunk(struct db_conn *c, struct mark_job *mj, const size_t *idx, size_t n,
	   size_t size)
{
	static const char head[] = "UPDATE tasks FORCE INDEX (PRIMARY) SET "
				   "status = 'delivered', "
				   "delivered_at = ?, owner = ?, updated_at = "
				   "?, fired_at = CASE id ";
	size_t cap = 512 + size * 64, off;
	char *sql = xmalloc(cap);
	struct mark_item **by_id = xmalloc(n * sizeof(*by_id));
	const struct mark_item *first = &mj->items[idx[0]];
	struct db_params p;
	struct db_rows rows;
	int rc = -1, uniform = 1;

	off = (size_t)snprintf(sql, cap, "%s",
			       "SELECT id FROM tasks FORCE INDEX (PRIMARY) "
			       "WHERE status IN ('scheduled', 'firing') "
			       "AND id IN (?");
	append_list(sql, &off, ",?", size - 1);
	off += (size_t)snprintf(sql + off, cap - off, ") FOR UPDATE");
	db_params_init(&p, size * 7 + 4);
	for (size_t i = 0; i < size; i++)
		db_params_str(&p, mj->items[PAD(i)].id);
	if (db_query(c, sql, &p, &rows) < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		by_id[i] = &mj->items[idx[i]];
	qsort(by_id, n, sizeof(*by_id), item_id_cmp);
	for (size_t r = 0; r < rows.nrows; r++)
		mark_updated(by_id, n, db_rows_get(&rows, r, 0, NULL));
	db_rows_free(&rows);

	for (size_t i = 1; i < n && uniform; i++)
		uniform = mj->items[idx[i]].attempt == first->attempt &&
			  mj->items[idx[i]].epoch == first->epoch;
	off = (size_t)snprintf(sql, cap, "%s", head);
	append_list(sql, &off, "WHEN ? THEN ? ", size);
	if (uniform) {
		off += (size_t)snprintf(sql + off, cap - off,
					"END, attempt = ?, epoch = ? ");
	} else {
		off += (size_t)snprintf(sql + off, cap - off,
					"END, attempt = CASE id ");
		append_list(sql, &off, "WHEN ? THEN ? ", size);
		off += (size_t)snprintf(sql + off, cap - off,
					"END, epoch = CASE id ");
		append_list(sql, &off, "WHEN ? THEN ? ", size);
		off += (size_t)snprintf(sql + off, cap - off, "END ");
	}
	off += (size_t)snprintf(sql + off, cap - off,
				"WHERE status IN ('scheduled', 'firing') "
				"AND id IN (?");
	append_list(sql, &off, ",?", size - 1);
	snprintf(sql + off, cap - off, ")");
	p.n = 0;
	db_params_int(&p, mj->now);
	db_params_str(&p, mj->owner);
	db_params_int(&p, mj->now);
	for (size_t i = 0; i < size; i++) {
		db_params_str(&p, mj->items[PAD(i)].id);
		db_params_int(&p, mj->items[PAD(i)].fired_at);
	}
	if (uniform) {
		db_params_int(&p, first->attempt);
		db_params_int(&p, first->epoch);
	} else {
		for (size_t i = 0; i < size; i++) {
			db_params_str(&p, mj->items[PAD(i)].id);
			db_params_int(&p, mj->items[PAD(i)].attempt);
		}
		for (size_t i = 0; i < size; i++) {
			db_params_str(&p, mj->items[PAD(i)].id);
			db_params_int(&p, mj->items[PAD(i)].epoch);
		}
	}
	for (size_t i = 0; i < size; i++)
		db_params_str(&p, mj->items[PAD(i)].id);
	rc = db_exec(c, sql, &p, NULL);
out:
	db_params_free(&p);
	xfree(sql);
	xfree(by_id);
	return rc;
}
#undef PAD

/*
 * Records one occurrence of a recurring task and schedules the next in
 * the same transaction, if the row still waits for this very occurrence.
 * The next occurrence follows the occurrence itself; after a misfire it
 * follows the publish time (fire_once) or now (skip), which drops the
 * occurrences missed in between.
 */
static int
mark_recurring(struct db_conn *c, struct mark_job *mj, size_t i)
{
	struct mark_item *t = &mj->items[i];
	struct db_params p;
	struct db_rows rows;
	unsigned long long a = 0;
	int64_t after, max, occ;
	int published = !t->skip, rc = -1;
	const char *zone;
	char err[256];

	db_params_init(&p, 10);
	db_params_str(&p, t->id);
	if (db_query(c, SQL_TASK_CRON_LOCK, &p, &rows) < 0)
		goto out;
	if (rows.nrows == 0) {
		/* Cancelled or ended: forget it. */
		db_rows_free(&rows);
		rc = 0;
		goto out;
	}
	if (db_rows_int(&rows, 0, SQL_CC_DUE_AT) != t->due_at) {
		/* This occurrence was recorded already (we published a
		 * duplicate, e.g. of a claim requeued after its publisher died
		 * between the COMMIT and the Redis update): index the row's
		 * next occurrence as the DB has it, rather than leave a stale
		 * claim that would be requeued again and again. Firing in DB
		 * mode: its publisher decides. */
		if (!strcmp(db_rows_get(&rows, 0, SQL_CC_STATUS, NULL),
			    "scheduled")) {
			t->next_due = db_rows_int(&rows, 0, SQL_CC_DUE_AT);
			t->leave = MK_REINDEX;
		} else {
			t->leave = MK_LEAVE;
		}
		db_rows_free(&rows);
		rc = 0;
		goto out;
	}
	after = t->due_at;
	if (t->misfired)
		after = t->skip ? mj->now : t->fired_at;
	if (after < t->due_at)
		after = t->due_at;
	max = db_rows_int(&rows, 0, SQL_CC_MAX_OCCURRENCES);
	occ = db_rows_int(&rows, 0, SQL_CC_OCCURRENCES) + published;
	t->next_due = -1;
	zone = db_rows_get(&rows, 0, SQL_CC_TIMEZONE, NULL);
	if (max <= 0 || occ < max)
		t->next_due = task_cron_next(
			db_rows_get(&rows, 0, SQL_CC_CRON, NULL),
			tz_get(zone ? zone : "UTC", err, sizeof(err)), after,
			db_rows_int(&rows, 0, SQL_CC_END_AT), err, sizeof(err));
	db_rows_free(&rows);
	if (t->next_due < -1)
		t->next_due = -1;
	p.n = 0;
	db_params_str(&p, t->next_due >= 0 ? "scheduled" : "delivered");
	db_params_int(&p, t->next_due >= 0 ? t->next_due : t->due_at);
	db_params_int(&p, published);
	db_params_int(&p, t->next_due >= 0 ? 0 : t->attempt);
	db_params_int(&p, t->epoch);
	if (published) {
		db_params_int(&p, t->fired_at);
		db_params_int(&p, mj->now);
	} else {
		db_params_null(&p);
		db_params_null(&p);
	}
	db_params_int(&p, mj->now);
	db_params_str(&p, t->id);
	db_params_int(&p, t->due_at);
	if (db_exec(c, SQL_TASK_CRON_NEXT, &p, &a) < 0)
		goto out;
	t->updated = a > 0;
	rc = 0;
out:
	db_params_free(&p);
	return rc;
}

struct ea_key {
	int64_t epoch;
	int attempt;
	size_t i;
};

static int
ea_cmp(const void *a, const void *b)
{
	const struct ea_key *x = a, *y = b;

	if (x->epoch != y->epoch)
		return x->epoch < y->epoch ? -1 : 1;
	if (x->attempt != y->attempt)
		return x->attempt < y->attempt ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* Orders the indices by (epoch, attempt), so that nearly every chunk has
 * one of each (mark_chunk). */
static void
sort_by_epoch_attempt(const struct mark_job *mj, size_t *todo, size_t n)
{
	struct ea_key *k;
	size_t same = 1;

	while (same < n &&
	       mj->items[todo[same]].epoch == mj->items[todo[0]].epoch &&
	       mj->items[todo[same]].attempt == mj->items[todo[0]].attempt)
		same++;
	if (same >= n)
		return; /* one of each already: the usual case */
	k = xmalloc(n * sizeof(*k));
	for (size_t i = 0; i < n; i++) {
		k[i].epoch = mj->items[todo[i]].epoch;
		k[i].attempt = mj->items[todo[i]].attempt;
		k[i].i = todo[i];
	}
	qsort(k, n, sizeof(*k), ea_cmp);
	for (size_t i = 0; i < n; i++)
		todo[i] = k[i].i;
	xfree(k);
}

static int
mark_run(struct db_conn *c, struct db_job *job)
{
	static const size_t chunks[] = {256, 64, 16, 4, 1};
	struct mark_job *mj = (struct mark_job *)job;
	int nslots = mj->nslots, locked;
	int64_t *fence = xcalloc((size_t)nslots, sizeof(*fence));
	char *seen = xcalloc((size_t)nslots, 1);
	size_t *todo = xcalloc(mj->n + 1, sizeof(*todo)), ntodo = 0, done;
	struct db_params p;
	int rc = -1;

	mj->nupdated = 0;
	db_params_init(&p, 4);
	if (db_begin(c) < 0)
		goto out;
	for (size_t i = 0; i < mj->n; i++)
		if (!mj->items[i].expire)
			seen[mj->items[i].slot] = 1;
	locked = slot_fences(c, seen, nslots, fence);
	if (locked < 0)
		goto fail;
	if (locked > 0)
		CRASHPOINT("mark_slot_locked");
	for (size_t i = 0; i < mj->n; i++) {
		struct mark_item *t = &mj->items[i];
		unsigned long long a = 0;

		t->updated = 0;
		t->leave = MK_FORGET;
		if (t->expire) {
			p.n = 0;
			db_params_int(&p, mj->now);
			db_params_str(&p, t->id);
			db_params_int(&p, t->epoch);
			if (db_exec(c, SQL_TASK_MARK_EXPIRED, &p, &a) < 0)
				goto fail;
			t->updated = a > 0;
			continue;
		}
		/* A newer epoch owns the slot: its owner decides. */
		if (fence[t->slot] > t->epoch) {
			t->leave = t->recurring ? MK_LEAVE : MK_FORGET;
		} else if (t->recurring) {
			if (mark_recurring(c, mj, i) < 0)
				goto fail;
		} else {
			todo[ntodo++] = i;
		}
	}
	sort_by_epoch_attempt(mj, todo, ntodo);
	/* Chunks of 256, 64, 16, 4, 1; a rest of more than half a size is
	 * one padded chunk of that size (7 tasks: 4 + 4, not 4 + 1 + 1 + 1:
	 * a statement costs more than a few repeated rows). */
	for (done = 0; done < ntodo;) {
		size_t r = ntodo - done, k = 0, take;

		while (chunks[k] > r &&
		       !(chunks[k + 1] < r && chunks[k] <= 2 * r))
			k++;
		take = chunks[k] < r ? chunks[k] : r;
		if (mark_chunk(c, mj, todo + done, take, chunks[k]) < 0)
			goto fail;
		done += take;
	}
	/* A one-shot delivery gets no log row: the task's columns hold all
	 * it would (owner, epoch, attempt, fired_at), and GET shows it from
	 * them. It was 221 of a finished task's 979 DB bytes and a statement
	 * per chunk of this, the busiest path to the DB. */
	for (size_t i = 0; i < mj->n; i++)
		if (mj->items[i].updated &&
		    (mj->items[i].recurring || mj->items[i].expire))
			mj->order[mj->nupdated++] = i;
	mj->notes = xcalloc(mj->nupdated + 1, sizeof(*mj->notes));
	if (mj->nupdated > 0 &&
	    db_exec_rows(c, SQL_TASK_LOG_INSERT_PREFIX, SQL_TASK_LOG_INSERT_ROW,
			 mj->nupdated, SQL_TASK_LOG_INSERT_NCOLS, bind_log_row,
			 mj, NULL) < 0)
		goto fail;
	rc = db_commit(c);
	goto out;
fail:
	db_rollback(c);
out:
	db_params_free(&p);
	xfree(mj->notes);
	mj->notes = NULL;
	xfree(fence);
	xfree(seen);
	xfree(todo);
	return rc;
}

/* Drops the Redis copies of finished tasks, one script call per slot. */
static void
forget(struct worker *w, struct wtask **tasks, size_t n)
{
	for (int slot = 0; slot < w->nslots; slot++) {
		struct slot_eval ev;

		slot_eval_init(&ev, SCRIPT_FORGET, slot, "ita");
		for (size_t i = 0; i < n; i++)
			if (tasks[i]->slot == slot)
				redis_args_addstr(&ev.a, tasks[i]->id);
		/* Redis away (DB mode): its index is rebuilt on return. */
		if (ev.a.argc > 6 &&
		    redis_eval_args(w->redis, NULL, NULL, &ev.a) < 0)
			log_debug("redis cleanup skipped (disconnected)",
				  "slot=%d", slot);
		slot_eval_free(&ev);
	}
}

static void mark_flush(struct worker *w);

/* Delivered tasks count their attempt now, not at claim: a worker that
 * dies between claim and delivery has not used up an attempt number, so
 * the first message Kafka holds for a task carries prophet-attempt 1. */
static void
count_attempts(struct worker *w, struct wtask **tasks, size_t n)
{
	for (int slot = 0; slot < w->nslots; slot++) {
		struct slot_eval ev;

		slot_eval_init(&ev, SCRIPT_ATTEMPTED, slot, "a");
		for (size_t i = 0; i < n; i++) {
			if (tasks[i]->slot != slot || tasks[i]->expire ||
			    tasks[i]->skip || tasks[i]->counted)
				continue;
			tasks[i]->counted = 1;
			redis_args_addstr(&ev.a, tasks[i]->id);
		}
		if (ev.a.argc > 4)
			redis_eval_args(w->redis, NULL, NULL, &ev.a);
		slot_eval_free(&ev);
	}
}

struct cron_index {
	struct worker *w;
	int slot;
	int soon; /* a next occurrence within the look-ahead */
};

static void
cron_indexed_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct cron_index *ci = arg;

	if (reply != NULL && reply->type == REDIS_REPLY_INTEGER && ci->soon)
		scanner_wake(ci->w, ci->slot);
	else if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
		log_debug("next occurrences not indexed (redis away)",
			  "slot=%d", ci->slot);
	xfree(ci);
}

/*
 * After the DB update: finished tasks leave Redis; recurring tasks whose
 * next occurrence was scheduled are indexed at it (the DB has it anyway:
 * a loader, rebuild or sweeper would index it if this is lost); those
 * whose Redis state is newer than ours are left alone.
 */
static void
recurring_next(struct worker *w, struct mark_job *mj)
{
	struct wtask **gone = xcalloc(mj->n + 1, sizeof(*gone));
	int64_t now = worker_now(w);
	size_t ngone = 0;

	for (size_t i = 0; i < mj->n; i++) {
		const struct mark_item *it = &mj->items[i];

		if (!it->recurring || (it->leave == MK_FORGET &&
				       !(it->updated && it->next_due >= 0)))
			gone[ngone++] = mj->tasks[i];
	}
	forget(w, gone, ngone);
	xfree(gone);
	if (ngone == mj->n)
		return; /* no next occurrence to index */
	for (int slot = 0; slot < w->nslots; slot++) {
		struct slot_eval ev;
		int soon = 0, head;
		size_t npace = 0;
		struct pace {
			const char *id;
			int64_t due;
			char topic[TASK_TOPIC_MAX + 1];
		} *pace = NULL;

		slot_eval_init(&ev, SCRIPT_CRON_NEXT, slot, "itadckbv");
		redis_args_addint(&ev.a, now + w->bucket_near_ms);
		redis_args_addint(&ev.a, w->bucket_ms);
		head = ev.a.argc;
		for (size_t i = 0; i < mj->n; i++) {
			const struct mark_item *it = &mj->items[i];
			struct wtask *t = mj->tasks[i];
			struct task pt;
			char *pl = NULL;
			size_t len = 0;

			if (it->slot != slot || !it->recurring ||
			    !((it->updated && it->next_due >= 0) ||
			      it->leave == MK_REINDEX))
				continue;
			if (it->next_due <
				    now + w->horizon_ms + w->index_margin_ms &&
			    t->payload != NULL &&
			    payload_decode(t->payload, strlen(t->payload),
					   &pt) == 0) {
				pt.due_at = it->next_due;
				pl = payload_encode(&pt, &len);
				if (it->next_due < now && pause_ready(w)) {
					if (pace == NULL)
						pace = xcalloc(mj->n,
							       sizeof(*pace));
					pace[npace].id = t->id;
					pace[npace].due = it->next_due;
					snprintf(pace[npace].topic,
						 sizeof(pace[npace].topic),
						 "%s", pt.topic);
					npace++;
				}
				task_clear(&pt);
			}
			/* Arguments are borrowed until sent: the task keeps the
			 * payload (it is released after this). */
			xfree(t->payload);
			t->payload = pl;
			redis_args_addstr(&ev.a, t->id);
			redis_args_addint(&ev.a, it->next_due);
			redis_args_add(&ev.a, pl ? pl : "", len);
			if (it->next_due < now + w->lookahead_ms)
				soon = 1;
		}
		if (ev.a.argc > head) {
			struct cron_index *ci = xcalloc(1, sizeof(*ci));

			ci->w = w;
			ci->slot = slot;
			ci->soon = soon;
			if (redis_eval_args(w->redis, cron_indexed_cb, ci,
					    &ev.a) < 0)
				xfree(ci);
			else
				/* Sent after the indexing, on one connection:
				 * a catch-up of a rate-limited resume goes on
				 * to the held set before any claim. */
				for (size_t k = 0; k < npace; k++)
					pause_pace(w, slot, pace[k].topic,
						   pace[k].id, pace[k].due);
		}
		xfree(pace);
		slot_eval_free(&ev);
	}
}

static void
mark_done_cb(struct db_job *job, int status, const char *err)
{
	struct mark_job *mj = (struct mark_job *)job;
	struct worker *w = mj->w;

	w->fi->marking = 0;
	if (status < 0) {
		/* Put them back in front, in order, and retry later. */
		metric_inc(w->m.mark_failures);
		log_warn("state update failed, will retry",
			 "tasks=%zu error=\"%s\"", mj->n, err);
		for (size_t i = mj->n; i-- > 0;) {
			mj->tasks[i]->next = w->fi->mark_head;
			w->fi->mark_head = mj->tasks[i];
			if (w->fi->mark_tail == NULL)
				w->fi->mark_tail = mj->tasks[i];
			w->fi->mark_n++;
		}
		w->fi->mark_retry_at_ms = clock_mono_ms() + MARK_RETRY_MS;
	} else {
		size_t fenced = 0;

		for (size_t i = 0; i < mj->n; i++) {
			if (!mj->items[i].updated)
				fenced++;
			else if (mj->items[i].expire)
				metric_inc(w->m.expired);
			else if (!mj->items[i].skip)
				metric_inc(w->m.delivered);
			if (mj->items[i].updated && mj->items[i].recurring)
				metric_inc(w->m.occurrences);
		}
		if (fenced > 0) {
			/* Already final (another publisher won) or a newer
			 * epoch owns the task. */
			metric_add(w->m.fenced, (double)fenced);
			log_info("state updates refused", "count=%zu", fenced);
		}
		for (size_t i = 0; i < mj->n; i++) {
			if (mj->items[i].updated) {
				scanner_task_finished(w, mj->tasks[i]);
				dbmode_marked(w, mj->tasks[i]);
			}
			eos_task_recorded(w, mj->tasks[i]);
		}
		CRASHPOINT("after_mark_before_forget");
		recurring_next(w, mj);
		for (size_t i = 0; i < mj->n; i++)
			wtask_release(w, mj->tasks[i]);
	}
	xfree(mj->tasks);
	xfree(mj->items);
	xfree(mj->order);
	xfree(mj);
	if (w->fi->mark_n > 0)
		mark_schedule(w);
}

static void
mark_item_copy(struct mark_item *it, const struct wtask *t)
{
	memcpy(it->id, t->id, sizeof(it->id));
	it->slot = t->slot;
	it->attempt = t->attempt;
	it->epoch = t->epoch;
	it->due_at = t->due_at;
	it->fired_at = t->fired_at;
	it->expire = t->expire;
	it->from_db = t->from_db;
	it->recurring = t->recurring;
	it->misfired = t->misfired;
	it->skip = t->skip;
}

static void
mark_flush(struct worker *w)
{
	struct mark_job *mj;
	size_t n;

	if (w->fi->marking || w->fi->mark_n == 0)
		return;
	n = w->fi->mark_n < MARK_BATCH_MAX ? w->fi->mark_n : MARK_BATCH_MAX;
	mj = xcalloc(1, sizeof(*mj));
	mj->w = w;
	mj->tasks = xcalloc(n, sizeof(*mj->tasks));
	mj->items = xcalloc(n, sizeof(*mj->items));
	mj->order = xcalloc(n, sizeof(size_t));
	mj->n = n;
	mj->nslots = w->nslots;
	snprintf(mj->owner, sizeof(mj->owner), "%s", w->id);
	mj->now = worker_now(w);
	for (size_t i = 0; i < n; i++) {
		mj->tasks[i] = w->fi->mark_head;
		w->fi->mark_head = w->fi->mark_head->next;
		mj->tasks[i]->next = NULL;
	}
	if (w->fi->mark_head == NULL)
		w->fi->mark_tail = NULL;
	w->fi->mark_n -= n;
	w->fi->marking = 1;
	count_attempts(w, mj->tasks, n);
	for (size_t i = 0; i < n; i++)
		mark_item_copy(&mj->items[i], mj->tasks[i]);
	mj->job.run = mark_run;
	mj->job.done_cb = mark_done_cb;
	db_pool_submit(w->db, &mj->job);
}

static void
mark_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	mark_flush(arg);
}

static void
mark_schedule(struct worker *w)
{
	int64_t wait_ms = w->fi->mark_retry_at_ms - clock_mono_ms();
	struct timeval tv = {0, MARK_DELAY_US};

	if (w->fi->marking || evtimer_pending(w->fi->mark_ev, NULL))
		return;
	if (wait_ms > 0) {
		tv.tv_sec = (time_t)(wait_ms / 1000);
		tv.tv_usec = (suseconds_t)(wait_ms % 1000) * 1000;
	} else if (w->fi->mark_n >= MARK_BATCH_MAX) {
		mark_flush(w);
		return;
	}
	evtimer_add(w->fi->mark_ev, &tv);
}

void
firing_start(struct worker *w)
{
	w->fi = xcalloc(1, sizeof(*w->fi));
	w->fi->mark_ev = evtimer_new(w->base, mark_timer_cb, w);
}

void
firing_stop(struct worker *w)
{
	if (w->fi->mark_ev != NULL)
		event_free(w->fi->mark_ev);
	w->fi->mark_ev = NULL;
}

void
firing_free(struct worker *w)
{
	xfree(w->fi);
	w->fi = NULL;
}

size_t
firing_publishing(const struct worker *w)
{
	return w->fi->publishing;
}

void
firing_publishing_done(struct worker *w, size_t n)
{
	w->fi->publishing -= n;
}

size_t
firing_busy(const struct worker *w)
{
	/* Exactly-once records are counted in publishing. */
	return w->fi->publishing + w->fi->mark_n + (w->fi->marking ? 1 : 0);
}
