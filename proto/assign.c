#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "assign.h"
#include "xmalloc.h"

struct member {
	const char *id;
	int held;
	int quota;
	int kept;
};

static int
by_id(const void *a, const void *b)
{
	return strcmp(((const struct member *)a)->id,
		      ((const struct member *)b)->id);
}

static int
by_held_desc(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	if (x->held != y->held)
		return y->held - x->held;
	return strcmp(x->id, y->id);
}

static struct member *
find(struct member *m, int n, const char *id)
{
	struct member key = {.id = id};

	if (id == NULL)
		return NULL;
	return bsearch(&key, m, (size_t)n, sizeof(*m), by_id);
}

int
assign_compute(int nslots, const char *const *holders,
	       const char *const *workers, int nworkers, const char **target)
{
	struct member *m;
	int base, extra, moved = 0, next = 0;

	if (nworkers <= 0) {
		for (int i = 0; i < nslots; i++) {
			target[i] = NULL;
			moved += holders[i] != NULL;
		}
		return moved;
	}
	m = xcalloc((size_t)nworkers, sizeof(*m));
	for (int i = 0; i < nworkers; i++)
		m[i].id = workers[i];
	qsort(m, (size_t)nworkers, sizeof(*m), by_id);
	for (int i = 0; i < nslots; i++) {
		struct member *h = find(m, nworkers, holders[i]);

		if (h != NULL)
			h->held++;
	}
	/* The +1 quotas go to those holding the most: fewest moves. */
	qsort(m, (size_t)nworkers, sizeof(*m), by_held_desc);
	base = nslots / nworkers;
	extra = nslots % nworkers;
	for (int i = 0; i < nworkers; i++)
		m[i].quota = base + (i < extra);
	qsort(m, (size_t)nworkers, sizeof(*m), by_id);

	for (int i = 0; i < nslots; i++) {
		struct member *h = find(m, nworkers, holders[i]);

		target[i] = NULL;
		if (h != NULL && h->kept < h->quota) {
			h->kept++;
			target[i] = h->id;
		}
	}
	for (int i = 0; i < nslots; i++) {
		if (target[i] != NULL)
			continue;
		while (m[next].kept >= m[next].quota)
			next++;
		m[next].kept++;
		target[i] = m[next].id;
		moved++;
	}
	xfree(m);
	return moved;
}
