/* Scenario results (table + JSON line), percentiles, progress lines. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "xmalloc.h"

struct report_row {
	char *label;
	char *cell;
};

struct report {
	json_t *json;
	struct report_row *rows;
	size_t n, cap;
};

struct report *
report_create(const char *scenario)
{
	struct report *r = xcalloc(1, sizeof(*r));

	r->json = json_object();
	json_object_set_new(r->json, "scenario", json_string(scenario));
	return r;
}

static void
add_row(struct report *r, const char *label, char *cell)
{
	if (label == NULL) {
		xfree(cell);
		return;
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 32;
		r->rows = xrealloc(r->rows, r->cap * sizeof(*r->rows));
	}
	r->rows[r->n].label = xstrdup(label);
	r->rows[r->n].cell = cell;
	r->n++;
}

void
report_str(struct report *r, const char *key, const char *label, const char *v)
{
	json_object_set_new(r->json, key, v ? json_string(v) : json_null());
	add_row(r, label, xstrdup(v ? v : "-"));
}

void
report_int(struct report *r, const char *key, const char *label, long long v)
{
	json_object_set_new(r->json, key, json_integer(v));
	add_row(r, label, xasprintf("%lld", v));
}

void
report_num(struct report *r, const char *key, const char *label, double v,
	   const char *fmt)
{
	if (!isfinite(v)) {
		json_object_set_new(r->json, key, json_null());
		add_row(r, label, xstrdup("-"));
		return;
	}
	/* Three decimals are plenty; keeps the JSON line short. */
	json_object_set_new(r->json, key, json_real(round(v * 1000) / 1000));
	add_row(r, label, xasprintf(fmt, v));
}

void
report_json(struct report *r, const char *key, const char *label, json_t *v,
	    const char *cell)
{
	json_object_set_new(r->json, key, v ? v : json_null());
	add_row(r, label, xstrdup(cell ? cell : "-"));
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void
sort_doubles(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double
pct_sorted(const double *v, size_t n, double p)
{
	size_t k = (size_t)ceil(p / 100.0 * (double)n);

	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

void
report_latency(struct report *r, const char *key, const char *label, double *v,
	       size_t n)
{
	static const struct {
		const char *suffix;
		double p;
	} ps[] = {{"p50", 50}, {"p99", 99}, {"p999", 99.9}, {"max", 100}};
	double sum = 0;
	char k[96], l[160];

	if (n == 0) {
		for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
			snprintf(k, sizeof(k), "%s_%s_ms", key, ps[i].suffix);
			json_object_set_new(r->json, k, json_null());
		}
		snprintf(l, sizeof(l), "%s (ms)", label);
		add_row(r, l, xstrdup("- (no samples)"));
		return;
	}
	sort_doubles(v, n);
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	snprintf(k, sizeof(k), "%s_mean_ms", key);
	json_object_set_new(r->json, k,
			    json_real(round(sum / (double)n * 1000) / 1000));
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		double x = pct_sorted(v, n, ps[i].p);

		snprintf(k, sizeof(k), "%s_%s_ms", key, ps[i].suffix);
		json_object_set_new(r->json, k,
				    json_real(round(x * 1000) / 1000));
	}
	snprintf(l, sizeof(l), "%s p50/p99/p99.9/max (ms)", label);
	add_row(r, l,
		xasprintf("%.1f / %.1f / %.1f / %.1f", pct_sorted(v, n, 50),
			  pct_sorted(v, n, 99), pct_sorted(v, n, 99.9),
			  v[n - 1]));
}

void
report_print(struct report *r)
{
	size_t w = 0;
	char *line;

	for (size_t i = 0; i < r->n; i++)
		if (strlen(r->rows[i].label) > w)
			w = strlen(r->rows[i].label);
	printf("\n== %s ==\n",
	       json_string_value(json_object_get(r->json, "scenario")));
	for (size_t i = 0; i < r->n; i++)
		printf("  %-*s  %s\n", (int)w, r->rows[i].label,
		       r->rows[i].cell);
	line = json_dumps(r->json, JSON_COMPACT | JSON_PRESERVE_ORDER |
					   JSON_REAL_PRECISION(12));
	printf("%s\n", line);
	free(line);
	fflush(stdout);
}

void
report_destroy(struct report *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->n; i++) {
		xfree(r->rows[i].label);
		xfree(r->rows[i].cell);
	}
	xfree(r->rows);
	json_decref(r->json);
	xfree(r);
}

void
note(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	fputs("prophet-bench: ", stderr);
	fwrite(buf, 1, (size_t)n, stderr);
}

struct progress {
	pthread_t thread;
	progress_fn fn;
	void *arg;
	int64_t t0;
	atomic_int stop;
	int tty;
};

static void *
progress_main(void *arg)
{
	struct progress *p = arg;
	int64_t next = p->t0 + 1000000;
	char buf[512];

	while (!atomic_load(&p->stop)) {
		int64_t now = clock_mono_us();

		if (now < next) {
			usleep((useconds_t)(next - now < 50000 ? next - now
							       : 50000));
			continue;
		}
		next += 1000000;
		p->fn(p->arg, buf, sizeof(buf));
		fprintf(stderr,
			p->tty ? "\r\033[K[%5.1fs] %s" : "[%5.1fs] %s\n",
			(double)(now - p->t0) / 1e6, buf);
	}
	if (p->tty)
		fputs("\n", stderr);
	return NULL;
}

struct progress *
progress_start(const struct bench_opts *o, progress_fn fn, void *arg)
{
	struct progress *p;

	if (o->quiet)
		return NULL;
	p = xcalloc(1, sizeof(*p));
	p->fn = fn;
	p->arg = arg;
	p->t0 = clock_mono_us();
	p->tty = isatty(2);
	pthread_create(&p->thread, NULL, progress_main, p);
	return p;
}

void
progress_stop(struct progress *p)
{
	if (p == NULL)
		return;
	atomic_store(&p->stop, 1);
	pthread_join(p->thread, NULL);
	xfree(p);
}
