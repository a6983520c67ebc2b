#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "payload.h"
#include "rindex.h"
#include "rows.h"
#include "scripts.h"
#include "xmalloc.h"

void
slot_eval_init(struct slot_eval *e, const char *script, int slot,
	       const char *kinds)
{
	size_t n = strlen(kinds);

	if (n > SLOT_EVAL_KEYS)
		abort();
	redis_args_init(&e->a);
	redis_args_addstr(&e->a, "EVAL");
	redis_args_addstr(&e->a, script);
	redis_args_addint(&e->a, (long long)n);
	for (size_t i = 0; i < n; i++) {
		char *k = e->keys[i];

		switch (kinds[i]) {
		case 'd': rkey_due(k, RKEY_MAX, slot); break;
		case 't': rkey_task(k, RKEY_MAX, slot); break;
		case 'i': rkey_inflight(k, RKEY_MAX, slot); break;
		case 'a': rkey_attempt(k, RKEY_MAX, slot); break;
		case 'e': rkey_epoch(k, RKEY_MAX, slot); break;
		case 'm': rkey_marker(k, RKEY_MAX, slot); break;
		case 'c': rkey_cancelled(k, RKEY_MAX, slot); break;
		case 'k': rkey_bk(k, RKEY_MAX, slot); break;
		case 'b': rkey_bprefix(k, RKEY_MAX, slot); break;
		case 'v': rkey_moved(k, RKEY_MAX, slot); break;
		case 'h': rkey_hprefix(k, RKEY_MAX, slot); break;
		default: abort();
		}
		redis_args_addstr(&e->a, k);
	}
}

void
slot_eval_free(struct slot_eval *e)
{
	redis_args_free(&e->a);
}

void
rindex_init(struct rindex *ix, int slot, int64_t bucket_ms, int64_t edge_ms)
{
	memset(ix, 0, sizeof(*ix));
	slot_eval_init(&ix->ev, SCRIPT_INDEX, slot, "dtickbv");
	redis_args_addint(&ix->ev.a, edge_ms);
	redis_args_addint(&ix->ev.a, bucket_ms);
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
	redis_args_addstr(&ix->ev.a, db_rows_get(rows, i, PC_ID, NULL));
	redis_args_addstr(&ix->ev.a, db_rows_get(rows, i, PC_DUE_AT, NULL));
	redis_args_add(&ix->ev.a, ix->payloads[ix->n], plen);
	ix->n++;
}

size_t
rindex_count(const struct rindex *ix)
{
	return ix->n;
}

void
rindex_free(struct rindex *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		free(ix->payloads[i]);
	xfree(ix->payloads);
	slot_eval_free(&ix->ev);
	memset(ix, 0, sizeof(*ix));
}
