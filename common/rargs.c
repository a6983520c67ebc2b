#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"
#include "rargs.h"
#include "xmalloc.h"

void
redis_args_init(struct redis_args *a)
{
	memset(a, 0, sizeof(*a));
}

void
redis_args_free(struct redis_args *a)
{
	for (int i = 0; i < a->nowned; i++)
		xfree(a->owned[i]);
	xfree(a->owned);
	xfree(a->argv);
	xfree(a->len);
	memset(a, 0, sizeof(*a));
}

void
redis_args_add(struct redis_args *a, const char *s, size_t len)
{
	if (a->argc == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 16;
		a->argv = xrealloc(a->argv, (size_t)a->cap * sizeof(*a->argv));
		a->len = xrealloc(a->len, (size_t)a->cap * sizeof(*a->len));
	}
	a->argv[a->argc] = s;
	a->len[a->argc] = len;
	a->argc++;
}

void
redis_args_addstr(struct redis_args *a, const char *s)
{
	redis_args_add(a, s, strlen(s));
}

void
redis_args_addint(struct redis_args *a, long long v)
{
	char buf[NUM_LL_MAX];
	size_t n = num_format_ll(buf, v);
	char *s = xmemdup(buf, n + 1);

	a->owned = xrealloc(a->owned, (size_t)(a->nowned + 1) * sizeof(char *));
	a->owned[a->nowned++] = s;
	redis_args_addstr(a, s);
}
