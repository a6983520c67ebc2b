#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "timerwheel.h"
#include "xmalloc.h"

/*
 * Times are kept as "keys": the int64_t millisecond value with its sign bit
 * flipped, which maps int64_t order onto uint64_t order so the slot maths
 * below works for any clock, negative values included.
 *
 * A pending timer with key k lives in exactly one place:
 *   - the due list, if k <= now when it was added (fires on the next advance);
 *   - level L, slot (k >> 6L) & 63, where L is the highest 6-bit group in
 *     which k and now differ (L = 0 if they differ in the low 6 bits only);
 *   - the park slot (top level, slot 0) if k and now differ above bit 35.
 * Because the level depends only on k and now, timers with equal expiry are
 * always in the same list, in the order they were added: that gives FIFO.
 * Normal timers at level L always sit in a slot above now's index at that
 * level, so slots at or below the current index are empty, and top slot 0 is
 * free for parked timers; it is cascaded whenever the top level wraps.
 */

#define TW_LVL_BITS 6
#define TW_LVL_SLOTS (1u << TW_LVL_BITS)
#define TW_LVL_MASK ((uint64_t)TW_LVL_SLOTS - 1)
#define TW_LEVELS 6
#define TW_TOP (TW_LEVELS - 1)
#define TW_NSLOTS (TW_LEVELS * TW_LVL_SLOTS)
#define TW_SPAN_BITS (TW_LEVELS * TW_LVL_BITS)
#define TW_PARK_SLOT (TW_TOP * TW_LVL_SLOTS)
#define TW_BUCKET_DUE TW_NSLOTS

struct timerwheel {
	uint64_t now; /* key of the wheel's current time */
	size_t count; /* pending timers, all lists */
	int in_advance;
	int due_sorted;		      /* due list in expiry order */
	uint64_t occupied[TW_LEVELS]; /* bit s set: slot s non-empty */
	struct timerwheel_link due;   /* expiry <= now, for next advance */
	struct timerwheel_link run;   /* being fired by advance */
	struct timerwheel_link slot[TW_NSLOTS];
};

static inline uint64_t
tw_key(int64_t ms)
{
	return (uint64_t)ms ^ (UINT64_C(1) << 63);
}

static inline struct timerwheel_timer *
link_timer(struct timerwheel_link *l)
{
	return (struct timerwheel_timer *)((char *)l -
					   offsetof(struct timerwheel_timer,
						    link));
}

static inline unsigned int
ctz64(uint64_t v)
{
#if defined(__GNUC__)
	return (unsigned int)__builtin_ctzll(v);
#else
	unsigned int n = 0;

	while (!(v & 1)) {
		v >>= 1;
		n++;
	}
	return n;
#endif
}

/* Index of the highest set bit; v must be non-zero. */
static inline unsigned int
fls64(uint64_t v)
{
#if defined(__GNUC__)
	return 63u - (unsigned int)__builtin_clzll(v);
#else
	unsigned int n = 0;

	while (v >>= 1)
		n++;
	return n;
#endif
}

static inline void
list_init(struct timerwheel_link *h)
{
	h->next = h;
	h->prev = h;
}

static inline int
list_empty(const struct timerwheel_link *h)
{
	return h->next == h;
}

static inline void
list_append(struct timerwheel_link *h, struct timerwheel_link *l)
{
	l->prev = h->prev;
	l->next = h;
	h->prev->next = l;
	h->prev = l;
}

/* Leaves l with NULL links: that is what "not pending" means. */
static inline void
list_del(struct timerwheel_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->next = NULL;
	l->prev = NULL;
}

/* Moves all of src to the tail of dst in O(1), leaving src empty. */
static void
list_splice_tail(struct timerwheel_link *dst, struct timerwheel_link *src)
{
	if (list_empty(src))
		return;
	src->next->prev = dst->prev;
	dst->prev->next = src->next;
	src->prev->next = dst;
	dst->prev = src->prev;
	list_init(src);
}

static void
list_detach_all(struct timerwheel_link *h)
{
	while (!list_empty(h))
		list_del(h->next);
}

/*
 * Removes t from whatever list holds it. The occupancy bit is recomputed
 * from the slot itself, so a stale bucket (timer spliced onto the run list)
 * is harmless.
 */
static void
timer_unlink(struct timerwheel *tw, struct timerwheel_timer *t)
{
	unsigned int b = t->bucket;

	list_del(&t->link);
	if (b < TW_NSLOTS) {
		if (list_empty(&tw->slot[b]))
			tw->occupied[b / TW_LVL_SLOTS] &=
				~(UINT64_C(1) << (b % TW_LVL_SLOTS));
	} else if (list_empty(&tw->due)) {
		tw->due_sorted = 1;
	}
}

