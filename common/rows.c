#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "rows.h"
#include "xmalloc.h"

void
db_rows_free(struct db_rows *r)
{
	for (size_t i = 0; i < r->nrows * r->ncols; i++)
		xfree(r->cell[i]);
	xfree(r->cell);
	xfree(r->len);
	memset(r, 0, sizeof(*r));
}

const char *
db_rows_get(const struct db_rows *r, size_t row, size_t col, unsigned long *len)
{
	size_t i = row * r->ncols + col;

	if (len != NULL)
		*len = r->len[i];
	return r->cell[i];
}

long long
db_rows_int(const struct db_rows *r, size_t row, size_t col)
{
	const char *s = db_rows_get(r, row, col, NULL);

	return s ? strtoll(s, NULL, 10) : 0;
}
