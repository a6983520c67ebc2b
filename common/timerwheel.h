#ifndef PROPHET_TIMERWHEEL_H
#define PROPHET_TIMERWHEEL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Hierarchical timing wheel with a 1 ms tick: 6 levels of 64 slots cover
 * 2^36 ms (about 795 days); later expiries are parked in the top level and
 * re-cascaded. add and cancel are O(1); advance skips empty stretches using
 * per-level occupancy bitmaps. Not thread-safe.
 */
struct timerwheel;

/* Private to timerwheel.c. */
struct timerwheel_link {
	struct timerwheel_link *next;
	struct timerwheel_link *prev;
};

/* Embedded by the caller; zero-initialise before first use. */
struct timerwheel_timer {
	/* private: managed by timerwheel_*, do not touch */
	struct timerwheel_link link; /* next == NULL: not pending */
	int64_t expire;
	unsigned int bucket;
	/* public: set before timerwheel_add() */
	void (*fire_cb)(struct timerwheel_timer *t, void *arg);
	void *arg;
};

struct timerwheel *timerwheel_create(int64_t now_ms);
/* NULL ok; does not fire or free timers, but leaves them not pending. */
void timerwheel_destroy(struct timerwheel *tw);
/*
 * Schedules t to fire at expire_ms (absolute ms, same clock as now). An
 * expiry <= current time fires on the next advance. Re-adding a pending
 * timer reschedules it (it then goes after timers already added for the
 * same expiry).
 */
void timerwheel_add(struct timerwheel *tw, struct timerwheel_timer *t,
		    int64_t expire_ms);
/* No-op if t is not pending. */
void timerwheel_cancel(struct timerwheel *tw, struct timerwheel_timer *t);
int timerwheel_pending(const struct timerwheel_timer *t);
/*
 * Advances to now_ms, firing every timer with expire <= now_ms in
 * non-decreasing expiry order (FIFO among equal expiries). Callbacks may
 * add/cancel any timer (including itself and others) and may free the timer
 * they were given; a timer a callback adds with an expiry <= the tick being
 * processed fires on the next advance. Returns the number fired. If now_ms
 * is less than the wheel's time, or if called from within a callback,
 * nothing fires.
 */
size_t timerwheel_advance(struct timerwheel *tw, int64_t now_ms);
/*
 * ms until the next expiry from the wheel's current time (0 if something is
 * already due), or -1 if empty. May be an under-estimate (the start of a
 * higher level's slot) but never an over-estimate.
 */
int64_t timerwheel_next_timeout(const struct timerwheel *tw);
/* The time of the last advance (or of creation). */
int64_t timerwheel_now(const struct timerwheel *tw);
size_t timerwheel_count(const struct timerwheel *tw);

#endif
