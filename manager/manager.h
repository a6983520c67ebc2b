#ifndef PROPHET_MANAGER_H
#define PROPHET_MANAGER_H

#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/http.h>

#include <jansson.h>

#include "callback.h"
#include "refclock.h"
#include "task.h"

struct cfg;
struct db_pool;
struct db_rows;
struct redis;
struct zk;
struct ingest;
struct daemon;
struct metric;
struct auth;
struct httpcli;
struct pull;
struct schedule;
struct coverage;

#define MANAGER_METRICS(X)                                                  \
	X(accepted, COUNTER, "prophet_tasks_accepted_total",                \
	  "Tasks committed to the database")                                \
	X(replayed, COUNTER, "prophet_tasks_replayed_total",                \
	  "Submissions answered 200 as an identical replay of a stored id") \
	X(conflicts, COUNTER, "prophet_tasks_conflicts_total",              \
	  "Submissions refused 409: same id, different content")            \
	X(rejected, COUNTER, "prophet_tasks_rejected_total",                \
	  "Submissions refused with a 4xx for bad input")                   \
	X(unavailable, COUNTER, "prophet_tasks_unavailable_total",          \
	  "Submissions refused 503 because the database failed")            \
	X(indexed, COUNTER, "prophet_redis_indexed_total",                  \
	  "Tasks written to the Redis index at submit")                     \
	X(index_failures, COUNTER, "prophet_redis_index_failures_total",    \
	  "Tasks not indexed in Redis at submit (left to the loader)")      \
	X(db_batches, COUNTER, "prophet_db_commit_batches_total",           \
	  "Group commits executed")                                         \
	X(db_batch_rows, HISTOGRAM, "prophet_db_commit_batch_rows",         \
	  "Rows per group commit")                                          \
	X(db_isolated, COUNTER, "prophet_db_commit_isolated_total",         \
	  "Group commits failed by one row's values, then committed one "   \
	  "row per transaction")                                            \
	X(db_refused, COUNTER, "prophet_tasks_db_refused_total",            \
	  "Submissions the database refused for their values (400, or "     \
	  "the ingest errors topic)")                                       \
	X(submit_seconds, HISTOGRAM, "prophet_submit_duration_seconds",     \
	  "Time from request to durable answer")                            \
	X(redis_up, GAUGE, "prophet_redis_up", "1 when Redis is connected") \
	X(redis_failovers, COUNTER, "prophet_redis_failovers_total",        \
	  "Redis failovers and restarts (new primary/run_id)")              \
	X(db_up, GAUGE, "prophet_db_connections",                           \
	  "Database connections open (of db.pool_size)")                    \
	X(zk_up, GAUGE, "prophet_zookeeper_up",                             \
	  "1 when the ZooKeeper session is connected")                      \
	X(clock_offset, GAUGE, "prophet_clock_offset_seconds",              \
	  "The reference clock (Redis TIME) minus this host's clock")       \
	X(clock_skewed, GAUGE, "prophet_clock_skewed",                      \
	  "1 while this host's clock is off the reference by more than "    \
	  "worker.max_clock_skew_ms")                                       \
	X(cluster_slots, GAUGE, "prophet_cluster_slots",                    \
	  "Slots the cluster has (cluster.slots)")                          \
	X(pruned_tasks, COUNTER, "prophet_pruned_tasks_total",              \
	  "Finished tasks deleted by the pruner, with their log rows")      \
	X(pruned_logs, COUNTER, "prophet_pruned_log_rows_total",            \
	  "State-log rows deleted by the pruner (with their tasks, or by "  \
	  "task.log_retention)")                                            \
	X(archived, COUNTER, "prophet_archived_tasks_total",                \
	  "Finished tasks published to task.archive_topic before they "     \
	  "were pruned")                                                    \
	X(prune_passes, COUNTER, "prophet_prune_passes_total",              \
	  "Prune passes finished")                                          \
	X(prune_errors, COUNTER, "prophet_prune_errors_total",              \
	  "Prune steps that failed (database or Kafka) and were retried")   \
	X(prune_eligible, GAUGE, "prophet_prune_eligible_tasks",            \
	  "Finished tasks older than task.retention when the current or "   \
	  "last pass started")                                              \
	X(prune_pass_seconds, GAUGE, "prophet_prune_pass_duration_seconds", \
	  "Duration of the last prune pass")                                \
	X(prune_oldest, GAUGE, "prophet_prune_oldest_finished_seconds",     \
	  "Age (since its last change) of the oldest finished task left "   \
	  "after the last pass, except those a retrying callback keeps")    \
	X(pruner, GAUGE, "prophet_pruner",                                  \
	  "1 while this manager holds the pruner lock")                     \
	X(prune_retention, GAUGE, "prophet_prune_retention_seconds",        \
	  "task.retention of this manager (0: finished tasks are kept)")    \
	X(pause_skipped, COUNTER, "prophet_pause_skipped_total",            \
	  "Tasks expired by a resume with policy skip (they fell due "      \
	  "while their topic was paused)")                                  \
	X(cb_uncovered, COUNTER, "prophet_callbacks_uncovered_total",       \
	  "Tasks with a callback accepted on a topic no running notifier "  \
	  "consumes (their callback waits for one)")                        \
	X(notifiers, GAUGE, "prophet_notifiers",                            \
	  "Running notifiers announced in ZooKeeper (<root>/notifiers)")    \
	X(topic_unknown, COUNTER, "prophet_tasks_topic_unknown_total",      \
	  "Submissions refused 422 topic_unknown: their Kafka topic does "  \
	  "not exist")                                                      \
	X(topics_created, COUNTER, "prophet_task_topics_created_total",     \
	  "Task topics created at first use (kafka.create_task_topics)")    \
	X(topic_unverified, COUNTER, "prophet_task_topic_unverified_total", \
	  "Task topic checks the brokers did not answer (unreachable, or "  \
	  "not authorized): the tasks were accepted")

