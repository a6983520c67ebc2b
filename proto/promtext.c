#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "promtext.h"

#define LINE_MAX_LEN 512

/* The value after "<prefix>" on a sample line, which must end there. */
static int
parse_value(const char *s, double *v)
{
	char *end;

	while (*s == ' ')
		s++;
	if (*s == '\0')
		return -1;
	*v = strtod(s, &end);
	while (*end == ' ')
		end++;
	/* A timestamp may follow the value. */
	if (*end != '\0' && strspn(end, "0123456789-") != strlen(end))
		return -1;
	return 0;
}

static int
parse_bucket(const char *rest, struct promtext_hist *h)
{
	static const char lbl[] = "{le=\"";
	const char *q;
	char *end;
	double le, v;

	if (strncmp(rest, lbl, sizeof(lbl) - 1) != 0)
		return -1;
	rest += sizeof(lbl) - 1;
	if ((q = strchr(rest, '"')) == NULL || q[1] != '}')
		return -1;
	le = strtod(rest, &end);
	if (end != q || h->nbuckets == PROMTEXT_BUCKETS_MAX)
		return -1;
	if (h->nbuckets > 0 && !(le > h->le[h->nbuckets - 1]))
		return -1;
	if (parse_value(q + 2, &v) < 0)
		return -1;
	h->le[h->nbuckets] = le;
	h->count[h->nbuckets] = v;
	h->nbuckets++;
	return 0;
}

/* One sample line of the histogram; 1 if it was one, -1 if malformed. */
static int
parse_line(const char *line, const char *name, struct promtext_hist *h,
	   int *have_total)
{
	size_t n = strlen(name);
	const char *rest;

	if (strncmp(line, name, n) != 0 || line[n] != '_')
		return 0;
	rest = line + n + 1;
	if (!strncmp(rest, "bucket{", 7))
		return parse_bucket(rest + 6, h) < 0 ? -1 : 1;
	if (!strncmp(rest, "sum ", 4))
		return parse_value(rest + 4, &h->sum) < 0 ? -1 : 1;
	if (!strncmp(rest, "count ", 6)) {
		*have_total = 1;
		return parse_value(rest + 6, &h->total) < 0 ? -1 : 1;
	}
	return 0;
}

int
promtext_histogram(const char *text, size_t len, const char *name,
		   struct promtext_hist *h)
{
	char line[LINE_MAX_LEN];
	size_t i = 0;
	int have_total = 0;

	memset(h, 0, sizeof(*h));
	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;

		if (n < sizeof(line) && text[i] != '#') {
			memcpy(line, text + i, n);
			line[n] = '\0';
			if (parse_line(line, name, h, &have_total) < 0)
				return -1;
		}
		i += n + 1;
	}
	if (h->nbuckets == 0 || !isinf(h->le[h->nbuckets - 1]) || !have_total)
		return -1;
	return 0;
}

int
promtext_hist_add(struct promtext_hist *a, const struct promtext_hist *b)
{
	if (a->nbuckets != b->nbuckets)
		return -1;
	for (size_t i = 0; i < a->nbuckets; i++)
		if (a->le[i] != b->le[i])
			return -1;
	for (size_t i = 0; i < a->nbuckets; i++)
		a->count[i] += b->count[i];
	a->sum += b->sum;
	a->total += b->total;
	return 0;
}

static int
is_count(double v)
{
	return v >= 0 && v <= 9007199254740992.0 && v == floor(v);
}

int
promtext_hist_counts(const struct promtext_hist *h)
{
	if (!isfinite(h->sum) || fabs(h->sum) > 1e300 || !is_count(h->total))
		return 0;
	for (size_t i = 0; i < h->nbuckets; i++)
		if (!is_count(h->count[i]))
			return 0;
	return 1;
}
