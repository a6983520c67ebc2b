#ifndef PROPHET_NUM_H
#define PROPHET_NUM_H

#include <stddef.h>

/* Room for any long long in decimal, sign and NUL included. */
#define NUM_LL_MAX 21

/*
 * Writes v in decimal and a NUL to buf (NUM_LL_MAX bytes); the length
 * written, NUL excluded. What snprintf("%lld") does, in a tenth of its
 * instructions: the fire and claim paths format several integers a task.
 */
size_t num_format_ll(char *buf, long long v);
/* Reads the whole of s[0..len) as a decimal long long (an optional '-',
 * then digits): 0, or -1 for anything else or an overflow. */
int num_parse_ll(const char *s, size_t len, long long *v);

#endif
