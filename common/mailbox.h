#ifndef PROPHET_MAILBOX_H
#define PROPHET_MAILBOX_H

struct event_base;

/*
 * The one way a library thread (the DB pool's, zookeeper_mt's) hands
 * work to the libevent loop: mailbox_post() queues an item from any
 * thread and wakes the loop, which calls cb(item, arg) for each item on
 * the loop thread, in the order they were posted. The base must be
 * thread-aware (evthread_use_pthreads() before event_base_new()).
 *
 * Ownership: a posted item is the mailbox's until it is handed to cb
 * (delivered) or to drop_cb (destroyed undelivered); then it is theirs.
 * The poster must not touch it after mailbox_post(). cb may post again;
 * such items are delivered on a later loop iteration.
 */
struct mailbox;

typedef void (*mailbox_fn)(void *item, void *arg);

/* drop_cb receives the items still queued at mailbox_destroy(); NULL
 * when none can be left (the owner drains first). */
struct mailbox *mailbox_create(struct event_base *base, mailbox_fn cb,
			       mailbox_fn drop_cb, void *arg);
/* Any thread, until mailbox_destroy() begins. */
void mailbox_post(struct mailbox *mb, void *item);
/* Delivers what is queued now, on the calling (the loop's) thread. */
void mailbox_drain(struct mailbox *mb);
/* On the loop thread, once no thread posts any more. */
void mailbox_destroy(struct mailbox *mb);

#endif
