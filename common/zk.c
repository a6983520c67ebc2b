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

enum zk_call_kind {
	ZK_WATCH,
	ZK_DATA,
	ZK_CHILDREN,
	ZK_STRING,
	ZK_STAT,
	ZK_VOID
};

/* A watcher event or a completion, queued from a client thread. */
struct zk_ev {
	enum zk_call_kind kind;
	struct zk *z;
	int type;
	int state;
	char *path;
	int rc;
	char *data;
	int len;
	struct Stat st;
	int has_st;
	struct String_vector names;
	void *cb;
	void *arg;
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

static FILE *zk_null_stream;

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

static void
enqueue(struct zk *z, struct zk_ev *e)
{
	pthread_mutex_lock(&z->mu);
	if (e->kind == ZK_WATCH && e->type == ZOO_SESSION_EVENT) {
		z->connected = e->state == ZOO_CONNECTED_STATE;
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

/* Runs on the ZooKeeper client thread: enqueue and wake the loop only. */
static void
watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk *z = ctx;
	struct zk_ev *e = xcalloc(1, sizeof(*e));

	e->kind = ZK_WATCH;
	e->type = type;
	e->state = state;
	e->path = path ? xstrdup(path) : NULL;
	enqueue(z, e);
}

static void
free_names(struct String_vector *v)
{
	for (int i = 0; i < v->count; i++)
		xfree(v->data[i]);
	xfree(v->data);
	v->data = NULL;
	v->count = 0;
}

static void
dispatch_one(struct zk *z, struct zk_ev *e)
{
	switch (e->kind) {
	case ZK_WATCH:
		if (z->cb != NULL)
			z->cb(z, e->type, e->state, e->path, z->arg);
		break;
	case ZK_DATA:
		((zk_data_fn)e->cb)(z, e->rc, e->data, e->len,
				    e->has_st ? &e->st : NULL, e->arg);
		break;
	case ZK_CHILDREN:
		((zk_children_fn)e->cb)(z, e->rc, &e->names, e->arg);
		break;
	case ZK_STRING: ((zk_string_fn)e->cb)(z, e->rc, e->data, e->arg); break;
	case ZK_STAT:
		((zk_stat_fn)e->cb)(z, e->rc, e->has_st ? &e->st : NULL,
				    e->arg);
		break;
	case ZK_VOID: ((zk_void_fn)e->cb)(z, e->rc, e->arg); break;
	}
}

static void
free_ev(struct zk_ev *e)
{
	xfree(e->path);
	xfree(e->data);
	free_names(&e->names);
	xfree(e);
}

/* Completions, on a client thread: copy what they carry and enqueue. */
static void
data_done(int rc, const char *value, int len, const struct Stat *st,
	  const void *data)
{
	struct zk_ev *e = (struct zk_ev *)data;

	e->rc = rc;
	if (rc == ZOK && value != NULL && len > 0) {
		e->data = xmalloc((size_t)len + 1);
		memcpy(e->data, value, (size_t)len);
		e->data[len] = '\0';
		e->len = len;
	}
	if (rc == ZOK && st != NULL) {
		e->st = *st;
		e->has_st = 1;
	}
	enqueue(e->z, e);
}

static void
children_done(int rc, const struct String_vector *strings, const void *data)
{
	struct zk_ev *e = (struct zk_ev *)data;

	e->rc = rc;
	if (rc == ZOK && strings != NULL && strings->count > 0) {
		e->names.count = strings->count;
		e->names.data = xcalloc((size_t)strings->count, sizeof(char *));
		for (int i = 0; i < strings->count; i++)
			e->names.data[i] = xstrdup(strings->data[i]);
	}
	enqueue(e->z, e);
}

static void
string_done(int rc, const char *value, const void *data)
{
	struct zk_ev *e = (struct zk_ev *)data;

	e->rc = rc;
	if (rc == ZOK && value != NULL)
		e->data = xstrdup(value);
	enqueue(e->z, e);
}

static void
stat_done(int rc, const struct Stat *st, const void *data)
{
	struct zk_ev *e = (struct zk_ev *)data;

	e->rc = rc;
	if (rc == ZOK && st != NULL) {
		e->st = *st;
		e->has_st = 1;
	}
	enqueue(e->z, e);
}

static void
void_done(int rc, const void *data)
{
	struct zk_ev *e = (struct zk_ev *)data;

	e->rc = rc;
	enqueue(e->z, e);
}

static struct zk_ev *
call_new(struct zk *z, enum zk_call_kind kind, void *cb, void *arg)
{
	struct zk_ev *e = xcalloc(1, sizeof(*e));

	e->kind = kind;
	e->z = z;
	e->cb = cb;
	e->arg = arg;
	return e;
}

static int
call_sent(struct zk_ev *e, int rc)
{
	if (rc == ZOK)
		return 0;
	free_ev(e);
	return -1;
}

int
zk_aget(struct zk *z, const char *path, int watch, zk_data_fn cb, void *arg)
{
	struct zk_ev *e = call_new(z, ZK_DATA, (void *)cb, arg);

	return call_sent(e, zoo_aget(z->zh, path, watch, data_done, e));
}

int
zk_aget_children(struct zk *z, const char *path, int watch, zk_children_fn cb,
		 void *arg)
{
	struct zk_ev *e = call_new(z, ZK_CHILDREN, (void *)cb, arg);

	return call_sent(
		e, zoo_aget_children(z->zh, path, watch, children_done, e));
}

int
zk_aexists(struct zk *z, const char *path, int watch, zk_stat_fn cb, void *arg)
{
	struct zk_ev *e = call_new(z, ZK_STAT, (void *)cb, arg);

	return call_sent(e, zoo_aexists(z->zh, path, watch, stat_done, e));
}

int
zk_acreate(struct zk *z, const char *path, const char *data, int flags,
	   zk_string_fn cb, void *arg)
{
	struct zk_ev *e = call_new(z, ZK_STRING, (void *)cb, arg);

	return call_sent(
		e, zoo_acreate(z->zh, path, data, data ? (int)strlen(data) : -1,
			       &ZOO_OPEN_ACL_UNSAFE, flags, string_done, e));
}

int
zk_aset(struct zk *z, const char *path, const char *data, int version,
	zk_stat_fn cb, void *arg)
{
	struct zk_ev *e = call_new(z, ZK_STAT, (void *)cb, arg);

	return call_sent(e, zoo_aset(z->zh, path, data, (int)strlen(data),
				     version, stat_done, e));
}

int
zk_amulti(struct zk *z, int count, const zoo_op_t *ops,
	  zoo_op_result_t *results, zk_void_fn cb, void *arg)
{
	struct zk_ev *e = call_new(z, ZK_VOID, (void *)cb, arg);

	return call_sent(e,
			 zoo_amulti(z->zh, count, ops, results, void_done, e));
}

int64_t
zk_session_id(struct zk *z)
{
	const clientid_t *id = z->zh ? zoo_client_id(z->zh) : NULL;

	return id ? id->client_id : 0;
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
		dispatch_one(z, e);
		free_ev(e);
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

	/* The client library logs in its own format; every state change
	 * it reports reaches event_cb and is logged there, our way. */
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	if (zk_null_stream == NULL)
		zk_null_stream = fopen("/dev/null", "w");
	if (zk_null_stream != NULL)
		zoo_set_log_stream(zk_null_stream);
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
		free_ev(e);
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