struct manager_metrics {
#define MM_FIELD(f, t, n, h) struct metric *f;
	MANAGER_METRICS(MM_FIELD)
#undef MM_FIELD
	struct metric *slot_pending;	 /* per slot, cluster.c */
	struct metric *slot_lag;	 /* per slot, cluster.c */
	struct metric *slot_redis_bytes; /* per slot, cluster.c */
};

struct index_slot {
	struct manager *mg;
	int slot;
};

struct manager {
	struct cfg *cfg;
	struct event_base *base;
	struct daemon *daemon;
	struct evhttp *http;
	struct db_pool *db;
	struct db_dsn *dsn; /* where db connects, read at start */
	struct redis *redis;
	struct refclock *clock; /* delay_ms: manager_due_now() */
	struct zk *zk;
	struct ingest *ingest;
	char *index_dirty;   /* per slot: an index write was lost */
	int index_refused;   /* Redis answers index writes with errors */
	long index_refusals; /* since it began */
	int index_probing;   /* ingest_index_probe's write in flight */
	struct index_slot *index_slots;
	struct kingest *kingest;
	struct pruner *prune; /* NULL: retention off */
	struct bulk_runner *bulk;
	struct task_limits limits;
	unsigned char retry_key[CALLBACK_KEY_LEN]; /* guard.c */
	int have_retry_key;
	struct auth *auth;     /* bearer tokens; NULL: none configured */
	char **topics_allowed; /* NULL: any valid topic */
	int nslots;
	int64_t horizon_ms;
	int64_t index_margin_ms; /* task.index_margin_ms */
	int64_t bucket_ms;	 /* task.bucket_ms, 0: no buckets */
	int64_t bucket_near_ms;	 /* task.bucket_near_ms */
	int stopping;
	int64_t stop_deadline_ms;
	size_t inflight; /* requests waiting for the DB */
	int listing;	 /* GET /v1/tasks queries at the DB (tasks.c) */
	struct event *stop_ev;
	struct event *sample_ev;       /* backlog gauges, cluster.c */
	int sampling;		       /* backlog reads out */
	struct httpcli *httpc;	       /* lateness.c reads worker metrics */
	struct pull *pull;	       /* pull.c */
	struct metric *m_topic_paused; /* topics.c, per topic */
	struct event *pause_ev;	       /* topics.c: the gauge's reads */
	struct coverage *cover;	       /* cover.c */
	struct manager_metrics m;
	struct schedule *schedule; /* schedule.c */
	struct ktopics *ktopics;   /* ktopics.c; NULL: no topic checks */
};

/* migrate.c: applies pending schema migrations (blocking, startup). */
int migrate_apply(const struct db_dsn *dsn, int wait_s, long long copy_max,
		  char *err, size_t errlen);

