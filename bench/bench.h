#ifndef PROPHET_BENCH_H
#define PROPHET_BENCH_H

/*
 * prophet-bench: drives a running Prophet cluster from the outside (HTTP API
 * in, Kafka out) and measures the raw limits of the servers underneath it.
 * Private header of the bench program; nothing here is linked into the
 * daemons.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h" /* clock_mono_us */

/* ------------------------------------------------------------ options --- */

struct bench_opts {
	const char *scenario;
	const char *label;	  /* "scenario" value of the JSON line */
	const char *api;	  /* http://host:port */
	const char *brokers;	  /* Kafka bootstrap servers */
	const char *topic_prefix; /* the manager's kafka.topic_prefix */
	const char *topic;   /* task topic; default bench-<scenario>-<tag> */
	const char *db;	     /* mysql://user:pass@host:port/db */
	const char *redis;   /* host:port/db or redis://host:port/db */
	const char *zk;	     /* ZooKeeper hosts (cleanup) */
	const char *zk_root; /* ZooKeeper root to delete (cleanup) */
	const char *worker_metrics; /* comma-separated worker base URLs */
	char tag[16];		    /* makes ids and default topics unique */
	double rate;		    /* steady: tasks due per second */
	int rate_set;		    /* --rate given (kafka-raw: paced) */
	double duration;	    /* seconds */
	long count;		    /* tasks */
	long near_count;	    /* far: tasks inside the horizon */
	int conns;	   /* HTTP connections / DB or producer threads */
	int clients;	   /* pull: pull clients (threads) */
	int batch;	   /* tasks per POST /v1/tasks/batch */
	int single;	   /* use POST /v1/tasks */
	int preload;	   /* steady: submit everything first */
	int body_size;	   /* bytes of task body */
	long lead_ms;	   /* submit this long before due */
	long delay_ms;	   /* ingest/far: delay of the tasks */
	long spread_ms;	   /* burst: due times within this window */
	double grace;	   /* seconds to wait for stragglers */
	double settle;	   /* seconds to wait for late duplicates */
	int linger_ms;	   /* kafka-raw: producer linger.ms */
	int rows_per_stmt; /* db-raw: rows per INSERT */
	int slots;	   /* cluster.slots (16) */
	int quiet;	   /* no progress lines */
	const char *callback_url; /* notifier: tasks carry this callback */
	/* failover: the workers the scenario runs itself */
	const char *worker_bin;
	const char *worker_conf;
	const char *worker_log_dir;  /* NULL: their output to /dev/null */
	const char *worker_sets[32]; /* extra --set K=V for them */
	int nworker_sets;
	int workers;
	int kills;
	long session_timeout_ms;
	double pause; /* seconds between a settled cluster and a kill */
	/* steady: the DB's row counts every sample_s seconds, and lateness
	 * per window_s of due time (the soak) */
	double sample_s;
	double window_s;
	const char *ledger_out; /* steady: the per-task ledger, as TSV */
	/* backlog: drop and re-add the retention index on the loaded table
	 * (what migration 4 costs); horizon: flush the Redis db after the
	 * promotion and time the rebuild */
	int alter_index;
	int flush;
};

extern volatile int bench_stop; /* set by SIGINT/SIGTERM */

/* -------------------------------------------------------------- clock --- */

int64_t now_us(void); /* CLOCK_REALTIME, comparable with Prophet's */
void sleep_until_mono_us(int64_t t);

/* ------------------------------------------------------------- report --- */

/*
 * The result of one scenario: ordered named values, printed as a two-column
 * table (human) and as one JSON line {"scenario":...,"key":value,...}.
 */
struct report;

struct report *report_create(const char *scenario);
void report_str(struct report *r, const char *key, const char *label,
		const char *v);
void report_int(struct report *r, const char *key, const char *label,
		long long v);
/* fmt is the printf format of the table cell, e.g. "%.1f". */
void report_num(struct report *r, const char *key, const char *label, double v,
		const char *fmt);
/* p50/p99/p99.9/max (and mean) of values, keys "<key>_p50_ms" ... */
void report_latency(struct report *r, const char *key, const char *label,
		    double *values, size_t n);
/* A JSON value (taken over; arrays of samples) with its table cell. */
struct json_t;
void report_json(struct report *r, const char *key, const char *label,
		 struct json_t *v, const char *cell);
void report_print(struct report *r);
void report_destroy(struct report *r);

/* Nearest-rank percentile of sorted values (n > 0). */
double pct_sorted(const double *v, size_t n, double p);
void sort_doubles(double *v, size_t n);

/* Progress on stderr: fn() writes one line's text into buf, every second. */
typedef void (*progress_fn)(void *arg, char *buf, size_t len);
struct progress;
struct progress *progress_start(const struct bench_opts *o, progress_fn fn,
				void *arg);
void progress_stop(struct progress *p);
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --------------------------------------------------------------- http --- */

