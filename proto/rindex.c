#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "payload.h"
#include "rindex.h"
#include "scripts.h"
#include "xmalloc.h"

void
rindex_init(struct rindex *ix, int slot)
{
	memset(ix, 0, sizeof(*ix));
	rkey_due(ix->kdue, sizeof(ix->kdue), slot);
	rkey_task(ix->ktask, sizeof(ix->ktask), slot);
	rkey_inflight(ix->kinf, sizeof(ix->kinf), slot);
	rkey_cancelled(ix->kcancel, sizeof(ix->kcancel), slot);
	redis_args_init(&ix->a);
	redis_args_addstr(&ix->a, "EVAL");
	redis_args_addstr(&ix->a, SCRIPT_INDEX);
	redis_args_addstr(&ix->a, "4");
	redis_args_addstr(&ix->a, ix->kdue);
	redis_args_addstr(&ix->a, ix->ktask);
	redis_args_addstr(&ix->a, ix->kinf);
	redis_args_addstr(&ix->a, ix->kcancel);
}

void
rindex_add_row(struct rindex *ix, const struct db_rows *rows, size_t i)
{
	size_t plen;

	if (ix->n == ix->cap) {
		ix->cap = ix->cap ? ix->cap * 2 : 64;
		ix->payloads = xrealloc(ix->payloads, ix->cap * sizeof(char *));
	}
	ix->payloads[ix->n] = payload_from_row(rows, i, &plen);
	redis_args_addstr(&ix->a, db_rows_get(rows, i, PC_ID, NULL));
	redis_args_addstr(&ix->a, db_rows_get(rows, i, PC_DUE_AT, NULL));
	redis_args_add(&ix->a, ix->payloads[ix->n], plen);
	ix->n++;
}

size_t
rindex_count(const struct rindex *ix)
{
	return ix->n;
}

int
rindex_send(struct rindex *ix, struct redis *r, redis_reply_fn cb, void *arg)
{
	if (ix->n == 0)
		return 0;
	return redis_command_argv(r, cb, arg, ix->a.argc, ix->a.argv,
				  ix->a.len);
}

void
rindex_free(struct rindex *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		free(ix->payloads[i]);
	xfree(ix->payloads);
	redis_args_free(&ix->a);
	memset(ix, 0, sizeof(*ix));
}