/* guard.c: the checks of a valid task's topic against the cluster (the
 * allow-list, Kafka's name length, the notifier's reserved topics; a retry
 * task must carry the notifier's signature). 0, or -1 with err filled. */
int guard_submission(const struct manager *mg, const struct task *t,
		     struct task_error *err);
/* Creates the cluster secret if there is none and reads it (blocking,
 * startup, waiting up to wait_s for the database). */
int guard_start(struct manager *mg, int wait_s, char *err, size_t errlen);

/* ktopics.c: whether a task's Kafka topic exists (kafka.check_task_topics;
 * NULL when off), and its creation at first use
 * (kafka.create_task_topics). */
struct ktopics *ktopics_create(struct manager *mg);
void ktopics_destroy(struct ktopics *k);
/* refused NULL: the task may go on; else the 422 to answer (borrowed for
 * the call). */
typedef void (*ktopics_fn)(const struct task_error *refused, void *arg);
/* Calls cb once, perhaps before returning, perhaps a broker round trip
 * later (the caller counts the wait in mg->inflight). */
void ktopics_check(struct manager *mg, const char *topic, ktopics_fn cb,
		   void *arg);

/* zktree.c: creates and repairs the cluster tree. */
int zktree_ensure(struct zk *z, const char *root, int nslots, char *err,
		  size_t errlen);

/* ingest.c: group commit of submissions. */
struct ingest_req;
typedef void (*ingest_done_fn)(struct ingest_req *r, void *arg);
struct ingest_req {
	struct task task;
	int slot; /* of task.id: set by ingest_submit */
	int64_t started_us;
	/* Outcome: 201 new, 200 replay, 409 conflict, 400 refused by the
	 * database for its values or its size (refused says why, with its
	 * HTTP status), 503 database error (err says which). */
	int result;
	enum task_status stored_status;
	int64_t stored_due_at;
	uint64_t stored_hash; /* 200 and 409: the stored task's content */
	char err[256];
	struct task_error refused;
	ingest_done_fn done_cb;
	void *arg;
	struct ingest_req *next;
};
struct ingest *ingest_create(struct manager *mg);
void ingest_destroy(struct ingest *ing);
void ingest_submit(struct ingest *ing, struct ingest_req *r);
/* Between ingest_plug and ingest_unplug submissions only queue: the tasks
 * of one batch request are considered for a commit together. */
void ingest_plug(struct ingest *ing);
void ingest_unplug(struct ingest *ing);
/* Redis is back: slots that lost index writes get their markers dropped,
 * so their owners rebuild them from the DB. */
void ingest_redis_up(struct manager *mg);
/* Each second: while Redis refuses index writes, asks whether it takes
 * them again. */
void ingest_index_probe(struct manager *mg);
/* Tells the owner of slot to scan it now (a task due very soon). */
void ingest_wake(struct manager *mg, int slot);
/* Submissions waiting or in flight. */
size_t ingest_pending(const struct ingest *ing);
/* The answer to a submission the database refused (result 400): its
 * HTTP status (400 or 413) in *code. */
json_t *ingest_refused_json(struct manager *mg, const struct ingest_req *r,
			    int *code);

/* cluster.c: GET /v1/cluster; the per-slot backlog gauges */
void cluster_get(struct manager *mg, struct evhttp_request *req);
void cluster_sampler_start(struct manager *mg);
void cluster_sampler_stop(struct manager *mg);

/* cover.c: which task topics the running notifiers consume; a callback
 * task on another is counted and logged (rate-limited). */
struct coverage *cover_start(struct manager *mg);
void cover_destroy(struct coverage *c);
void cover_check(struct manager *mg, const struct task *t);
/* {"notifiers":[...],"known":b,"uncovered_total":N,"last_uncovered":
 * {"topic","id","at"}|null}, for GET /v1/cluster. */
json_t *cover_status_json(struct manager *mg);

/* lateness.c: GET /v1/cluster/lateness, the workers' fire lateness
 * histograms summed (scraped from the /metrics their ZooKeeper nodes
 * name) */
void lateness_get(struct manager *mg, struct evhttp_request *req);
/* The client that reads worker metrics; exits if http.tls_ca cannot be
 * loaded. */
void lateness_start(struct manager *mg);
void lateness_shutdown(struct manager *mg);

/* console.c: the web console, GET / and /console/<file>; the files are
 * compiled in from manager/console/ (console_files.c, made by make). */
