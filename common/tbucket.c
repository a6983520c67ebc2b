#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>

#include "tbucket.h"

void
tbucket_init(struct tbucket *b, double rate, double burst, int64_t now_ms)
{
	b->rate = rate;
	b->burst = burst < 1 ? 1 : burst;
	b->tokens = b->burst;
	b->last_ms = now_ms;
}

static void
refill(struct tbucket *b, int64_t now_ms)
{
	if (now_ms > b->last_ms) {
		b->tokens += (double)(now_ms - b->last_ms) * b->rate / 1000.0;
		if (b->tokens > b->burst)
			b->tokens = b->burst;
		b->last_ms = now_ms;
	}
}

int
tbucket_take(struct tbucket *b, int64_t now_ms)
{
	if (b->rate <= 0)
		return 1;
	refill(b, now_ms);
	if (b->tokens < 1.0)
		return 0;
	b->tokens -= 1.0;
	return 1;
}

int64_t
tbucket_wait_ms(struct tbucket *b, int64_t now_ms)
{
	if (b->rate <= 0)
		return 0;
	refill(b, now_ms);
	if (b->tokens >= 1.0)
		return 0;
	return (int64_t)ceil((1.0 - b->tokens) * 1000.0 / b->rate);
}
