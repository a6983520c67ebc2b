#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "timerwheel.h"
#include "xmalloc.h"

/* Deterministic xorshift64*, so failures reproduce. */
static uint64_t rng_state = UINT64_C(0x9e3779b97f4a7c15);

static uint64_t
rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static int64_t
rng_below(int64_t n)
{
	return (int64_t)(rng_next() % (uint64_t)n);
}

/* One test timer; t is first so the callback can cast back. */
struct rec {
	struct timerwheel_timer t;
	int64_t expire;
	uint64_t seq;	  /* add order, for FIFO checks */
	int64_t fired_at; /* advance target when it fired */
	unsigned int fired;
	int cancelled;
	int model_pending;
	unsigned int fired_gen;
};

/* What the checking callback compares against. */
struct ctx {
	struct timerwheel *tw;
	int64_t now;	  /* target of the advance in progress */
	int64_t prev_now; /* target of the previous advance */
	int have_last;
	int64_t last_expire;
	uint64_t last_seq;
	size_t nfired;
	uint64_t seq;
	unsigned int gen;
	struct rec **log; /* fire order, if non-NULL */
	size_t nlog;
};

static void
ctx_init(struct ctx *c, struct timerwheel *tw, int64_t now)
{
	memset(c, 0, sizeof(*c));
	c->tw = tw;
	c->now = now;
	c->prev_now = now - 1;
}

static void
rec_add(struct ctx *c, struct rec *r, int64_t expire)
{
	r->expire = expire;
	r->seq = ++c->seq;
	r->model_pending = 1;
	timerwheel_add(c->tw, &r->t, expire);
}

static size_t
ctx_advance(struct ctx *c, int64_t now)
{
	size_t n;

	c->now = now;
	c->have_last = 0;
	c->gen++;
	n = timerwheel_advance(c->tw, now);
	c->prev_now = now;
	return n;
}

/* Checks the ordering contract for every fire and records it. */
static void
check_fire(struct timerwheel_timer *t, void *arg)
{
	struct rec *r = (struct rec *)t;
	struct ctx *c = arg;

	assert_false(timerwheel_pending(t));
	assert_int_equal(r->fired, 0);
	assert_false(r->cancelled);
	assert_true(r->expire <= c->now);
	if (c->have_last) {
		assert_true(r->expire >= c->last_expire);
		if (r->expire == c->last_expire)
			assert_true(r->seq > c->last_seq);
	}
	c->have_last = 1;
	c->last_expire = r->expire;
	c->last_seq = r->seq;
	r->fired++;
	r->fired_at = c->now;
	r->fired_gen = c->gen;
	r->model_pending = 0;
	c->nfired++;
	if (c->log != NULL)
		c->log[c->nlog++] = r;
}