struct console_file {
	const char *name;
	const char *type;
	const unsigned char *data;
	size_t len;
};
extern const struct console_file console_files[]; /* ends with name NULL */
/* 1 if path is one of the console's files (served without a token). */
int console_path(const char *path);
void console_serve(struct evhttp_request *req, const char *path,
		   enum evhttp_cmd_type m);

/* openapi.c: GET /v1/openapi.json, docs/openapi.yaml as JSON (compiled in
 * as openapi_json.c, made by make with scripts/openapi-json). */
extern const unsigned char openapi_json[];
extern const size_t openapi_json_len;
void openapi_get(struct manager *mg, struct evhttp_request *req);

/* restore.c: POST /v1/admin/restore, GET /v1/admin/restore/{job},
 * POST /v1/tasks/{id}/restore */
void restore_start(struct manager *mg, struct evhttp_request *req);
void restore_launch(struct manager *mg, struct evhttp_request *req, int slot,
		    int expired);
void restore_status(struct manager *mg, struct evhttp_request *req,
		    const char *id);
void restore_one(struct manager *mg, struct evhttp_request *req, const char *id,
		 size_t idlen);

/* tasks.c: DELETE (cancel), PATCH (reschedule) /v1/tasks/{id}, GET
 * /v1/tasks (list) */
void tasks_cancel(struct manager *mg, struct evhttp_request *req,
		  const char *id, size_t idlen);
void tasks_reschedule(struct manager *mg, struct evhttp_request *req,
		      const char *id, size_t idlen);
void tasks_list(struct manager *mg, struct evhttp_request *req);
/* Puts back in its slot's due set, at score, a task whose cancel took it
 * out of Redis but changed nothing in the DB (single and bulk cancel). The
 * caller wakes the slot's owner: it may be below what its scans read. */
/* A one-shot task due at or after this is in no index (the manager's, the
 * loader's, a rebuild's or a restore's window), nor can an indexer hold a
 * read of it: its cancel needs neither Redis nor a tombstone. */
int64_t tasks_out_of_reach(const struct manager *mg, int64_t now);
void tasks_uncancel(struct manager *mg, int slot, const char *id,
		    int64_t score);
/* In the transaction that cancelled retry_id, a task of the notifier's
 * retry topic: the callback it retries (its callback-of header, of the
 * occurrence in callback-occurrence) stops retrying and has failed
 * (callback_status retrying -> failed, with a log row by actor). On a
 * pool thread; 0, or -1 on a DB error. */
struct db_conn;
int tasks_retry_cancelled(struct db_conn *conn, const char *retry_id,
			  const char *actor, int64_t now);
/* GET /v1/schedule, and the gauge of the next minute (schedule.c). */
void schedule_get(struct manager *mg, struct evhttp_request *req);
void schedule_start(struct manager *mg);
void schedule_stop(struct manager *mg);
void schedule_destroy(struct manager *mg);

/* prune.c: retention (docs/architecture.md, "Retention"); NULL when
 * task.retention and task.log_retention are 0. */
struct pruner;
struct pruner *prune_create(struct manager *mg);
void prune_stop(struct pruner *p);
void prune_destroy(struct pruner *p);
/* Every ZooKeeper event of the manager's session (the lock's watch). */
void prune_zk_event(struct manager *mg, int type, int state, const char *path);
/* GET /v1/admin/prune, POST /v1/admin/prune {"dry_run":bool} */
void prune_get(struct manager *mg, struct evhttp_request *req);
void prune_post(struct manager *mg, struct evhttp_request *req);

/* bulk.c: bulk cancel and reschedule by filter (docs/architecture.md,
 * "Bulk jobs"): POST /v1/tasks/bulk, GET /v1/admin/jobs[/{id}], and the
 * runner that does the jobs, one manager at a time. */
struct bulk_runner;
struct bulk_runner *bulk_create(struct manager *mg);
/* SIGTERM: no chunk starts after the current one. */
void bulk_stop(struct bulk_runner *p);
void bulk_destroy(struct bulk_runner *p);
void bulk_post(struct manager *mg, struct evhttp_request *req);
void bulk_jobs_list(struct manager *mg, struct evhttp_request *req);
/* POST /v1/admin/jobs/{id}/cancel: a running or queued job stops (its
 * chunk in progress rolls back); 409 if it is not running. */