/* Files t (key >= now) by the highest 6-bit group where key and now differ. */
static void
wheel_insert(struct timerwheel *tw, struct timerwheel_timer *t, uint64_t key)
{
	uint64_t diff = key ^ tw->now;
	unsigned int lvl, b;

	if (diff >> TW_SPAN_BITS) {
		b = TW_PARK_SLOT;
	} else {
		lvl = diff ? fls64(diff) / TW_LVL_BITS : 0;
		b = lvl * TW_LVL_SLOTS +
		    (unsigned int)((key >> (lvl * TW_LVL_BITS)) & TW_LVL_MASK);
	}
	t->bucket = b;
	list_append(&tw->slot[b], &t->link);
	tw->occupied[b / TW_LVL_SLOTS] |= UINT64_C(1) << (b % TW_LVL_SLOTS);
}

/* Tracks whether the due list stays sorted, so advance only sorts if needed. */
static void
due_append(struct timerwheel *tw, struct timerwheel_timer *t)
{
	if (!list_empty(&tw->due) &&
	    link_timer(tw->due.prev)->expire > t->expire)
		tw->due_sorted = 0;
	t->bucket = TW_BUCKET_DUE;
	list_append(&tw->due, &t->link);
}

/*
 * Stable bottom-up merge sort of the due list by expiry: it only gets out
 * of order when past expiries are added out of order, and stability keeps
 * FIFO among equal expiries.
 */
static void
due_sort(struct timerwheel *tw)
{
	struct timerwheel_link *h = &tw->due, *list, *p, *q, *e, *tail, *prev;
	size_t insize = 1, nmerges, psize, qsize;

	if (tw->due_sorted || list_empty(h)) {
		tw->due_sorted = 1;
		return;
	}
	h->prev->next = NULL;
	list = h->next;
	for (;;) {
		p = list;
		list = NULL;
		tail = NULL;
		nmerges = 0;
		while (p != NULL) {
			nmerges++;
			q = p;
			for (psize = 0; psize < insize && q != NULL; psize++)
				q = q->next;
			qsize = insize;
			while (psize > 0 || (qsize > 0 && q != NULL)) {
				if (psize == 0) {
					e = q;
					q = q->next;
					qsize--;
				} else if (qsize == 0 || q == NULL ||
					   link_timer(p)->expire <=
						   link_timer(q)->expire) {
					e = p;
					p = p->next;
					psize--;
				} else {
					e = q;
					q = q->next;
					qsize--;
				}
				if (tail != NULL)
					tail->next = e;
				else
					list = e;
				tail = e;
			}
			p = q;
		}
		tail->next = NULL;
		if (nmerges <= 1)
			break;
		insize *= 2;
	}
	h->next = list;
	prev = h;
	for (e = list; e != NULL; e = e->next) {
		e->prev = prev;
		prev = e;
	}
	prev->next = h;
	h->prev = prev;
	tw->due_sorted = 1;
}

/*
 * Earliest tick after now at which a slot must be fired or cascaded, so that
 * advance can jump over empty stretches. Returns 0, 1 if only parked timers
 * remain (*when is then the next top-level wrap), or -1 if the wheel is empty.
 */
static int
next_event(const struct timerwheel *tw, uint64_t *when)
{
	uint64_t above;
	unsigned int lvl, shift, cur;

	for (lvl = 0; lvl < TW_LEVELS; lvl++) {
		shift = lvl * TW_LVL_BITS;
		cur = (unsigned int)((tw->now >> shift) & TW_LVL_MASK);
		if (cur == TW_LVL_MASK)
			continue;
		above = tw->occupied[lvl] & (~UINT64_C(0) << (cur + 1));
		if (above) {
			shift += TW_LVL_BITS;
			*when = (tw->now >> shift << shift) |
				((uint64_t)ctz64(above)
				 << (shift - TW_LVL_BITS));
			return 0;
		}
	}
	if (tw->occupied[TW_TOP] & 1) {
		*when = ((tw->now >> TW_SPAN_BITS) + 1) << TW_SPAN_BITS;
		return 1;
	}
	return -1;
}

/*
 * Re-files every slot whose period starts at now, top level first, so that
 * level 0 then holds exactly the timers expiring now.
 */
static void
cascade(struct timerwheel *tw)
{
	struct timerwheel_link tmp;
	struct timerwheel_timer *t;
	unsigned int shift, b;
	int lvl;

	if (tw->now & TW_LVL_MASK)
		return;
	for (lvl = TW_TOP; lvl >= 1; lvl--) {
		shift = (unsigned int)lvl * TW_LVL_BITS;
		if (tw->now & ((UINT64_C(1) << shift) - 1))
			continue;
		b = (unsigned int)lvl * TW_LVL_SLOTS +
		    (unsigned int)((tw->now >> shift) & TW_LVL_MASK);
		if (list_empty(&tw->slot[b]))
			continue;
		list_init(&tmp);
		list_splice_tail(&tmp, &tw->slot[b]);
		tw->occupied[lvl] &= ~(UINT64_C(1) << (b % TW_LVL_SLOTS));
		while (!list_empty(&tmp)) {
			t = link_timer(tmp.next);
			list_del(&t->link);
			wheel_insert(tw, t, tw_key(t->expire));
		}
	}
}