/*
 * One HTTP/1.1 answer, parsed as its bytes arrive (no reads of its own):
 * status line, headers, then a Content-Length, chunked or until-EOF body.
 * Reused from answer to answer; the buffers are the struct's.
 */
struct http_resp {
	int status;
	int close_after; /* Connection: close, HTTP/1.0 or body until EOF */
	int state;
	size_t left;	 /* body or chunk bytes still to come */
	char *buf;	 /* received bytes */
	size_t len, cap; /* of buf */
	size_t pos;	 /* parsed up to */
	char *body;	 /* decoded body, NUL-terminated */
	size_t body_len, body_cap;
};

void http_resp_reset(struct http_resp *r); /* before each answer */
void http_resp_free(struct http_resp *r);
/* Where to read the next bytes to, and how many fit (at least 64 KB). */
char *http_resp_space(struct http_resp *r, size_t *room);
/* n bytes were read into the space: 1 answer complete, 0 more needed, -1
 * not HTTP. */
int http_resp_feed(struct http_resp *r, size_t n);
/* The peer closed: 1 if that ends the answer (body until EOF), else -1. */
int http_resp_eof(struct http_resp *r);

/* One kept-alive HTTP/1.1 connection over a blocking socket. */
struct httpc;

struct httpc *httpc_create(const char *base_url, char *err, size_t errlen);
void httpc_destroy(struct httpc *c);
/*
 * Sends a request (body may be NULL) and reads the answer. Reconnects once
 * if a kept-alive connection turned out closed. Returns the HTTP status or
 * -1 (err filled). The answer body stays valid until the next call.
 */
int httpc_request(struct httpc *c, const char *method, const char *path,
		  const char *body, size_t len, const char **resp,
		  size_t *resp_len, char *err, size_t errlen);
/* Parses "http://host:port[/...]". */
int http_base_parse(const char *url, char *host, size_t hostlen, int *port);

/* ------------------------------------------------------------- ledger --- */

/*
 * One record per task of a scenario, indexed by the number in its id
 * ("<prefix><seq>"). Submitters set accept_us; the Kafka consumer sets the
 * rest.
 */
struct ledger {
	char prefix[96];
	size_t n;
	int64_t *due_ms;    /* planned due time */
	int64_t *accept_us; /* answer 2xx received (0: not accepted) */
	int64_t *fired_ms;  /* prophet-fired-at of the first copy */
	int64_t *recv_us;   /* consumer receive time of the first copy */
	uint16_t *copies;   /* copies received */
	atomic_long accepted;
	atomic_long received; /* distinct ids */
	atomic_long dups;     /* extra copies */
	atomic_long foreign;  /* messages that are not ours */
	atomic_long early;    /* fired-at or receive before due */
	/* Optional, set before the consumer starts: called on the consumer
	 * thread for every message of ours, copies included, with its
	 * prophet-slot and prophet-epoch (-1 if absent). */
	void (*msg_cb)(void *arg, size_t seq, int64_t slot, int64_t epoch,
		       int64_t fired_ms);
	void *msg_arg;
};

struct ledger *ledger_create(const char *prefix, size_t n);
void ledger_destroy(struct ledger *l);
/* Writes the id of task seq into buf; returns its length. */
int ledger_id(const struct ledger *l, size_t seq, char *buf, size_t len);

/* ------------------------------------------------------------ kafka --- */

/* Creates the topic unless it exists; waits until it has partitions. */
/* librdkafka properties ("key=value" lines, as kcat -F reads) for every
 * Kafka client of this run: a secure cluster's security settings. */
void kafka_conf_file_set(const char *path);
/* A bearer token sent with every API request ("": none). */
void httpc_token_set(const char *token);
/* "Authorization: Bearer <token>\r\n", or "" without a token. */
const char *httpc_auth_header(void);
int kafka_topic_ensure(const char *brokers, const char *topic, char *err,
		       size_t errlen);
/* Deletes every topic whose name starts with prefix (non-empty). */
int kafka_topics_delete_prefix(const char *brokers, const char *prefix);

/* Reads a topic from the beginning on its own thread into a ledger. */
struct consumer;
struct consumer *consumer_start(const char *brokers, const char *topic,
				struct ledger *l, char *err, size_t errlen);
/* Messages seen so far, ours or not. */
long consumer_messages(const struct consumer *c);
void consumer_stop(struct consumer *c);

/*
 * Waits until every accepted task was received, or until grace seconds
 * after last_due_ms with no message for 3 s; then settle seconds for
 * duplicates.
 */
void wait_received(const struct bench_opts *o, struct ledger *l,
		   struct consumer *c, int64_t last_due_ms);

/* Lateness, losses and duplicates of the accepted tasks of a ledger. */
struct fire_stats {
	long accepted, received, lost, dups, early, late_submits;
	int64_t min_fired_ms, max_fired_ms, max_recv_us;
};
struct report;
void fire_analyse(struct report *r, struct ledger *l, struct fire_stats *fs);

/* ---------------------------------------------------------- submitter --- */

