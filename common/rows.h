#ifndef PROPHET_ROWS_H
#define PROPHET_ROWS_H

#include <stddef.h>

/*
 * Result rows of a query, every column as bytes (NUL-terminated for
 * convenience). Data only: db.c fills them, proto/ reads them without
 * linking the database client.
 */
struct db_rows {
	size_t nrows;
	size_t ncols;
	char **cell; /* nrows * ncols; NULL for SQL NULL */
	unsigned long *len;
};
void db_rows_free(struct db_rows *r);
const char *db_rows_get(const struct db_rows *r, size_t row, size_t col,
			unsigned long *len);
long long db_rows_int(const struct db_rows *r, size_t row, size_t col);

#endif
