#ifndef PROPHET_METRICS_H
#define PROPHET_METRICS_H

#include <stddef.h>

struct evbuffer;

/*
 * A Prometheus registry. Each daemon declares its metrics in one X-macro
 * table; metrics_register() makes them, metrics_render() writes the text
 * exposition format. Metrics are touched on the loop thread only.
 */
enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metric;

/* label may be NULL (a scalar) or a label name with nvalues values
 * indexed 0..nvalues-1 (label value = the index, e.g. a slot). */
struct metric *metrics_register(enum metric_type type, const char *name,
				const char *help, const char *label,
				size_t nvalues);
/* Label values by index (nvalues strings, borrowed for the metric's
 * life) instead of the index itself, e.g. an outcome class. */
void metric_set_label_values(struct metric *m, const char *const *values);
/* Whole label sets by index instead, each written between the braces as
 * it is (k="v",k2="v2": the caller's values need no escaping); an index
 * whose set is NULL is not written (a series that is not there now).
 * Borrowed; the caller may change them between renders. */
void metric_set_label_sets(struct metric *m, const char *const *sets);
/* Histogram bucket bounds (upper, ascending); default: latency seconds. */
void metric_set_buckets(struct metric *m, const double *bounds, size_t n);
void metric_inc(struct metric *m);
void metric_add(struct metric *m, double v);
void metric_set(struct metric *m, double v);
void metric_observe(struct metric *m, double v);
void metric_vec_set(struct metric *m, size_t i, double v);
void metric_vec_inc(struct metric *m, size_t i);
void metrics_render(struct evbuffer *out);
void metrics_free_all(void);

#endif
