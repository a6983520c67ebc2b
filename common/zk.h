#ifndef PROPHET_ZK_H
#define PROPHET_ZK_H

#include <stddef.h>

#include <zookeeper/zookeeper.h>

struct event_base;

/*
 * A zookeeper_mt session whose watcher events are handed to the libevent
 * loop: the client's own thread only enqueues and wakes the loop, and
 * event_cb runs on the loop thread. Synchronous calls on the handle are
 * allowed from the loop (they are few: a handful per rebalance).
 */
struct zk;

typedef void (*zk_event_fn)(struct zk *z, int type, int state, const char *path,
			    void *arg);

struct zk *zk_create(struct event_base *base, const char *hosts, int timeout_ms,
		     zk_event_fn cb, void *arg);
void zk_destroy(struct zk *z);
/* Blocks until connected or timeout. 0 when connected. */
int zk_wait_connected(struct zk *z, int timeout_ms);
/* Closes an expired handle and opens a new session. */
int zk_reopen(struct zk *z);
zhandle_t *zk_handle(struct zk *z);
int zk_is_connected(struct zk *z);

/* Creates path with data if it does not exist (ZNODEEXISTS is success). */
int zk_ensure(struct zk *z, const char *path, const char *data, int flags);
/* Reads a node into a new NUL-terminated string; NULL if absent/error
 * (*rc tells which). */
char *zk_get(struct zk *z, const char *path, struct Stat *st, int *rc);
const char *zk_state_name(int state);

#endif
