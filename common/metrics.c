#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "metrics.h"
#include "xmalloc.h"

static const double default_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
					 0.05,	0.1,	0.25,  0.5,  1,
					 2.5,	5,	10,    30,   60};

struct metric {
	enum metric_type type;
	char *name;
	char *help;
	char *label;
	const char *const *label_values; /* NULL: the index */
	const char *const *label_sets;	 /* whole label sets, NULL: none */
	size_t nvalues;
	double *values; /* nvalues, or 1 */
	double *bounds; /* histogram */
	size_t nbounds;
	double *counts; /* nbounds + 1 (last = +Inf) */
	double sum;
	double count;
	struct metric *next;
};

static struct metric *registry_head, *registry_tail;

struct metric *
metrics_register(enum metric_type type, const char *name, const char *help,
		 const char *label, size_t nvalues)
{
	struct metric *m = xcalloc(1, sizeof(*m));

	m->type = type;
	m->name = xstrdup(name);
	m->help = xstrdup(help);
	m->label = label ? xstrdup(label) : NULL;
	m->nvalues = label ? nvalues : 1;
	m->values = xcalloc(m->nvalues, sizeof(double));
	if (type == METRIC_HISTOGRAM)
		metric_set_buckets(m, default_buckets,
				   sizeof(default_buckets) / sizeof(double));
	if (registry_tail != NULL)
		registry_tail->next = m;
	else
		registry_head = m;
	registry_tail = m;
	return m;
}

void
metric_set_buckets(struct metric *m, const double *bounds, size_t n)
{
	xfree(m->bounds);
	xfree(m->counts);
	m->bounds = xmemdup(bounds, n * sizeof(double));
	m->nbounds = n;
	m->counts = xcalloc(n + 1, sizeof(double));
}

void
metric_inc(struct metric *m)
{
	m->values[0] += 1;
}

void
metric_add(struct metric *m, double v)
{
	m->values[0] += v;
}

void
metric_set(struct metric *m, double v)
{
	m->values[0] = v;
}

void
metric_set_label_values(struct metric *m, const char *const *values)
{
	m->label_values = values;
}

void
metric_set_label_sets(struct metric *m, const char *const *sets)
{
	m->label_sets = sets;
}

void
metric_vec_inc(struct metric *m, size_t i)
{
	if (i < m->nvalues)
		m->values[i] += 1;
}

void
metric_vec_set(struct metric *m, size_t i, double v)
{
	if (i < m->nvalues)
		m->values[i] = v;
}

void
metric_observe(struct metric *m, double v)
{
	size_t i = 0;

	while (i < m->nbounds && v > m->bounds[i])
		i++;
	m->counts[i] += 1;
	m->sum += v;
	m->count += 1;
}

static void
render_value(struct evbuffer *out, double v)
{
	if (isnan(v))
		evbuffer_add_printf(out, "NaN\n");
	else if (isinf(v))
		evbuffer_add_printf(out, "%sInf\n", v > 0 ? "+" : "-");
	else if (v == floor(v) && fabs(v) < 1e15)
		evbuffer_add_printf(out, "%.0f\n", v);
	else
		evbuffer_add_printf(out, "%.9g\n", v);
}

void
metrics_render(struct evbuffer *out)
{
	static const char *const tnames[] = {"counter", "gauge", "histogram"};

	for (struct metric *m = registry_head; m != NULL; m = m->next) {
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n",
				    m->name, m->help, m->name, tnames[m->type]);
		if (m->type == METRIC_HISTOGRAM) {
			double cum = 0;

			for (size_t i = 0; i < m->nbounds; i++) {
				cum += m->counts[i];
				evbuffer_add_printf(out,
						    "%s_bucket{le=\"%g\"} ",
						    m->name, m->bounds[i]);
				render_value(out, cum);
			}
			cum += m->counts[m->nbounds];
			evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} ",
					    m->name);
			render_value(out, cum);
			evbuffer_add_printf(out, "%s_sum ", m->name);
			render_value(out, m->sum);
			evbuffer_add_printf(out, "%s_count ", m->name);
			render_value(out, m->count);
		} else if (m->label != NULL) {
			for (size_t i = 0; i < m->nvalues; i++) {
				if (m->label_sets != NULL &&
				    m->label_sets[i] == NULL)
					continue;
				if (m->label_sets != NULL)
					evbuffer_add_printf(out, "%s{%s} ",
							    m->name,
							    m->label_sets[i]);
				else if (m->label_values != NULL)
					evbuffer_add_printf(
						out, "%s{%s=\"%s\"} ", m->name,
						m->label, m->label_values[i]);
				else
					evbuffer_add_printf(
						out, "%s{%s=\"%zu\"} ", m->name,
						m->label, i);
				render_value(out, m->values[i]);
			}
		} else {
			evbuffer_add_printf(out, "%s ", m->name);
			render_value(out, m->values[0]);
		}
	}
}

void
metrics_free_all(void)
{
	struct metric *m, *n;

	for (m = registry_head; m != NULL; m = n) {
		n = m->next;
		xfree(m->name);
		xfree(m->help);
		xfree(m->label);
		xfree(m->values);
		xfree(m->bounds);
		xfree(m->counts);
		xfree(m);
	}
	registry_head = registry_tail = NULL;
}
