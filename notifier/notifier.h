#ifndef PROPHET_NOTIFIER_H
#define PROPHET_NOTIFIER_H

#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>

#include <jansson.h>

#include "callback.h"
#include "httpcli.h"
#include "kafka.h"
#include "task.h"
#include "tbucket.h"
#include "trace.h"
#include "whsign.h"

struct cfg;
struct db_pool;
struct httpcli;
struct netguard;
struct hmap;
struct daemon;
struct metric;
struct zk;

#define NOTIFIER_METRICS(X)                                                \
	X(consumed, COUNTER, "prophet_notifier_consumed_total",            \
	  "Kafka messages read (due tasks and retry tasks)")               \
	X(skipped, COUNTER, "prophet_notifier_skipped_total",              \
	  "Messages without a callback (no prophet-callback header, no "   \
	  "route for their topic)")                                        \
	X(cb_ok, COUNTER, "prophet_callbacks_ok_total",                    \
	  "Callbacks answered 2xx")                                        \
	X(cb_http_error, COUNTER, "prophet_callbacks_http_error_total",    \
	  "Callbacks answered with a status other than 2xx")               \
	X(cb_transport_error, COUNTER,                                     \
	  "prophet_callbacks_transport_error_total",                       \
	  "Callbacks without an answer (timeout, connection refused, TLS " \
	  "...)")                                                          \
	X(cb_refused, COUNTER, "prophet_callbacks_refused_total",          \
	  "Callbacks not made: host not allowed or URL unusable")          \
	X(cb_blocked, COUNTER, "prophet_callbacks_blocked_total",          \
	  "Callbacks refused at connect: an address (or a redirect) not "  \
	  "allowed by notifier.callback_networks_allowed")                 \
	X(cb_capped, COUNTER, "prophet_callback_answers_capped_total",     \
	  "Callback answers cut at notifier.max_response_bytes")           \
	X(cb_headers_dropped, COUNTER,                                     \
	  "prophet_callback_headers_dropped_total",                        \
	  "Callback headers left out (framing, hop-by-hop, not a token, "  \
	  "control characters)")                                           \
	X(forged, COUNTER, "prophet_notifier_forged_retries_total",        \
	  "Messages on the retry topic without a valid signature, not "    \
	  "called back")                                                   \
	X(latency, HISTOGRAM, "prophet_callback_duration_seconds",         \
	  "Callback request time, start to answer")                        \
	X(inflight, GAUGE, "prophet_callbacks_inflight",                   \
	  "Callback requests running")                                     \
	X(waiting, GAUGE, "prophet_callbacks_waiting",                     \
	  "Callbacks held back by the concurrency and rate limits")        \
	X(pending, GAUGE, "prophet_notifier_pending_messages",             \
	  "Messages in hand whose offset is not yet committed")            \
	X(retries, COUNTER, "prophet_callback_retries_scheduled_total",    \
	  "Retry tasks submitted (a failed attempt with attempts left)")   \
	X(dead, COUNTER, "prophet_callbacks_dead_lettered_total",          \
	  "Callbacks given up and sent to the dead-letter topic")          \
	X(record_errors, COUNTER, "prophet_notifier_record_errors_total",  \
	  "Failed database writes of callback outcomes (retried)")         \
	X(submit_errors, COUNTER,                                          \
	  "prophet_notifier_retry_submit_errors_total",                    \
	  "Retry submissions the manager did not accept (retried)")        \
	X(db_up, GAUGE, "prophet_notifier_db_connections",                 \
	  "Database connections up")

struct notifier_metrics {
#define NM_FIELD(f, t, n, h) struct metric *f;
	NOTIFIER_METRICS(NM_FIELD)
#undef NM_FIELD
	struct metric *outcomes; /* prophet_callback_outcomes_total{class} */
};

enum nmsg_outcome { NO_NONE, NO_OK, NO_RETRYING, NO_FAILED };

struct npart;
struct nhost;

/* One Kafka message in hand, until its offset may be committed. */
struct nmsg {
	struct notifier *n;
	struct npart *part;
	int64_t offset;
	int done;
	struct nmsg *next; /* in its partition, by offset */

	char id[TASK_ID_MAX + 1]; /* the original task */
	char *topic;		  /* its task topic */
	char *body;
	size_t body_len;
	char *key; /* the Kafka key, or NULL */
	size_t key_len;
	int attempt; /* callback attempt this message carries (1 first) */
	int max_attempts;
	int64_t due_at;
	int64_t occurrence; /* of a recurring task, else 0 */
	struct callback_spec cb;
	char *traceparent; /* the task's W3C trace context, or NULL */
	char *tracestate;
	char trace[48]; /* " trace=<id>" for its log lines, or "" */
	char origin[300];

