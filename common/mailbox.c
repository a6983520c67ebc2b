#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include <event2/event.h>

#include "log.h"
#include "mailbox.h"
#include "xmalloc.h"

struct mailbox {
	struct event *ev;
	pthread_mutex_t mu;
	void **items; /* queued, under mu */
	size_t n, cap;
	void **spare; /* the loop's buffer between two deliveries */
	size_t spare_cap;
	mailbox_fn cb;
	mailbox_fn drop_cb;
	void *arg;
};

/* Takes the queue, leaving the spare buffer in its place: posters never
 * wait for the callbacks. */
static size_t
take(struct mailbox *mb, void ***items, size_t *cap)
{
	size_t n;

	pthread_mutex_lock(&mb->mu);
	*items = mb->items;
	*cap = mb->cap;
	n = mb->n;
	mb->items = mb->spare;
	mb->cap = mb->spare_cap;
	mb->n = 0;
	pthread_mutex_unlock(&mb->mu);
	mb->spare = NULL;
	mb->spare_cap = 0;
	return n;
}

/* The buffer take() returned, kept for the next one (loop thread only). */
static void
give_back(struct mailbox *mb, void **items, size_t cap)
{
	if (mb->spare == NULL) {
		mb->spare = items;
		mb->spare_cap = cap;
	} else {
		xfree(items);
	}
}

void
mailbox_drain(struct mailbox *mb)
{
	void **items;
	size_t cap, n = take(mb, &items, &cap);

	for (size_t i = 0; i < n; i++)
		mb->cb(items[i], mb->arg);
	give_back(mb, items, cap);
}

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	mailbox_drain(arg);
}

struct mailbox *
mailbox_create(struct event_base *base, mailbox_fn cb, mailbox_fn drop_cb,
	       void *arg)
{
	struct mailbox *mb = xcalloc(1, sizeof(*mb));

	pthread_mutex_init(&mb->mu, NULL);
	mb->cb = cb;
	mb->drop_cb = drop_cb;
	mb->arg = arg;
	mb->ev = event_new(base, -1, 0, wake_cb, mb);
	return mb;
}

void
mailbox_post(struct mailbox *mb, void *item)
{
	pthread_mutex_lock(&mb->mu);
	if (mb->n == mb->cap) {
		mb->cap = mb->cap ? mb->cap * 2 : 16;
		mb->items = xrealloc(mb->items, mb->cap * sizeof(*mb->items));
	}
	mb->items[mb->n++] = item;
	/* Only the first item wakes the loop: the others find the event
	 * active, or are taken with it. Under mu, so that no poster is
	 * left between its unlock and this when mailbox_destroy frees the
	 * event. */
	if (mb->n == 1)
		event_active(mb->ev, EV_READ, 0);
	pthread_mutex_unlock(&mb->mu);
}

void
mailbox_destroy(struct mailbox *mb)
{
	void **items;
	size_t cap, n;

	if (mb == NULL)
		return;
	n = take(mb, &items, &cap);
	if (n > 0 && mb->drop_cb == NULL)
		log_fatal("mailbox destroyed with items queued", "items=%zu",
			  n);
	for (size_t i = 0; i < n; i++)
		mb->drop_cb(items[i], mb->arg);
	xfree(items);
	xfree(mb->items); /* the spare take() left in its place */
	event_free(mb->ev);
	pthread_mutex_destroy(&mb->mu);
	xfree(mb);
}
