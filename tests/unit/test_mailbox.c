#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "mailbox.h"
#include "xmalloc.h"

#define NTHREADS 4
#define PER_THREAD 20000

struct item {
	int thread;
	int seq;
};

struct sink {
	struct event_base *base;
	pthread_t loop_thread;
	size_t got;
	size_t want;
	int next[NTHREADS]; /* the next seq expected from each thread */
	int wrong_thread;
	int out_of_order;
	size_t dropped;
	struct mailbox *mb; /* for the callback that posts again */
	int repost;
};

static void
sink_cb(void *it, void *arg)
{
	struct sink *s = arg;
	struct item *i = it;

	if (!pthread_equal(pthread_self(), s->loop_thread))
		s->wrong_thread = 1;
	if (i->seq != s->next[i->thread])
		s->out_of_order = 1;
	s->next[i->thread] = i->seq + 1;
	xfree(i);
	s->got++;
	if (s->repost > 0) {
		struct item *again = xcalloc(1, sizeof(*again));

		s->repost--;
		again->thread = 0;
		again->seq = s->next[0];
		s->want++;
		mailbox_post(s->mb, again);
	}
	if (s->got == s->want)
		event_base_loopbreak(s->base);
}

static void
drop_cb(void *it, void *arg)
{
	struct sink *s = arg;

	xfree(it);
	s->dropped++;
}

struct poster {
	struct mailbox *mb;
	int thread;
};

static void *
poster_main(void *arg)
{
	struct poster *p = arg;

	for (int k = 0; k < PER_THREAD; k++) {
		struct item *i = xcalloc(1, sizeof(*i));

		i->thread = p->thread;
		i->seq = k;
		mailbox_post(p->mb, i);
	}
	return NULL;
}

static struct event_base *
base_new(void)
{
	struct event_base *b;

	evthread_use_pthreads();
	b = event_base_new();
	assert_non_null(b);
	return b;
}

/* Several threads post at once while the loop runs: every item arrives
 * once, on the loop thread, each thread's items in the order posted. */
static void
test_posts_from_threads(void **state)
{
	struct sink s;
	struct poster p[NTHREADS];
	pthread_t t[NTHREADS];

	memset(&s, 0, sizeof(s));
	s.base = base_new();
	s.loop_thread = pthread_self();
	s.want = (size_t)NTHREADS * PER_THREAD;
	s.mb = mailbox_create(s.base, sink_cb, drop_cb, &s);
	for (int i = 0; i < NTHREADS; i++) {
		p[i].mb = s.mb;
		p[i].thread = i;
		assert_int_equal(
			pthread_create(&t[i], NULL, poster_main, &p[i]), 0);
	}
	/* No pending event but the mailbox's: without the flag the loop
	 * would return as soon as nothing is active. */
	while (s.got < s.want)
		event_base_loop(s.base, EVLOOP_NO_EXIT_ON_EMPTY);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(s.got, s.want);
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(s.next[i], PER_THREAD);
	assert_false(s.wrong_thread);
	assert_false(s.out_of_order);
	mailbox_destroy(s.mb);
	assert_int_equal(s.dropped, 0);
	event_base_free(s.base);
}

/* A callback may post: that item comes on a later iteration. */
static void
test_post_from_callback(void **state)
{
	struct sink s;
	struct item *i = xcalloc(1, sizeof(*i));

	memset(&s, 0, sizeof(s));
	s.base = base_new();
	s.loop_thread = pthread_self();
	s.want = 1;
	s.repost = 5;
	s.mb = mailbox_create(s.base, sink_cb, drop_cb, &s);
	mailbox_post(s.mb, i);
	while (s.got < s.want)
		event_base_loop(s.base, EVLOOP_NO_EXIT_ON_EMPTY);
	assert_int_equal(s.got, 6);
	assert_int_equal(s.next[0], 6);
	assert_false(s.out_of_order);
	mailbox_destroy(s.mb);
	event_base_free(s.base);
}

/* mailbox_drain delivers at once; mailbox_destroy hands what is left to
 * drop_cb, not to cb. */
static void
test_drain_and_destroy(void **state)
{
	struct sink s;

	memset(&s, 0, sizeof(s));
	s.base = base_new();
	s.loop_thread = pthread_self();
	s.want = 1000;
	s.mb = mailbox_create(s.base, sink_cb, drop_cb, &s);
	for (int k = 0; k < 3; k++) {
		struct item *i = xcalloc(1, sizeof(*i));

		i->seq = k;
		mailbox_post(s.mb, i);
	}
	mailbox_drain(s.mb);
	assert_int_equal(s.got, 3);
	for (int k = 0; k < 2; k++) {
		struct item *i = xcalloc(1, sizeof(*i));

		i->seq = 3 + k;
		mailbox_post(s.mb, i);
	}
	mailbox_destroy(s.mb);
	assert_int_equal(s.got, 3);
	assert_int_equal(s.dropped, 2);
	mailbox_destroy(NULL);
	event_base_free(s.base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_posts_from_threads),
		cmocka_unit_test(test_post_from_callback),
		cmocka_unit_test(test_drain_and_destroy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