/*
 * Fires the run list one timer at a time, unlinking each before its
 * callback, so callbacks can cancel or re-add timers still on the list and
 * may free the one they are given.
 */
static size_t
run_list(struct timerwheel *tw)
{
	struct timerwheel_timer *t;
	size_t n = 0;

	while (!list_empty(&tw->run)) {
		t = link_timer(tw->run.next);
		list_del(&t->link);
		tw->count--;
		n++;
		if (t->fire_cb != NULL)
			t->fire_cb(t, t->arg);
	}
	return n;
}

/* Only parked timers remain: skip whole wheel spans up to the earliest. */
static uint64_t
park_skip(struct timerwheel *tw, uint64_t target)
{
	struct timerwheel_link *h = &tw->slot[TW_PARK_SLOT], *l;
	uint64_t min = target, k;

	for (l = h->next; l != h; l = l->next) {
		k = tw_key(link_timer(l)->expire);
		if (k < min)
			min = k;
	}
	return min >> TW_SPAN_BITS << TW_SPAN_BITS;
}

struct timerwheel *
timerwheel_create(int64_t now_ms)
{
	struct timerwheel *tw = xcalloc(1, sizeof(*tw));
	unsigned int i;

	tw->now = tw_key(now_ms);
	tw->due_sorted = 1;
	list_init(&tw->due);
	list_init(&tw->run);
	for (i = 0; i < TW_NSLOTS; i++)
		list_init(&tw->slot[i]);
	return tw;
}

/* Detaches leftover timers so they read as not pending, not as dangling. */
void
timerwheel_destroy(struct timerwheel *tw)
{
	unsigned int i;

	if (tw == NULL)
		return;
	for (i = 0; i < TW_NSLOTS; i++)
		list_detach_all(&tw->slot[i]);
	list_detach_all(&tw->due);
	list_detach_all(&tw->run);
	xfree(tw);
}

void
timerwheel_add(struct timerwheel *tw, struct timerwheel_timer *t,
	       int64_t expire_ms)
{
	uint64_t key = tw_key(expire_ms);

	if (timerwheel_pending(t))
		timer_unlink(tw, t);
	else
		tw->count++;
	t->expire = expire_ms;
	if (key <= tw->now)
		due_append(tw, t);
	else
		wheel_insert(tw, t, key);
}

void
timerwheel_cancel(struct timerwheel *tw, struct timerwheel_timer *t)
{
	if (!timerwheel_pending(t))
		return;
	timer_unlink(tw, t);
	tw->count--;
}

int
timerwheel_pending(const struct timerwheel_timer *t)
{
	return t->link.next != NULL;
}

/*
 * Fires the due list, then jumps from event to event (a level-0 slot to
 * fire or a higher slot to cascade) rather than tick by tick.
 */
size_t
timerwheel_advance(struct timerwheel *tw, int64_t now_ms)
{
	uint64_t target = tw_key(now_ms), when;
	size_t fired = 0;
	unsigned int b;
	int rc;

	if (tw->in_advance || target < tw->now)
		return 0;
	tw->in_advance = 1;
	if (!list_empty(&tw->due)) {
		due_sort(tw);
		list_splice_tail(&tw->run, &tw->due);
		tw->due_sorted = 1;
		fired += run_list(tw);
	}
	while (tw->now < target) {
		rc = next_event(tw, &when);
		if (rc < 0 || when > target) {
			tw->now = target;
			break;
		}
		if (rc == 1)
			when = park_skip(tw, target);
		tw->now = when;
		cascade(tw);
		b = (unsigned int)(when & TW_LVL_MASK);
		if (!list_empty(&tw->slot[b])) {
			list_splice_tail(&tw->run, &tw->slot[b]);
			tw->occupied[0] &= ~(UINT64_C(1) << b);
			fired += run_list(tw);
		}
	}
	tw->in_advance = 0;
	return fired;
}

int64_t
timerwheel_next_timeout(const struct timerwheel *tw)
{
	uint64_t when;

	if (!list_empty(&tw->due) || !list_empty(&tw->run))
		return 0;
	if (next_event(tw, &when) < 0)
		return -1;
	return (int64_t)(when - tw->now);
}

int64_t
timerwheel_now(const struct timerwheel *tw)
{
	return (int64_t)(tw->now ^ (UINT64_C(1) << 63));
}

size_t
timerwheel_count(const struct timerwheel *tw)
{
	return tw->count;
}