static struct rec *
recs_new(size_t n, struct ctx *c)
{
	struct rec *recs = xcalloc(n, sizeof(*recs));
	size_t i;

	for (i = 0; i < n; i++) {
		recs[i].t.fire_cb = check_fire;
		recs[i].t.arg = c;
	}
	return recs;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void
test_empty(void **state)
{
	struct timerwheel *tw = timerwheel_create(1000);
	struct timerwheel_timer t;

	(void)state;
	memset(&t, 0, sizeof(t));
	assert_int_equal(timerwheel_count(tw), 0);
	assert_int_equal(timerwheel_next_timeout(tw), -1);
	assert_false(timerwheel_pending(&t));
	assert_int_equal(timerwheel_advance(tw, 1000), 0);
	assert_int_equal(timerwheel_advance(tw, 600000), 0);
	assert_int_equal(timerwheel_advance(tw, 10), 0);
	timerwheel_cancel(tw, &t);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	timerwheel_destroy(NULL);
}

/* 10,000 random timers, random steps with big jumps, from a given base. */
static void
random_order_run(int64_t base)
{
	enum { N = 10000 };
	const int64_t range = 5000000;
	struct timerwheel *tw = timerwheel_create(base);
	struct ctx c;
	struct rec *recs;
	int64_t *sorted, now, step;
	size_t i, due = 0, n, total = 0;

	ctx_init(&c, tw, base);
	recs = recs_new(N, &c);
	sorted = xcalloc(N, sizeof(*sorted));
	for (i = 0; i < N; i++) {
		int64_t e = base + rng_below(range + 1);

		/* plenty of equal expiries, to check FIFO across levels */
		if (i % 10 == 5)
			e = recs[rng_below((int64_t)i)].expire;
		if (i == 1 || i == 2)
			e = base;
		if (i == 3)
			e = base + range;
		rec_add(&c, &recs[i], e);
		sorted[i] = e;
	}
	qsort(sorted, N, sizeof(*sorted), cmp_i64);
	assert_int_equal(timerwheel_count(tw), N);

	now = base;
	while (now < base + range) {
		int64_t r = rng_below(100);

		if (r < 50)
			step = 1 + rng_below(10);
		else if (r < 80)
			step = 1 + rng_below(1000);
		else if (r < 95)
			step = 1 + rng_below(100000);
		else
			step = 1 + rng_below(1500000);
		if (rng_below(20) == 0)
			step = 0;
		now += step;
		if (now > base + range)
			now = base + range;
		n = ctx_advance(&c, now);
		total += n;
		while (due < N && sorted[due] <= now)
			due++;
		/* not late: everything due has fired, nothing else */
		assert_int_equal(c.nfired, due);
		assert_int_equal(total, due);
		assert_int_equal(timerwheel_count(tw), N - due);
		if (due < N)
			assert_true(timerwheel_next_timeout(tw) >= 0);
	}
	assert_int_equal(timerwheel_count(tw), 0);
	assert_int_equal(timerwheel_next_timeout(tw), -1);
	for (i = 0; i < N; i++) {
		assert_int_equal(recs[i].fired, 1);
		assert_false(timerwheel_pending(&recs[i].t));
	}
	timerwheel_destroy(tw);
	xfree(sorted);
	xfree(recs);
}

static void
test_random_order(void **state)
{
	(void)state;
	random_order_run(0);
	random_order_run(INT64_C(1700000000123));
	random_order_run(-2500000);
	random_order_run((INT64_C(1) << 36) - 2000000);
}

/* Equal expiries added while the wheel moves still fire in add order. */
static void
test_fifo_equal_expiry(void **state)
{
	enum { N = 100 };
	const int64_t e = 100000;
	struct timerwheel *tw = timerwheel_create(0);
	struct rec *log[N];
	struct ctx c;
	struct rec *recs;
	size_t i;

	(void)state;
	ctx_init(&c, tw, 0);
	c.log = log;
	recs = recs_new(N, &c);
	for (i = 0; i < 50; i++)
		rec_add(&c, &recs[i], e);
	assert_int_equal(ctx_advance(&c, e - 5000), 0);
	for (; i < 80; i++)
		rec_add(&c, &recs[i], e);
	assert_int_equal(ctx_advance(&c, e - 10), 0);
	for (; i < N; i++)
		rec_add(&c, &recs[i], e);
	/* rescheduling to the same expiry moves it to the back */
	rec_add(&c, &recs[0], e);
	assert_int_equal(timerwheel_count(tw), N);
	assert_int_equal(ctx_advance(&c, e - 1), 0);
	assert_int_equal(ctx_advance(&c, e), N);
	assert_int_equal(c.nlog, N);
	for (i = 0; i + 1 < N; i++)
		assert_ptr_equal(log[i], &recs[i + 1]);
	assert_ptr_equal(log[N - 1], &recs[0]);
	timerwheel_destroy(tw);
	xfree(recs);
}

static void
test_cancel(void **state)
{
	enum { N = 1000 };
	struct timerwheel *tw = timerwheel_create(0);
	struct timerwheel_timer never;
	struct ctx c;
	struct rec *recs;
	size_t i, ncancel = 0;
	int64_t now;

	(void)state;
	ctx_init(&c, tw, 0);
	recs = recs_new(N, &c);
	memset(&never, 0, sizeof(never));
	for (i = 0; i < N; i++) {
		int64_t e = 1 + rng_below(20000);

		if (i % 50 == 0)
			e = -rng_below(100); /* due list */
		if (i % 97 == 0)
			e = INT64_C(1) << 40; /* parked */
		rec_add(&c, &recs[i], e);
	}
	for (i = 0; i < N; i += 3) {
		timerwheel_cancel(tw, &recs[i].t);
		assert_false(timerwheel_pending(&recs[i].t));
		recs[i].cancelled = 1;
		ncancel++;
		/* cancelling again is a no-op */
		timerwheel_cancel(tw, &recs[i].t);
		assert_int_equal(timerwheel_count(tw), N - ncancel);
	}
	timerwheel_cancel(tw, &never);
	assert_false(timerwheel_pending(&never));
	assert_int_equal(timerwheel_count(tw), N - ncancel);
	for (i = 0; i < N; i++)
		assert_int_equal(timerwheel_pending(&recs[i].t),
				 !recs[i].cancelled);

	for (now = 0; now <= 20000; now += 7)
		ctx_advance(&c, now);
	/* cancel a few far ones after the wheel has moved */
	for (i = 1; i < N; i++) {
		if (recs[i].expire == INT64_C(1) << 40 && !recs[i].cancelled) {
			timerwheel_cancel(tw, &recs[i].t);
			recs[i].cancelled = 1;
			ncancel++;
		}
	}
	ctx_advance(&c, INT64_C(1) << 41);
	assert_int_equal(c.nfired, N - ncancel);
	assert_int_equal(timerwheel_count(tw), 0);
	for (i = 0; i < N; i++)
		assert_int_equal(recs[i].fired, !recs[i].cancelled);
	timerwheel_destroy(tw);
	xfree(recs);
}

static void
test_reschedule(void **state)
{
	struct timerwheel *tw = timerwheel_create(0);
	struct ctx c;
	struct rec *r;

	(void)state;
	ctx_init(&c, tw, 0);
	r = recs_new(1, &c);
	rec_add(&c, r, 100);
	rec_add(&c, r, 50); /* earlier */
	assert_int_equal(timerwheel_count(tw), 1);
	assert_true(timerwheel_pending(&r->t));
	assert_int_equal(ctx_advance(&c, 49), 0);
	assert_int_equal(ctx_advance(&c, 50), 1);
	assert_int_equal(r->fired_at, 50);
	assert_int_equal(ctx_advance(&c, 200), 0);

	r->fired = 0;
	rec_add(&c, r, 300);
	rec_add(&c, r, 100000); /* later, other level */
	rec_add(&c, r, 5000);	/* back down */
	assert_int_equal(timerwheel_count(tw), 1);
	assert_int_equal(ctx_advance(&c, 4999), 0);
	assert_int_equal(ctx_advance(&c, 5000), 1);

	/* from the wheel into the past: fires on the next advance */
	r->fired = 0;
	rec_add(&c, r, 9000);
	rec_add(&c, r, 10);
	assert_int_equal(timerwheel_next_timeout(tw), 0);
	assert_int_equal(ctx_advance(&c, 5000), 1);

	/* from the past into the wheel: does not fire early */
	r->fired = 0;
	rec_add(&c, r, 1);
	rec_add(&c, r, 7000);
	assert_int_equal(ctx_advance(&c, 6999), 0);
	assert_int_equal(ctx_advance(&c, 7000), 1);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	xfree(r);
}

static void
test_past_expiry(void **state)
{
	static const int64_t exp[] = {500, 990, 1000, 700, 500, -5};
	static const size_t order[] = {5, 0, 4, 3, 1, 2};
	enum { N = sizeof(exp) / sizeof(exp[0]) };
	struct timerwheel *tw = timerwheel_create(1000);
	struct rec *log[N + 1];
	struct ctx c;
	struct rec *recs;
	size_t i;

	(void)state;
	ctx_init(&c, tw, 1000);
	c.log = log;
	recs = recs_new(N, &c);
	for (i = 0; i < N; i++)
		rec_add(&c, &recs[i], exp[i]);
	assert_int_equal(timerwheel_count(tw), N);
	assert_int_equal(timerwheel_next_timeout(tw), 0);
	/* behind the wheel's time: nothing fires */
	assert_int_equal(ctx_advance(&c, 999), 0);
	assert_int_equal(timerwheel_count(tw), N);
	/* same time: everything due fires, sorted, FIFO on ties */
	assert_int_equal(ctx_advance(&c, 1000), N);
	for (i = 0; i < N; i++)
		assert_ptr_equal(log[i], &recs[order[i]]);
	assert_int_equal(timerwheel_next_timeout(tw), -1);

	/* expiry == now after an advance */
	c.nlog = 0;
	recs[0].fired = 0;
	rec_add(&c, &recs[0], 1000);
	assert_int_equal(timerwheel_next_timeout(tw), 0);
	assert_int_equal(ctx_advance(&c, 1001), 1);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	xfree(recs);
}

/* Callback side effects for test_callbacks. */
struct cb_rec {
	struct timerwheel_timer t;
	struct timerwheel *tw;
	int64_t expire;
	int fired;
	int remaining; /* periodic: re-arm this many more times */
	int64_t fired_at[4];
	struct cb_rec *past; /* add at expire - 50 */
	struct cb_rec *same; /* add at expire */
	struct cb_rec *next; /* add at expire + 1 */
	struct cb_rec *kill; /* cancel */
	struct cb_rec *move; /* reschedule to expire + 100 */
	int nested;	     /* try a nested advance */
};

static int64_t cb_now;

static void
cb_add(struct cb_rec *r, int64_t e)
{
	r->expire = e;
	timerwheel_add(r->tw, &r->t, e);
}

static void
cb_fire(struct timerwheel_timer *t, void *arg)
{
	struct cb_rec *r = (struct cb_rec *)t;

	(void)arg;
	assert_true(r->expire <= cb_now);
	if (r->fired < 4)
		r->fired_at[r->fired] = cb_now;
	r->fired++;
	if (r->remaining > 0) {
		r->remaining--;
		cb_add(r, r->expire + 10);
	}
	if (r->past != NULL)
		cb_add(r->past, r->expire - 50);
	if (r->same != NULL)
		cb_add(r->same, r->expire);
	if (r->next != NULL)
		cb_add(r->next, r->expire + 1);
	if (r->kill != NULL)
		timerwheel_cancel(r->tw, &r->kill->t);
	if (r->move != NULL)
		cb_add(r->move, r->expire + 100);
	if (r->nested)
		assert_int_equal(timerwheel_advance(r->tw, cb_now + 1000), 0);
}

static void
test_callbacks(void **state)
{
	struct timerwheel *tw = timerwheel_create(0);
	struct cb_rec r[10];
	size_t i, n;

	(void)state;
	memset(r, 0, sizeof(r));
	for (i = 0; i < 10; i++) {
		r[i].t.fire_cb = cb_fire;
		r[i].tw = tw;
	}

	/* periodic: re-arms itself 99 times, all within one advance */
	r[0].remaining = 99;
	cb_add(&r[0], 10);
	cb_now = 2000;
	assert_int_equal(timerwheel_advance(tw, 2000), 100);
	assert_int_equal(r[0].fired, 100);
	assert_false(timerwheel_pending(&r[0].t));

	/* adds in the past, at the same tick and the next tick */
	r[1].past = &r[2];
	r[1].same = &r[3];
	r[1].next = &r[4];
	r[1].nested = 1;
	cb_add(&r[1], 2500);
	cb_now = 3000;
	n = timerwheel_advance(tw, 3000);
	assert_true(n >= 2); /* r1 and r4 at least */
	assert_int_equal(r[1].fired, 1);
	assert_int_equal(r[4].fired, 1);
	assert_int_equal(r[4].fired_at[0], 3000);
	n += timerwheel_advance(tw, 3000);
	assert_int_equal(n, 4);
	assert_int_equal(r[2].fired, 1);
	assert_int_equal(r[3].fired, 1);
	assert_int_equal(timerwheel_count(tw), 0);

	/* cancel and move siblings that are due in the same tick */
	r[5].kill = &r[6];
	r[5].move = &r[7];
	cb_add(&r[5], 4000);
	cb_add(&r[6], 4000);
	cb_add(&r[7], 4000);
	cb_add(&r[8], 4000);
	/* a timer cancelling itself from its own callback is a no-op */
	r[8].kill = &r[8];
	cb_now = 4050;
	assert_int_equal(timerwheel_advance(tw, 4050), 2);
	assert_int_equal(r[5].fired, 1);
	assert_int_equal(r[6].fired, 0);
	assert_int_equal(r[7].fired, 0);
	assert_int_equal(r[8].fired, 1);
	assert_true(timerwheel_pending(&r[7].t));
	cb_now = 4099;
	assert_int_equal(timerwheel_advance(tw, 4099), 0);
	cb_now = 4100;
	assert_int_equal(timerwheel_advance(tw, 4100), 1);
	assert_int_equal(r[7].fired, 1);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
}

static size_t freed;

/* Heap timer whose callback frees it (and maybe a sibling). */
struct heap_timer {
	struct timerwheel_timer t;
	struct timerwheel *tw;
	int rearm;		   /* re-add and cancel itself first */
	struct heap_timer *victim; /* cancel and free this one too */
};

static void
free_fire(struct timerwheel_timer *t, void *arg)
{
	struct heap_timer *h = (struct heap_timer *)t;

	(void)arg;
	if (h->rearm) {
		timerwheel_add(h->tw, t, 1);
		timerwheel_cancel(h->tw, t);
	}
	if (h->victim != NULL) {
		assert_true(timerwheel_pending(&h->victim->t));
		timerwheel_cancel(h->tw, &h->victim->t);
		xfree(h->victim);
		freed++;
	}
	xfree(h);
	freed++;
}

static void
test_callback_frees_timer(void **state)
{
	enum { N = 1000 };
	struct timerwheel *tw = timerwheel_create(0);
	struct heap_timer *h[N];
	size_t i, nvictims = 0;

	(void)state;
	for (i = 0; i < N; i++) {
		h[i] = xcalloc(1, sizeof(*h[i]));
		h[i]->t.fire_cb = free_fire;
		h[i]->tw = tw;
		h[i]->rearm = i % 2;
	}
	for (i = 0; i < N; i++) {
		/* many share a tick, so several are on the run list at once */
		timerwheel_add(tw, &h[i]->t,
			       i < 10 ? -1 : (int64_t)(i % 37) * 100);
		/* i + 37 shares the tick and comes later in it */
		if (i % 5 == 1 && i >= 10 && i + 37 < N) {
			h[i]->victim = h[i + 37];
			nvictims++;
		}
	}
	/* victims are cancelled, not fired */
	assert_int_equal(timerwheel_advance(tw, 5000), N - nvictims);
	assert_int_equal(freed, N);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
}

/* The pending minimum, the hard way. */
static int64_t
min_pending(const struct rec *recs, size_t n, int *any)
{
	int64_t min = INT64_MAX;
	size_t i;

	*any = 0;
	for (i = 0; i < n; i++) {
		if (recs[i].model_pending && recs[i].expire <= min) {
			min = recs[i].expire;
			*any = 1;
		}
	}
	return min;
}

/* timerwheel_now: the time of the last advance, before and after 0. */
static void
test_now(void **state)
{
	const int64_t times[] = {
		INT64_C(-5000),	       -1, 0, 1, INT64_C(123456),
		INT64_C(1700000000000)};
	struct timerwheel *tw = timerwheel_create(times[0]);

	(void)state;
	assert_int_equal(timerwheel_now(tw), times[0]);
	for (size_t i = 1; i < sizeof(times) / sizeof(times[0]); i++) {
		timerwheel_advance(tw, times[i]);
		assert_int_equal(timerwheel_now(tw), times[i]);
	}
	timerwheel_destroy(tw);
}

static void
test_next_timeout(void **state)
{
	enum { N = 2000 };
	const int64_t base = INT64_C(1700000000000);
	struct timerwheel *tw = timerwheel_create(base);
	struct ctx c;
	struct rec *recs;
	struct rec near;
	int64_t now = base, nt, min;
	size_t i, iter = 0, fired;
	int any;

	(void)state;
	ctx_init(&c, tw, base);
	assert_int_equal(timerwheel_next_timeout(tw), -1);
	assert_int_equal(timerwheel_now(tw), base);

	/* level 0 is exact */
	memset(&near, 0, sizeof(near));
	near.t.fire_cb = check_fire;
	near.t.arg = &c;
	rec_add(&c, &near, base + 5);
	nt = timerwheel_next_timeout(tw);
	assert_true(nt > 0 && nt <= 5);
	timerwheel_cancel(tw, &near.t);
	rec_add(&c, &near, base - 5);
	assert_int_equal(timerwheel_next_timeout(tw), 0);
	timerwheel_cancel(tw, &near.t);
	assert_int_equal(timerwheel_next_timeout(tw), -1);

	recs = recs_new(N, &c);
	for (i = 0; i < N; i++) {
		int64_t r = rng_below(4), d;

		if (r == 0)
			d = rng_below(64);
		else if (r == 1)
			d = rng_below(100000);
		else if (r == 2)
			d = rng_below(INT64_C(1) << 30);
		else
			d = rng_below(INT64_C(1) << 38);
		rec_add(&c, &recs[i], base + d);
	}
	for (;;) {
		nt = timerwheel_next_timeout(tw);
		min = min_pending(recs, N, &any);
		if (!any) {
			assert_int_equal(nt, -1);
			break;
		}
		assert_true(nt >= 0);
		/* never an over-estimate */
		assert_true(now + nt <= min);
		if (min <= now)
			assert_int_equal(nt, 0);
		fired = ctx_advance(&c, now + nt);
		now += nt;
		if (now == min)
			assert_true(fired > 0);
		/* bounded work: an under-estimate still makes progress */
		assert_true(++iter < (size_t)N * 8 + 100);
	}
	assert_int_equal(c.nfired, N);
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	xfree(recs);
}

static void
test_large_delays(void **state)
{
	static const int64_t delays[] = {
		(INT64_C(1) << 32) + 7,	 (INT64_C(1) << 36) - 1,
		(INT64_C(1) << 36) + 5,	 (INT64_C(1) << 40) + 3,
		(INT64_C(1) << 45) + 11,
	};
	enum { N = sizeof(delays) / sizeof(delays[0]) };
	const int64_t base = INT64_C(1700000000000);
	struct timerwheel *tw = timerwheel_create(base);
	struct ctx c;
	struct rec *recs, *far;
	size_t i;

	(void)state;
	ctx_init(&c, tw, base);
	recs = recs_new(N + 2, &c);
	for (i = 0; i < N; i++)
		rec_add(&c, &recs[i], base + delays[i]);
	/* INT64_MAX as "never", and a short delay crossing a 2^36 boundary */
	far = &recs[N];
	rec_add(&c, far, INT64_MAX);
	for (i = 0; i < N; i++) {
		int64_t e = base + delays[i];

		assert_true(timerwheel_next_timeout(tw) <= e - c.now);
		assert_int_equal(ctx_advance(&c, e - 1), 0);
		assert_true(timerwheel_next_timeout(tw) >= 0);
		assert_true(timerwheel_next_timeout(tw) <= 1);
		assert_int_equal(ctx_advance(&c, e), 1);
		assert_int_equal(recs[i].fired_at, e);
	}
	assert_int_equal(ctx_advance(&c, INT64_MAX - 1), 0);
	assert_int_equal(timerwheel_count(tw), 1);
	assert_int_equal(ctx_advance(&c, INT64_MAX), 1);
	assert_int_equal(far->fired, 1);
	timerwheel_destroy(tw);

	tw = timerwheel_create((INT64_C(1) << 36) - 5);
	ctx_init(&c, tw, (INT64_C(1) << 36) - 5);
	rec_add(&c, &recs[N + 1], (INT64_C(1) << 36) + 5);
	assert_true(timerwheel_next_timeout(tw) <= 10);
	assert_int_equal(ctx_advance(&c, (INT64_C(1) << 36) + 4), 0);
	assert_int_equal(timerwheel_next_timeout(tw), 1);
	assert_int_equal(ctx_advance(&c, (INT64_C(1) << 36) + 5), 1);
	timerwheel_destroy(tw);

	/* many random long delays, big random steps, one sweep */
	tw = timerwheel_create(0);
	xfree(recs);
	ctx_init(&c, tw, 0);
	recs = recs_new(2000, &c);
	for (i = 0; i < 2000; i++)
		rec_add(&c, &recs[i], rng_below(INT64_C(1) << 42));
	while (c.now < INT64_C(1) << 42) {
		int64_t now = c.now + rng_below(INT64_C(1) << 37);

		ctx_advance(&c, now);
		for (i = 0; i < 2000; i++)
			assert_int_equal(recs[i].fired, recs[i].expire <= now);
	}
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	xfree(recs);
}

/* A 10-minute jump must not walk 600,000 ticks: this loop would not end. */
static void
test_sparse_jumps(void **state)
{
	struct timerwheel *tw = timerwheel_create(0);
	struct ctx c;
	struct rec *r;
	int64_t now = 0;
	int i;

	(void)state;
	ctx_init(&c, tw, 0);
	r = recs_new(1, &c);
	for (i = 0; i < 200000; i++) {
		r->fired = 0;
		rec_add(&c, r, now + 600000);
		assert_int_equal(ctx_advance(&c, now + 599999), 0);
		now += 600000;
		assert_int_equal(ctx_advance(&c, now), 1);
		/* and an empty jump */
		now += 600000;
		assert_int_equal(ctx_advance(&c, now), 0);
	}
	timerwheel_destroy(tw);
	xfree(r);
}

/* The worker's pattern: ~100k timers within 2 s, advanced every 1 ms. */
static void
test_worker_load(void **state)
{
	enum { N = 100000, EXTRA = 40 * 2000 };
	const int64_t base = INT64_C(1700000000000);
	struct timerwheel *tw = timerwheel_create(base);
	struct ctx c;
	struct rec *recs;
	size_t i, next = N;
	int64_t now;

	(void)state;
	ctx_init(&c, tw, base);
	recs = recs_new(N + EXTRA, &c);
	for (i = 0; i < N; i++)
		rec_add(&c, &recs[i], base + 1 + rng_below(2000));
	for (now = base + 1; now <= base + 4000; now++) {
		/* keep adding while advancing */
		if (now < base + 2000)
			for (i = 0; i < 40; i++, next++)
				rec_add(&c, &recs[next],
					now + 1 + rng_below(2000));
		ctx_advance(&c, now);
		if ((now - base) % 500 == 0)
			assert_true(timerwheel_next_timeout(tw) >= 0 ||
				    timerwheel_count(tw) == 0);
	}
	assert_int_equal(next, N + EXTRA - 40);
	assert_int_equal(c.nfired, next);
	for (i = 0; i < next; i++) {
		assert_int_equal(recs[i].fired, 1);
		/* stepping 1 ms: exactly on time */
		assert_int_equal(recs[i].fired_at, recs[i].expire);
	}
	assert_int_equal(timerwheel_count(tw), 0);
	timerwheel_destroy(tw);
	xfree(recs);
}

/* Random add/cancel/advance against a model of what must be pending. */
static void
test_model(void **state)
{
	enum { N = 500, OPS = 40000 };
	struct timerwheel *tw = timerwheel_create(-1000);
	struct ctx c;
	struct rec *recs;
	int64_t now = -1000;
	size_t i, npending = 0;
	int op;

	(void)state;
	ctx_init(&c, tw, now);
	recs = recs_new(N, &c);
	for (op = 0; op < OPS; op++) {
		int64_t r = rng_below(100);
		struct rec *x = &recs[rng_below(N)];

		if (r < 45) {
			int64_t d;

			switch (rng_below(5)) {
			case 0: d = rng_below(64) - 10; break;
			case 1: d = rng_below(5000); break;
			case 2: d = rng_below(300000); break;
			case 3: d = -rng_below(1000); break;
			default: d = rng_below(INT64_C(1) << 37); break;
			}
			if (!x->model_pending)
				npending++;
			rec_add(&c, x, now + d);
		} else if (r < 60) {
			if (x->model_pending)
				npending--;
			timerwheel_cancel(tw, &x->t);
			x->model_pending = 0;
		} else {
			int64_t step;
			unsigned int gen;
			size_t n, expect = 0;

			switch (rng_below(6)) {
			case 0: step = 0; break;
			case 1: step = -rng_below(100); break;
			case 2: step = rng_below(100000); break;
			case 3: step = rng_below(INT64_C(1) << 36); break;
			default: step = rng_below(64); break;
			}
			for (i = 0; i < N; i++)
				if (recs[i].model_pending &&
				    recs[i].expire <= now + step && step >= 0)
					expect++;
			n = ctx_advance(&c, now + step);
			gen = c.gen;
			assert_int_equal(n, expect);
			for (i = 0; i < N; i++) {
				if (recs[i].fired_gen == gen)
					npending--;
				assert_int_equal(timerwheel_pending(&recs[i].t),
						 recs[i].model_pending);
				if (recs[i].model_pending && step >= 0)
					assert_true(recs[i].expire >
						    now + step);
			}
			if (step >= 0)
				now += step;
		}
		for (i = 0; i < N; i++)
			recs[i].fired = 0;
		assert_int_equal(timerwheel_count(tw), npending);
		if (npending == 0)
			assert_int_equal(timerwheel_next_timeout(tw), -1);
		else
			assert_true(timerwheel_next_timeout(tw) >= 0);
	}
	timerwheel_destroy(tw);
	for (i = 0; i < N; i++)
		assert_false(timerwheel_pending(&recs[i].t));
	xfree(recs);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_random_order),
		cmocka_unit_test(test_fifo_equal_expiry),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_reschedule),
		cmocka_unit_test(test_past_expiry),
		cmocka_unit_test(test_callbacks),
		cmocka_unit_test(test_callback_frees_timer),
		cmocka_unit_test(test_next_timeout),
		cmocka_unit_test(test_now),
		cmocka_unit_test(test_large_delays),
		cmocka_unit_test(test_sparse_jumps),
		cmocka_unit_test(test_worker_load),
		cmocka_unit_test(test_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
