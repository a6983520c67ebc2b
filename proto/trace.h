#ifndef PROPHET_TRACE_H
#define PROPHET_TRACE_H

#include <stddef.h>

#include <jansson.h>

/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): a task's
 * traceparent and tracestate, kept in its headers under these names, so
 * that they reach every publish (Kafka headers) and the callback request.
 */
#define TRACE_PARENT "traceparent"
#define TRACE_STATE "tracestate"
#define TRACE_PARENT_LEN 55
#define TRACE_STATE_MAX 512
#define TRACE_STATE_MEMBERS_MAX 32
#define TRACE_ID_LEN 32

/* NULL if s (len bytes) is a version-00 traceparent, else why not. */
const char *trace_parent_invalid(const char *s, size_t len);
/* NULL if s is a valid tracestate list, else why not. */
const char *trace_state_invalid(const char *s, size_t len);
/*
 * The " trace=<trace-id>" tail of a log line about a task with these
 * headers (a traceparent among them), or "" (buf >= TRACE_KV_LEN).
 */
#define TRACE_KV_LEN 48
const char *trace_kv(char *buf, size_t len, const json_t *headers);
/* The same from a traceparent value (NULL: none). */
const char *trace_kv_parent(char *buf, size_t len, const char *traceparent);

/*
 * Gives a submission (a JSON object) the trace context of the request
 * that carried it (the HTTP traceparent/tracestate headers, either may be
 * NULL) unless it has its own, as a field or in its headers. Values are
 * set as they are: task_from_json validates them.
 */
void trace_default(json_t *task, const char *traceparent,
		   const char *tracestate);

#endif