/*
 * Sends the tasks of a ledger through the API on conns kept-alive
 * connections (one request outstanding on each), driven by min(conns, 2)
 * event-loop threads, batch by batch: batch b holds tasks
 * [b*batch, (b+1)*batch) and is not sent before send_mono_us[b] (NULL: as
 * fast as possible).
 */
struct submit_stats {
	long requests;
	long tasks_sent;
	long accepted; /* 201 */
	long replayed; /* 200 */
	long conflicts;
	long rejected;	  /* other 4xx */
	long unavailable; /* 5xx */
	long neterr;	  /* transport errors / unparsable answers */
	long late_sends;  /* batches sent > 50 ms after their planned time */
	double max_send_lag_ms;
	int64_t first_send_mono, last_done_mono;
	double *req_ms; /* per request latency */
	size_t nreq;
	char last_error[256];
};

struct submitter;
struct submitter *submitter_start(const struct bench_opts *o, struct ledger *l,
				  const char *topic, int batch,
				  const int64_t *send_mono_us,
				  double stop_after_s);
long submitter_sent(struct submitter *s);
/* A load's progress line: "<what>: sent N/M, accepted K". */
struct ingest_progress {
	struct submitter *s;
	struct ledger *l;
	const char *what;
};
void ingest_progress_cb(void *arg, char *buf, size_t len);
/* Sends no further batch; submitter_join() still has to be called. */
void submitter_halt(struct submitter *s);
/* Waits for the threads; fills st (req_ms is the caller's to free). */
void submitter_join(struct submitter *s, struct submit_stats *st);
void submit_report(struct report *r, const struct submit_stats *st);

/* ---------------------------------------------------------- scenarios --- */

/* Names of a scenario's topic and ids, from --topic, --label and --tag. */
struct names {
	char topic[200];       /* task topic */
	char kafka_topic[400]; /* <prefix><topic> */
	char id_prefix[96];    /* <tag>-<label>- */
};
void names_init(const struct bench_opts *o, struct names *nm);
/* Starts the consumer of the scenario's topic and awaits a warm-up task. */
int start_consumer(const struct bench_opts *o, const struct names *nm,
		   struct ledger *l, struct consumer **c);
/* Waits until Redis holds no task in flight; seconds waited or -1. */
double quiesce(const struct bench_opts *o);
void report_quiesce(struct report *r, double waited_s);

int scen_ingest(struct bench_opts *o);
int scen_steady(struct bench_opts *o);
int scen_burst(struct bench_opts *o);
int scen_far(struct bench_opts *o);
int scen_kafka_raw(struct bench_opts *o);
int scen_db_raw(struct bench_opts *o);
int scen_cleanup(struct bench_opts *o);
int scen_notifier(struct bench_opts *o);
int scen_failover(struct bench_opts *o);
int scen_storage(struct bench_opts *o);
int scen_backlog(struct bench_opts *o);
int scen_horizon(struct bench_opts *o);

/* lifecycle.c: the soak's samples (steady with --sample-db). */
struct db_sampler;
struct db_sampler *db_sampler_start(const struct bench_opts *o);
/* Stops the thread and reports the samples (NULL: nothing). */
void db_sampler_report(struct db_sampler *s, struct report *r);
/* Fired-at lateness p50/p99 per window of due time. */
void lateness_windows(struct report *r, const struct ledger *l,
		      double window_s);
int scen_pull(struct bench_opts *o);

/* ------------------------------------------------------------- stores --- */

/* Redis (hiredis): memory of the selected db and of the Prophet keys. */
struct redis_mem {
	long long used_memory; /* INFO memory, whole server */
	long long keys_bytes;  /* sum of MEMORY USAGE over the db's keys */
	long long keys;	       /* DBSIZE */
	long long due_ids;     /* sum of ZCARD {prophet:N}:due */
	long long inflight;    /* sum of ZCARD {prophet:N}:inflight */
	long long payloads;    /* sum of HLEN {prophet:N}:task */
	long long bucketed;    /* sum of LLEN {prophet:N}:b:* (buckets) */
};
/* with_usage: also MEMORY USAGE of every key (walks every element, so
 * it is slow on big keys). */
int redis_mem_sample(const char *redis, struct redis_mem *m, int with_usage,
		     char *err, size_t errlen);
/* FLUSHDB of the db (the bench's own). */
int redis_flush(const char *redis, char *err, size_t errlen);
/* How many of the ids <prefix>0 .. <prefix>n-1 are in the due ZSETs and
 * the payload HASHes of their slots. */
int redis_ids_present(const char *redis, const char *prefix, long n, int nslots,
		      long *in_due, long *in_task, char *err, size_t errlen);
/* A connection to the bench's database (mysql://...), or NULL. */
struct st_mysql *bench_db_open(const char *url, char *err, size_t errlen);
/* Rows of the tasks table whose id starts with prefix, or -1. */
long long db_count_prefix(const char *db_url, const char *prefix, char *err,
			  size_t errlen);

#endif
