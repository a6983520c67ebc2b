#ifndef PROPHET_TASK_H
#define PROPHET_TASK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The task model of CONTRACT.md, its JSON codec and its validation. */

#define TASK_ID_MAX 128
#define TASK_TOPIC_MAX 200
#define TASK_KEY_MAX 1024
#define TASK_HEADERS_MAX 32
#define TASK_HEADER_NAME_MAX 128
#define TASK_HEADER_VALUE_MAX 4096
#define TASK_URL_MAX 2048
/* What the database columns hold (proto/schema.c): the encoded JSON of
 * headers and of callback are TEXT (task.max_body_bytes is bounded by the
 * body's MEDIUMBLOB). A submission is refused before it could fail there. */
#define TASK_HEADERS_JSON_MAX 65535
#define TASK_CALLBACK_JSON_MAX 65535

enum task_status {
	TASK_SCHEDULED,
	TASK_FIRING,
	TASK_DELIVERED,
	TASK_CANCELLED,
	TASK_EXPIRED,
	TASK__STATUS_COUNT
};

enum task_callback_status {
	TASK_CB_NONE,
	TASK_CB_OK,
	TASK_CB_RETRYING,
	TASK_CB_FAILED,
	TASK__CB_COUNT
};

/* What a recurring task does about occurrences missed in an outage. */
enum task_misfire {
	TASK_MISFIRE_NONE, /* not a recurring task */
	TASK_MISFIRE_FIRE_ONCE,
	TASK_MISFIRE_FIRE_ALL,
	TASK_MISFIRE_SKIP,
	TASK__MISFIRE_COUNT
};

struct task {
	char id[TASK_ID_MAX + 1];
	int id_given; /* the client chose the id */
	char *topic;
	char *body;
	size_t body_len;
	int64_t due_at;	  /* ms since the epoch */
	int64_t delay_ms; /* as submitted, or -1 when due_at was given */
	char *key;	  /* Kafka key; NULL means the id */
	json_t *headers;  /* object of strings, or NULL */
	json_t *callback; /* object, or NULL */
	int max_attempts; /* 0: the configured default */
	int64_t ttl_ms;	  /* 0: never expires */
	char *cron;
	char *timezone;
	/* Recurring tasks (cron set): due_at is the next occurrence. */
	enum task_misfire misfire;
	int64_t start_at;	 /* 0: from submission */
	int64_t end_at;		 /* 0: open-ended */
	int64_t max_occurrences; /* 0: unlimited */
	int64_t occurrences;	 /* published so far */
	uint64_t content_hash;	 /* of the submission, for idempotent replays */

	/* Stored state. */
	enum task_status status;
	enum task_callback_status callback_status;
	int attempt;
	int64_t epoch;
	char *owner;
	int64_t created_at;
	int64_t updated_at;
	int64_t fired_at;     /* 0: not yet */
	int64_t delivered_at; /* 0: not yet */
};

struct tz;
/*
 * Finds an IANA time zone by name, or NULL with err filled (common/tz.h's
 * tz_get: the daemons pass it in, so this file reads no zone files).
 */
typedef const struct tz *(*task_zone_fn)(const char *name, char *err,
					 size_t errlen);

struct task_limits {
	size_t max_body;
	int64_t max_delay_ms;
	const char *callback_hosts; /* allow-list (callback.h); NULL: any */
	/* Encoded JSON of headers and of callback.headers (compact, sorted
	 * keys, as stored); 0: TASK_HEADERS_JSON_MAX. */
	size_t max_headers;
	/* A recurring task's timezone; NULL: every zone is refused. */
	task_zone_fn zone;
};

/* A client error: HTTP status, machine code, offending field, message. */
struct task_error {
	int http;
	char code[32];
	char field[64];
	char message[256];
};

/*
 * Validates a submission and fills t (zeroed first). now_ms resolves
 * delay_ms and bounds due_at. Returns 0, or -1 with err filled and t
 * cleared.
 */
int task_from_json(const json_t *in, const struct task_limits *lim,
		   int64_t now_ms, struct task *t, struct task_error *err);
/*
 * The submission hot path (proto/tasktext.c): a task in its common shape
 * (id, topic, body, due_at or delay_ms, key, max_attempts, ttl_ms; no
 * null, no fraction, escapes only in body) read straight from its JSON
 * text. Returns 1 with t filled exactly as task_from_json would fill it
 * from jansson's parse of the same text (JSON_REJECT_DUPLICATES |
 * JSON_ALLOW_NUL), or 0, t cleared, for anything else, every error
 * included: the caller then takes the jansson path, which answers.
 * default_id (or NULL) is the id of a task that gives none, as if the
 * text had it.
 */
int task_from_text(const char *text, size_t len, const struct task_limits *lim,
		   int64_t now_ms, const char *default_id, struct task *t);
/*
 * The same for a batch, {"tasks":[...]} of 1 to max_tasks tasks that all
 * take the hot path: their count with *out an array of them (the caller
 * frees it after taking the tasks over), or 0 and *out NULL.
 */
size_t task_batch_from_text(const char *text, size_t len,
			    const struct task_limits *lim, int64_t now_ms,
			    size_t max_tasks, struct task **out);
/* The hash of a submission as its client wrote it (idempotent replays
 * compare it); task_from_json sets it. */
uint64_t task_content_hash(const struct task *t);
/* The public view of a task (GET /v1/tasks/{id}); zone finds a recurring
 * task's zone for its next occurrences (NULL: none listed). */
json_t *task_to_json(const struct task *t, task_zone_fn zone);
void task_clear(struct task *t);

const char *task_status_name(enum task_status s);
int task_status_parse(const char *s, enum task_status *out);
/* "fire_once", "fire_all", "skip" ("" for TASK_MISFIRE_NONE). */
const char *task_misfire_name(enum task_misfire m);
int task_misfire_parse(const char *s, enum task_misfire *out);
/*
 * The next occurrence of a recurring task in zone z strictly after
 * after_ms and not after end_at (0: no end), or -1 if there is none. -2
 * with err filled when the expression is unusable (never for a stored
 * task), -2 also for a NULL z (err left as the zone's lookup filled it).
 */
int64_t task_cron_next(const char *cron, const struct tz *z, int64_t after_ms,
		       int64_t end_at, char *err, size_t errlen);
const char *task_callback_status_name(enum task_callback_status s);
int task_callback_status_parse(const char *s, enum task_callback_status *out);

/* 1-128 chars of [A-Za-z0-9._:-]. */
int task_id_valid(const char *id, size_t len);
/* Kafka topic rules: 1-TASK_TOPIC_MAX of [A-Za-z0-9._-], not "." or "..". */
int task_topic_valid(const char *topic, size_t len);
/* Fills buf (>= 27 bytes) with a new 26-char time-ordered unique id. */
void task_id_generate(char *buf, int64_t now_ms);

/* Fills err; returns -1 so callers can `return task_error_set(...)`. */
int task_error_set(struct task_error *err, int http, const char *code,
		   const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* {"error":{"code","message","field"}} */
json_t *task_error_json(const struct task_error *err);

#endif