void bulk_job_cancel(struct manager *mg, struct evhttp_request *req,
		     const char *id, size_t idlen);
void bulk_job_get(struct manager *mg, struct evhttp_request *req,
		  const char *id, size_t idlen);

/* kingest.c: task submissions from kafka.ingest_topic (NULL if unset) */
struct kingest *kingest_create(struct manager *mg, char *err, size_t errlen);
void kingest_stop(struct kingest *k);
void kingest_destroy(struct kingest *k);

/* pull.c: pull consumption over HTTP (GET /v1/topics/{topic}/next, POST
 * /v1/topics/{topic}/ack, mykit's GET /get/{topic}) from a Kafka consumer
 * per pull group and topic. */
struct pull *pull_create(struct manager *mg);
/* SIGTERM: answers the waiting requests; new ones get 503. */
void pull_stop(struct pull *p);
/* Leaves every Kafka group (their offsets stay committed) and frees. */
void pull_destroy(struct pull *p);
void pull_next(struct manager *mg, struct evhttp_request *req,
	       const char *topic, size_t tlen);
void pull_ack(struct manager *mg, struct evhttp_request *req, const char *topic,
	      size_t tlen);
void pull_mykit_get(struct manager *mg, struct evhttp_request *req,
		    const char *topic, size_t tlen);

/* topics.c: POST /v1/topics/{topic}/pause and /resume, GET /v1/topics,
 * and the prophet_topic_paused gauge */
void topics_pause(struct manager *mg, struct evhttp_request *req,
		  const char *topic, size_t n);
void topics_resume(struct manager *mg, struct evhttp_request *req,
		   const char *topic, size_t n);
void topics_list(struct manager *mg, struct evhttp_request *req);
void topics_start(struct manager *mg);
void topics_stop(struct manager *mg);
/* api.c */
/* Now, for a due time given relative (delay_ms): the later of this
 * host's clock and the reference (common/refclock.h), so a clock behind
 * cannot make a delay short. */
static inline int64_t
manager_due_now(const struct manager *mg)
{
	return refclock_due_ms(mg->clock);
}

void api_register(struct manager *mg);
/* The route table, a line a route (--print-routes). */
void api_print_routes(FILE *out);
int api_topic_allowed(const struct manager *mg, const char *topic);
/* 1 if id is valid; else answers 400 and returns 0. */
int api_check_id(struct evhttp_request *req, const char *id, size_t idlen);
void api_submit(struct manager *mg, struct evhttp_request *req, json_t *task);
/* The request's traceparent/tracestate headers into a task (JSON) that has
 * no trace context of its own. */
void api_request_trace(struct evhttp_request *req, json_t *task);
/* A task as GET /v1/tasks/{id} answers it: row `row` of SQL_TASK_GET's
 * columns, and with log (n rows from first, SQL_TASK_LOG_GET's columns
 * from col) its state log. Pure: also on pool threads. */
json_t *api_task_json(const struct db_rows *task, size_t row,
		      const struct db_rows *log, size_t first, size_t n,
		      size_t col);
json_t *api_body_json(struct manager *mg, struct evhttp_request *req);
/* An optional JSON object body (none: *out NULL); -1 when it is not one,
 * after the 400 answer. */
int api_body_object(struct evhttp_request *req, size_t flags, json_t **out);
/* Only the fields named may be in the object: nothing is accepted and
 * ignored (a misspelt member is not read as absent). 0 after the 400. */
int api_fields_known(struct evhttp_request *req, json_t *in,
		     const char *const *names);

/* mykit.c: the mykit-delay compatible routes (http_handler_fn). */
void mykit_push(void *ctx, struct evhttp_request *req, const char *a, size_t n);
void mykit_delete(void *ctx, struct evhttp_request *req, const char *a,
		  size_t n);
void mykit_restore(void *ctx, struct evhttp_request *req, const char *a,
		   size_t n);
void mykit_restore_job(void *ctx, struct evhttp_request *req, const char *a,
		       size_t n);
void mykit_clear_all(void *ctx, struct evhttp_request *req, const char *a,
		     size_t n);
void mykit_get(void *ctx, struct evhttp_request *req, const char *a, size_t n);
/* DELETE the Redis index of every slot (workers rebuild it from the DB). */
void restore_clear_all(struct manager *mg, struct evhttp_request *req);

#endif
