#ifndef PROPHET_PAYLOAD_H
#define PROPHET_PAYLOAD_H

#include <stddef.h>

#include "task.h"

/*
 * The Redis copy of a task: exactly what a worker needs to publish it,
 * as compact JSON {"t":topic,"b":body,"d":due_at,"k":key,"h":headers,
 * "x":ttl_ms,"a":attempt,"m":misfire policy of a recurring task,
 * "c":callback,"n":max_attempts}.
 */
char *payload_encode(const struct task *t, size_t *lenp);
/* Fills topic, body, key, headers, due_at, ttl_ms, attempt, misfire,
 * callback, max_attempts of t (zeroed first; id left to the caller). */
int payload_decode(const char *s, size_t len, struct task *t);
/* The same through a jansson tree: payload_decode's fallback for real
 * numbers and raw NUL bytes, and the unit tests' reference. t must be
 * zeroed. */
int payload_decode_tree(const char *s, size_t len, struct task *t);

struct db_rows;

/*
 * Columns of a task row as every index-building query selects them
 * (SQL_TASK_COLS_INDEX): id, topic, msg_key, body, headers, due_at,
 * ttl_ms, attempt, misfire, callback, max_attempts.
 */
enum payload_col {
	PC_ID,
	PC_TOPIC,
	PC_KEY,
	PC_BODY,
	PC_HEADERS,
	PC_DUE_AT,
	PC_TTL_MS,
	PC_ATTEMPT,
	PC_MISFIRE, /* NULL unless recurring */
	PC_CALLBACK,
	PC_MAX_ATTEMPTS,
	PC__COUNT /* a query's first extra column */
};

/* Fills t's publishable fields from such a row; the strings are borrowed
 * from rows except headers (release with payload_row_clear). */
void payload_row_task(const struct db_rows *rows, size_t i, struct task *t);
void payload_row_clear(struct task *t);
/* The Redis payload of such a row. */
char *payload_from_row(const struct db_rows *rows, size_t i, size_t *lenp);

#endif
