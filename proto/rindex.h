#ifndef PROPHET_RINDEX_H
#define PROPHET_RINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "rargs.h"

struct db_rows;

/*
 * An EVAL of one of a slot's scripts (proto/scripts.h), its keys named by
 * letters in the order the script wants them: d due, t task, i inflight,
 * a attempt, e epoch, m marker, c cancelled, k bk, b the buckets' prefix,
 * v moved, h the held sets' prefix. Further arguments go to .a
 * with redis_args_add*; the caller sends .a (common/redis.h's
 * redis_eval_args): this file only builds calls.
 */
#define SLOT_EVAL_KEYS 11
struct slot_eval {
	char keys[SLOT_EVAL_KEYS][RKEY_MAX];
	struct redis_args a;
};

void slot_eval_init(struct slot_eval *e, const char *script, int slot,
		    const char *kinds);
void slot_eval_free(struct slot_eval *e);

/*
 * One SCRIPT_INDEX call for a slot, built from DB rows (SQL_TASK_COLS_INDEX
 * order): every loader, rebuild, reaper and restore indexes through this.
 */
struct rindex {
	struct slot_eval ev;
	char **payloads;
	size_t n;
	size_t cap;
};

/* Tasks whose bucket (bucket_ms of due time, 0: none) starts later than
 * edge_ms (now + the near window, by the caller's clock) go to it, the
 * others to due/task. */
void rindex_init(struct rindex *ix, int slot, int64_t bucket_ms,
		 int64_t edge_ms);
void rindex_add_row(struct rindex *ix, const struct db_rows *rows, size_t i);
/* Rows added so far (send the call, ix->ev.a, only if there are any). */
size_t rindex_count(const struct rindex *ix);
void rindex_free(struct rindex *ix);

#endif
