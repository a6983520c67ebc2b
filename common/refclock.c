#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "redis.h"
#include "refclock.h"
#include "xmalloc.h"

#define SAMPLE_EVERY_MS 1000
#define KEEP_FRESH_US (5 * 1000000LL)
#define RTT_FLOOR_US 2000

int
refclock_take(struct refclock_state *s, int64_t ref_us, int64_t t0_mono_us,
	      int64_t t1_mono_us, int64_t t1_wall_us)
{
	int64_t rtt = t1_mono_us - t0_mono_us, mid = t0_mono_us + rtt / 2;
	int64_t limit =
		s->rtt_us * 2 > RTT_FLOOR_US ? s->rtt_us * 2 : RTT_FLOOR_US;

	if (rtt < 0)
		return 0;
	if (s->have && rtt > limit && t1_mono_us - s->mono_us < KEEP_FRESH_US)
		return 0;
	s->have = 1;
	s->ref_ms = ref_us / 1000;
	s->mono_us = mid;
	s->rtt_us = rtt;
	s->offset_ms = (ref_us - (t1_wall_us - (t1_mono_us - mid))) / 1000;
	return 1;
}

int64_t
refclock_ref_at(const struct refclock_state *s, int64_t mono_us)
{
	if (!s->have || mono_us - s->mono_us > REFCLOCK_STALE_MS * 1000LL)
		return -1;
	return s->ref_ms + (mono_us - s->mono_us) / 1000;
}

int64_t
refclock_offset_at(const struct refclock_state *s, int64_t mono_us,
		   int64_t wall_ms)
{
	int64_t ref = refclock_ref_at(s, mono_us);

	return ref < 0 ? 0 : ref - wall_ms;
}

int64_t
refclock_fire_at(const struct refclock_state *s, int64_t mono_us,
		 int64_t wall_ms)
{
	int64_t ref = refclock_ref_at(s, mono_us);

	return ref >= 0 && ref < wall_ms ? ref : wall_ms;
}

int64_t
refclock_due_at(const struct refclock_state *s, int64_t mono_us,
		int64_t wall_ms)
{
	int64_t ref = refclock_ref_at(s, mono_us);

	return ref > wall_ms ? ref : wall_ms;
}

struct refclock {
	struct refclock_state st;
	struct redis *redis;
	struct event *ev;
	struct metric *offset, *skewed;
	int64_t max_skew_ms;
	int64_t sent_us; /* monotonic, of the TIME in flight */
	int pending;	 /* a TIME in flight */
	int dead;	 /* destroyed with a TIME in flight: its reply frees */
	int is_skewed;
};

/* Every second; every 50 ms until the first sample, which claims wait
 * for (refclock_known()). */
static void
arm(struct refclock *c)
{
	struct timeval tv = {SAMPLE_EVERY_MS / 1000,
			     (SAMPLE_EVERY_MS % 1000) * 1000};
	struct timeval first = {0, 50000};

	evtimer_add(c->ev, c->st.have ? &tv : &first);
}

static void
judge(struct refclock *c)
{
	int64_t off = c->st.offset_ms, mag = off < 0 ? -off : off;
	int skewed = mag > c->max_skew_ms;

	if (c->offset != NULL)
		metric_set(c->offset, (double)off / 1000.0);
	if (c->skewed != NULL)
		metric_set(c->skewed, skewed ? 1.0 : 0.0);
	if (skewed && !c->is_skewed)
		log_warn("clock off the reference",
			 "offset_ms=%lld max_skew_ms=%lld reference=redis "
			 "effect=\"%s\"",
			 (long long)off, (long long)c->max_skew_ms,
			 off < 0 ? "this clock is ahead: due times are "
				   "judged by the reference (never early)"
				 : "this clock is behind: tasks fire late by "
				   "the offset");
	else if (!skewed && c->is_skewed)
		log_info("clock back within the reference's skew",
			 "offset_ms=%lld max_skew_ms=%lld", (long long)off,
			 (long long)c->max_skew_ms);
	c->is_skewed = skewed;
}

static void
time_cb(struct redis *r, redisReply *reply, void *arg)
{
	struct refclock *c = arg;
	int64_t t1 = clock_mono_us(), wall = clock_now_us();

	(void)r;
	c->pending = 0;
	if (c->dead) {
		xfree(c);
		return;
	}
	if (reply == NULL || reply->type != REDIS_REPLY_ARRAY ||
	    reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[1]->type != REDIS_REPLY_STRING)
		return;
	if (refclock_take(&c->st,
			  strtoll(reply->element[0]->str, NULL, 10) *
					  1000000LL +
				  strtoll(reply->element[1]->str, NULL, 10),
			  c->sent_us, t1, wall))
		judge(c);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct refclock *c = arg;

	(void)fd;
	(void)what;
	if (!c->pending && redis_up(c->redis)) {
		c->sent_us = clock_mono_us();
		if (redis_commandl(c->redis, time_cb, c, "TIME", NULL) == 0)
			c->pending = 1;
	}
	arm(c);
}

struct refclock *
refclock_create(struct event_base *base, struct redis *r, int64_t max_skew_ms,
		struct metric *offset, struct metric *skewed)
{
	struct refclock *c = xcalloc(1, sizeof(*c));

	c->redis = r;
	c->max_skew_ms = max_skew_ms;
	c->offset = offset;
	c->skewed = skewed;
	c->ev = evtimer_new(base, tick_cb, c);
	/* The first sample at once: a daemon started with a wrong clock
	 * should not judge its first second by it. */
	event_active(c->ev, EV_TIMEOUT, 0);
	return c;
}

void
refclock_destroy(struct refclock *c)
{
	if (c == NULL)
		return;
	event_free(c->ev);
	if (c->pending)
		c->dead = 1;
	else
		xfree(c);
}

int64_t
refclock_fire_ms(const struct refclock *c)
{
	int64_t wall = clock_now_ms();

	return c == NULL ? wall
			 : refclock_fire_at(&c->st, clock_mono_us(), wall);
}

int64_t
refclock_due_ms(const struct refclock *c)
{
	int64_t wall = clock_now_ms();

	return c == NULL ? wall
			 : refclock_due_at(&c->st, clock_mono_us(), wall);
}

int64_t
refclock_offset_ms(const struct refclock *c)
{
	return c == NULL ? 0
			 : refclock_offset_at(&c->st, clock_mono_us(),
					      clock_now_ms());
}

int
refclock_known(const struct refclock *c)
{
	return c != NULL && c->st.have;
}
