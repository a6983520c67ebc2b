#ifndef PROPHET_PAYLOAD_H
#define PROPHET_PAYLOAD_H

#include <stddef.h>

#include "task.h"

/*
 * The Redis copy of a task: exactly what a worker needs to publish it,
 * as compact JSON {"t":topic,"b":body,"d":due_at,"k":key,"h":headers,
 * "x":ttl_ms,"a":attempt}.
 */
char *payload_encode(const struct task *t, size_t *lenp);
/* Fills topic, body, key, headers, due_at, ttl_ms, attempt of t (zeroed
 * first; id left to the caller). */
int payload_decode(const char *s, size_t len, struct task *t);

#endif
