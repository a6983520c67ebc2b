#ifndef PROPHET_TBUCKET_H
#define PROPHET_TBUCKET_H

#include <stdint.h>

/*
 * A token bucket on a caller-given monotonic clock (ms): `rate` tokens a
 * second, at most `burst` saved. rate 0 means unlimited.
 */
struct tbucket {
	double rate;
	double burst;
	double tokens;
	int64_t last_ms;
};

void tbucket_init(struct tbucket *b, double rate, double burst, int64_t now_ms);
/* Takes one token if there is one: returns 1, else 0. */
int tbucket_take(struct tbucket *b, int64_t now_ms);
/* Milliseconds until a token is available (0: now). */
int64_t tbucket_wait_ms(struct tbucket *b, int64_t now_ms);

#endif