	struct nhost *host;
	struct nmsg *qnext; /* in its host's queue */
	int64_t queued_us;

	enum nmsg_outcome outcome;
	long http_status;
	const char *cls; /* httpcli_class_name() of the last attempt */
	/* the note recorded: the class, the HTTP status, what we refused */
	char error[CALLBACK_ERROR_MAX + 1];
	char detail[256];   /* what the HTTP client said: the operator's log */
	struct nmsg *rnext; /* in the record queue */
};

struct npart {
	char *topic;
	int32_t partition;
	struct nmsg *head, *tail;
	int64_t committed;
	struct npart *next;
};

struct nhost {
	char origin[300];
	int inflight;
	struct tbucket tb;
	struct nmsg *qh, *qt;
	int active; /* in the active list */
	struct nhost *anext;
};

struct notifier {
	struct cfg *cfg;
	struct event_base *base;
	struct daemon *daemon;
	struct evhttp *http;
	struct db_pool *db;
	struct db_dsn *dsn; /* where db connects, read at start */
	struct httpcli *httpc;
	struct kafka_consumer *consumer;
	struct kafka_producer *dlq;
	char id[128];
	const char *topic_prefix;
	char *retry_ktopic; /* <prefix><retry_topic> */
	char *dlq_ktopic;
	char *submit_url;	/* <notifier.manager_url>/v1/tasks */
	char *token;		/* http.token_file's or http.token, or "" */
	struct whsign sign;	/* callback signing keys (n 0: unsigned) */
	struct netguard *guard; /* callbacks' addresses */
	struct notifier_metrics m;

	/* secret.c: the cluster's retry-signing key, from the database */
	unsigned char retry_key[CALLBACK_KEY_LEN];
	int have_key;
	struct event *secret_ev;
	int secret_tries;

	/* consume.c: the subscription (proto/cover.h) */
	json_t *sub_topics, *sub_patterns, *sub_excluded;
	struct hmap *forged_ids; /* logged once each */
	struct npart *parts;
	size_t pending;
	int held;

	/* flow.c */
	struct hmap *hosts;
	struct nhost *active;
	struct event *pump_ev;
	int inflight;
	size_t queued;

	/* outcome.c */
	struct nmsg *rec_head, *rec_tail;
	size_t rec_n;
	int rec_jobs;
	struct event *rec_ev;
	size_t busy; /* retry submissions and dead-letter sends running */

	/* announce.c */
	struct zk *zk;
	struct event *announce_ev;
	int announcing;
	int64_t announced_session; /* the session that holds our node */
	int64_t refused_session;   /* the session told why it may not */
	int stopping;		   /* 1: draining, 2: tearing down */
	int64_t stop_deadline_ms;
	struct event *stop_ev;
};

/* consume.c */
int consume_start(struct notifier *n, char *err, size_t errlen);
void consume_hold(struct notifier *n);
void consume_stop(struct notifier *n);
/* The message's outcome is durable: its offset may be committed. */
void nmsg_done(struct nmsg *m);
void nmsg_free(struct nmsg *m);

/* announce.c: what this notifier consumes, in ZooKeeper for the
 * managers (proto/cover.h). */
void announce_start(struct notifier *n);
void announce_stop(struct notifier *n);

/* flow.c */
void flow_start(struct notifier *n);
void flow_enqueue(struct notifier *n, struct nmsg *m);
/* Drops what waits (shutdown: redelivered after the restart). */
void flow_abandon(struct notifier *n);
void flow_sweep(struct notifier *n);
void flow_stop(struct notifier *n);

/* secret.c: reads the retry-signing key (the manager creates it),
 * retrying until the database has it; then starts consuming. */
void secret_start(struct notifier *n);
void secret_stop(struct notifier *n);

/* outcome.c */
void outcome_start(struct notifier *n);
/*
 * An attempt's result, or with final a refusal before any attempt. The
 * note is the class, ": HTTP <status>" for an answer, ": <detail>" when
 * given (a fixed text of ours: never what a remote host said).
 */
void outcome_handle(struct nmsg *m, enum httpcli_class cls, long status,
		    const char *detail, int final);
void outcome_stop(struct notifier *n);
/* Delivery reports of the dead-letter producer. */
void outcome_dlq_dr_cb(void *opaque, rd_kafka_resp_err_t err, void *arg);

#endif
