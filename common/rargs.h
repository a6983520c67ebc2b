#ifndef PROPHET_RARGS_H
#define PROPHET_RARGS_H

#include <stddef.h>

/*
 * A growable argv for Redis commands with many arguments. Data only:
 * proto/ builds script calls in it without linking a Redis client;
 * redis.c sends it (redis_command_args, redis_eval_args).
 */
struct redis_args {
	int argc;
	int cap;
	const char **argv;
	size_t *len;
	char **owned;
	int nowned;
};
void redis_args_init(struct redis_args *a);
void redis_args_free(struct redis_args *a);
void redis_args_add(struct redis_args *a, const char *s, size_t len);
void redis_args_addstr(struct redis_args *a, const char *s);
void redis_args_addint(struct redis_args *a, long long v);

#endif
