#ifndef PROPHET_REFCLOCK_H
#define PROPHET_REFCLOCK_H

#include <stdint.h>

struct event_base;
struct metric;
struct redis;

/*
 * The cluster's reference clock (issue 20): Redis's TIME, which every
 * worker and manager already talks to. A sample is taken every second
 * (TIME's answer, against the midpoint of the round trip); between
 * samples the reference is carried on by this host's monotonic clock,
 * which a step of the wall clock (an NTP step, a wrong date, a VM
 * resumed) does not move. So a wall-clock jump is seen at once, not at
 * the next sample.
 *
 * The two uses take the safe side of the two clocks:
 *  - refclock_fire_ms(): the earlier of the wall clock and the
 *    reference, for every "is it due" decision of a worker. A wall clock
 *    ahead (jumped forwards) cannot make a task fire early; one behind
 *    makes it late by the difference, which prophet_clock_offset_seconds
 *    shows and an alert names.
 *  - refclock_due_ms(): the later of the two, for a relative due time
 *    (delay_ms) computed by a manager: a manager's clock behind cannot
 *    make a delay short.
 * Without a sample (Redis not reached since start) both are the wall
 * clock. A sample older than REFCLOCK_STALE_MS is not used.
 */
#define REFCLOCK_STALE_MS (10 * 60 * 1000)

struct refclock_state {
	int have;	   /* a sample was taken */
	int64_t ref_ms;	   /* the reference at the round trip's midpoint */
	int64_t mono_us;   /* our monotonic clock at that midpoint */
	int64_t offset_ms; /* reference minus wall clock at that midpoint */
	int64_t rtt_us;	   /* the sample's round trip */
};

/*
 * Pure parts, with the clocks given (unit tests). refclock_take() keeps a
 * reading (the reference's answer ref_us, sent at t0_mono_us, answered at
 * t1_mono_us when the wall clock read t1_wall_us) unless its round trip
 * is more than twice that of the sample it would replace (and over 2 ms)
 * while that one is under 5 s old: a slow answer has a wide error
 * (half its round trip). 1 if kept.
 */
int refclock_take(struct refclock_state *s, int64_t ref_us, int64_t t0_mono_us,
		  int64_t t1_mono_us, int64_t t1_wall_us);
/* The reference at mono_us, or -1 without a usable sample. */
int64_t refclock_ref_at(const struct refclock_state *s, int64_t mono_us);
/* Reference minus wall at (mono_us, wall_ms); 0 without a sample. */
int64_t refclock_offset_at(const struct refclock_state *s, int64_t mono_us,
			   int64_t wall_ms);
int64_t refclock_fire_at(const struct refclock_state *s, int64_t mono_us,
			 int64_t wall_ms);
int64_t refclock_due_at(const struct refclock_state *s, int64_t mono_us,
			int64_t wall_ms);

struct refclock;

/*
 * Samples r's TIME every second on base. offset: a gauge set to the
 * offset in seconds (prophet_clock_offset_seconds), skewed: a gauge set to
 * 1 while |offset| > max_skew_ms (a warning is logged when that starts
 * and when it ends); either may be NULL.
 */
struct refclock *refclock_create(struct event_base *base, struct redis *r,
				 int64_t max_skew_ms, struct metric *offset,
				 struct metric *skewed);
void refclock_destroy(struct refclock *c);
/* c may be NULL: then the wall clock. */
int64_t refclock_fire_ms(const struct refclock *c);
int64_t refclock_due_ms(const struct refclock *c);
/* Reference minus wall clock now, ms; 0 without a sample. */
int64_t refclock_offset_ms(const struct refclock *c);
/* 1 once a sample was taken. A worker claims from Redis only then, so
 * a daemon started with a wrong clock does not act on it in its first
 * moments (the first sample comes within a round trip of Redis being
 * up). */
int refclock_known(const struct refclock *c);

#endif
