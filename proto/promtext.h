#ifndef PROPHET_PROMTEXT_H
#define PROPHET_PROMTEXT_H

#include <stddef.h>

/*
 * One histogram read back from the Prometheus text exposition format (what
 * every daemon's GET /metrics answers), so that the manager can sum the
 * workers' fire lateness for the console. Only histograms whose sole label
 * is le are read.
 */
#define PROMTEXT_BUCKETS_MAX 64

struct promtext_hist {
	size_t nbuckets;
	double le[PROMTEXT_BUCKETS_MAX];    /* upper bounds, ascending */
	double count[PROMTEXT_BUCKETS_MAX]; /* cumulative, as exposed */
	double sum;
	double total; /* <name>_count */
};

/* 0 when text holds histogram name (buckets ending with +Inf, _count),
 * -1 when it does not or its lines are malformed. */
int promtext_histogram(const char *text, size_t len, const char *name,
		       struct promtext_hist *h);
/*
 * 1 when every count is a whole number JSON carries exactly (0 to 2^53) and
 * the sum is finite: the text format also spells NaN, +Inf and 1e400, which
 * jansson refuses and an integer cast leaves undefined.
 */
int promtext_hist_counts(const struct promtext_hist *h);
/* Adds b into a; -1 (a unchanged) when their bucket bounds differ. */
int promtext_hist_add(struct promtext_hist *a, const struct promtext_hist *b);

#endif
