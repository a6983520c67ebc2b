#ifndef PROPHET_RINDEX_H
#define PROPHET_RINDEX_H

#include <stddef.h>

#include "keys.h"
#include "redis.h"

struct db_rows;

/*
 * One SCRIPT_INDEX call for a slot, built from DB rows (SQL_TASK_COLS_INDEX
 * order): every loader, rebuild, reaper and restore indexes through this.
 */
struct rindex {
	char kdue[RKEY_MAX];
	char ktask[RKEY_MAX];
	char kinf[RKEY_MAX];
	char kcancel[RKEY_MAX];
	struct redis_args a;
	char **payloads;
	size_t n;
	size_t cap;
};

void rindex_init(struct rindex *ix, int slot);
void rindex_add_row(struct rindex *ix, const struct db_rows *rows, size_t i);
/* Rows added so far. */
size_t rindex_count(const struct rindex *ix);
/* Sends the call (if any row was added); -1 if it could not be sent. */
int rindex_send(struct rindex *ix, struct redis *r, redis_reply_fn cb,
		void *arg);
void rindex_free(struct rindex *ix);

#endif
