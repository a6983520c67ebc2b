#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"
#include "zk.h"

struct zk_ev {
	int type;
	int state;
	char *path;
	struct zk_ev *next;
};

struct zk {
	struct event_base *base;
	zhandle_t *zh;
	char *hosts;
	int timeout_ms;
	zk_event_fn cb;
	void *arg;
	struct event *ev;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct zk_ev *head, *tail;
	int connected; /* written on the client thread, under mu */
};

const char *
zk_state_name(int state)
{
	if (state == ZOO_CONNECTED_STATE)
		return "connected";
	if (state == ZOO_CONNECTING_STATE)
		return "connecting";
	if (state == ZOO_EXPIRED_SESSION_STATE)
		return "expired";
	if (state == ZOO_AUTH_FAILED_STATE)
		return "auth_failed";
	if (state == ZOO_ASSOCIATING_STATE)
		return "associating";
	return "unknown";
}

/* Runs on the ZooKeeper client thread: enqueue and wake the loop only. */
static void
watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk *z = ctx;
	struct zk_ev *e = xcalloc(1, sizeof(*e));

	e->type = type;
	e->state = state;
	e->path = path ? xstrdup(path) : NULL;
	pthread_mutex_lock(&z->mu);
	if (type == ZOO_SESSION_EVENT) {
		z->connected = state == ZOO_CONNECTED_STATE;
		pthread_cond_broadcast(&z->cond);
	}
	if (z->tail != NULL)
		z->tail->next = e;
	else
		z->head = e;
	z->tail = e;
	pthread_mutex_unlock(&z->mu);
	event_active(z->ev, EV_READ, 0);
}

static void
dispatch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zk *z = arg;
	struct zk_ev *list, *e;

	pthread_mutex_lock(&z->mu);
	list = z->head;
	z->head = z->tail = NULL;
	pthread_mutex_unlock(&z->mu);
	while ((e = list) != NULL) {
		list = e->next;
		if (z->cb != NULL)
			z->cb(z, e->type, e->state, e->path, z->arg);
		xfree(e->path);
		xfree(e);
	}
}

static int
zk_open(struct zk *z)
{
	z->zh = zookeeper_init(z->hosts, watcher, z->timeout_ms, NULL, z, 0);
	if (z->zh == NULL) {
		log_error("zookeeper_init failed", "hosts=%s error=\"%s\"",
			  z->hosts, strerror(errno));
		return -1;
	}
	return 0;
}

struct zk *
zk_create(struct event_base *base, const char *hosts, int timeout_ms,
	  zk_event_fn cb, void *arg)
{
	struct zk *z = xcalloc(1, sizeof(*z));

	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	z->base = base;
	z->hosts = xstrdup(hosts);
	z->timeout_ms = timeout_ms;
	z->cb = cb;
	z->arg = arg;
	pthread_mutex_init(&z->mu, NULL);
	pthread_cond_init(&z->cond, NULL);
	z->ev = event_new(base, -1, 0, dispatch_cb, z);
	if (zk_open(z) < 0) {
		zk_destroy(z);
		return NULL;
	}
	return z;
}

void
zk_destroy(struct zk *z)
{
	struct zk_ev *e;

	if (z == NULL)
		return;
	if (z->zh != NULL)
		zookeeper_close(z->zh);
	while ((e = z->head) != NULL) {
		z->head = e->next;
		xfree(e->path);
		xfree(e);
	}
	event_free(z->ev);
	pthread_mutex_destroy(&z->mu);
	pthread_cond_destroy(&z->cond);
	xfree(z->hosts);
	xfree(z);
}

int
zk_wait_connected(struct zk *z, int timeout_ms)
{
	struct timespec deadline;
	int ok;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&z->mu);
	while (!z->connected &&
	       pthread_cond_timedwait(&z->cond, &z->mu, &deadline) == 0)
		;
	ok = z->connected;
	pthread_mutex_unlock(&z->mu);
	return ok ? 0 : -1;
}

int
zk_reopen(struct zk *z)
{
	if (z->zh != NULL)
		zookeeper_close(z->zh);
	z->zh = NULL;
	pthread_mutex_lock(&z->mu);
	z->connected = 0;
	pthread_mutex_unlock(&z->mu);
	return zk_open(z);
}

zhandle_t *
zk_handle(struct zk *z)
{
	return z->zh;
}

int
zk_is_connected(struct zk *z)
{
	int c;

	pthread_mutex_lock(&z->mu);
	c = z->connected;
	pthread_mutex_unlock(&z->mu);
	return c;
}

int
zk_ensure(struct zk *z, const char *path, const char *data, int flags)
{
	int rc = zoo_create(z->zh, path, data, data ? (int)strlen(data) : -1,
			    &ZOO_OPEN_ACL_UNSAFE, flags, NULL, 0);

	if (rc == ZOK || rc == ZNODEEXISTS)
		return 0;
	log_error("zookeeper create failed", "path=%s error=\"%s\"", path,
		  zerror(rc));
	return -1;
}

char *
zk_get(struct zk *z, const char *path, struct Stat *st, int *rcp)
{
	char *buf = NULL;
	int len = 4096, rc;
	struct Stat s;

	for (;;) {
		int got = len;

		buf = xrealloc(buf, (size_t)len + 1);
		rc = zoo_get(z->zh, path, 0, buf, &got, &s);
		if (rc != ZOK) {
			xfree(buf);
			if (rcp != NULL)
				*rcp = rc;
			return NULL;
		}
		if (s.dataLength <= len) {
			buf[got < 0 ? 0 : got] = '\0';
			break;
		}
		len = s.dataLength;
	}
	if (st != NULL)
		*st = s;
	if (rcp != NULL)
		*rcp = ZOK;
	return buf;
}
