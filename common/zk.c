#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cfg.h"
#include "crypto.h"
#include "daemon.h"
#include "log.h"
#include "mailbox.h"
#include "secret.h"
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
};

struct zk {
	struct event_base *base;
	zhandle_t *zh;
	char *hosts;
	int timeout_ms;
	zk_event_fn cb;
	void *arg;
	struct mailbox *events; /* watcher events and completions */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int connected;	     /* written on the client thread, under mu */
	int64_t lost_ms;     /* monotonic: the connection was lost; 0: not */
	int expired;	     /* the session expired; until connected again */
	char *auth;	     /* "user:password" (digest), NULL: none */
	char digest_id[256]; /* what ACLs record for auth */
	struct ACL acl_items[2];
	struct ACL_vector acl;
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
	if (e->kind == ZK_WATCH && e->type == ZOO_SESSION_EVENT) {
		pthread_mutex_lock(&z->mu);
		if (e->state == ZOO_CONNECTED_STATE)
			z->lost_ms = 0;
		else if (z->connected)
			z->lost_ms = clock_mono_ms();
		if (e->state == ZOO_EXPIRED_SESSION_STATE)
			z->expired = 1;
		else if (e->state == ZOO_CONNECTED_STATE)
			z->expired = 0;
		z->connected = e->state == ZOO_CONNECTED_STATE;
		pthread_cond_broadcast(&z->cond);
		pthread_mutex_unlock(&z->mu);
	}
	mailbox_post(z->events, e);
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

	return call_sent(e, zoo_acreate(z->zh, path, data,
					data ? (int)strlen(data) : -1, &z->acl,
					flags, string_done, e));
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
deliver_cb(void *item, void *arg)
{
	dispatch_one(arg, item);
	free_ev(item);
}

/* Left queued at zk_destroy: not delivered. */
static void
drop_cb(void *item, void *arg)
{
	free_ev(item);
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
	/* Queued at the head of what is sent on connect (and sent again by
	 * the client on every reconnect), so no request goes out before. */
	if (z->auth != NULL &&
	    zoo_add_auth(z->zh, "digest", z->auth, (int)strlen(z->auth), NULL,
			 NULL) != ZOK) {
		log_error("zookeeper authentication could not be queued", "");
		zookeeper_close(z->zh);
		z->zh = NULL;
		return -1;
	}
	return 0;
}

void
zk_digest_id(const char *userpass, char *out, size_t outlen)
{
	const char *colon = strchr(userpass, ':');
	unsigned char sha[CRYPTO_SHA1_LEN];
	char b64[4 * ((CRYPTO_SHA1_LEN + 2) / 3) + 1];
	size_t ulen = colon ? (size_t)(colon - userpass) : strlen(userpass);

	crypto_sha1(userpass, strlen(userpass), sha);
	crypto_base64(sha, sizeof(sha), b64);
	snprintf(out, outlen, "%.*s:%s", (int)ulen, userpass, b64);
}

/* zookeeper.auth_file: "user:password", as zkCli's addauth takes it. */
static void
zk_load_auth(struct zk *z, const struct cfg *cfg)
{
	char err[512];
	char *a = cfg_secret(cfg, CFG_ZK_AUTH_FILE, err, sizeof(err));
	const char *colon;

	if (a == NULL && err[0] != '\0')
		log_fatal("bad config", "error=\"%s\"", err);
	if (a == NULL) {
		z->acl = ZOO_OPEN_ACL_UNSAFE;
		return;
	}
	colon = strchr(a, ':');
	if (colon == NULL || colon == a || colon[1] == '\0') {
		secret_free(a);
		log_fatal("bad config", "error=\"zookeeper.auth_file: expected "
					"user:password on one line\"");
	}
	z->auth = a;
	zk_digest_id(a, z->digest_id, sizeof(z->digest_id));
	z->acl_items[0].perms = ZOO_PERM_ALL;
	z->acl_items[0].id = ZOO_AUTH_IDS;
	z->acl_items[1].perms = ZOO_PERM_READ;
	z->acl_items[1].id = ZOO_ANYONE_ID_UNSAFE;
	z->acl.count = 2;
	z->acl.data = z->acl_items;
}

struct ACL_vector *
zk_acl(struct zk *z)
{
	return &z->acl;
}

static int
acl_is(const struct ACL *a, int perms, const char *scheme, const char *id)
{
	return a->perms == perms && !strcmp(a->id.scheme, scheme) &&
	       !strcmp(a->id.id, id);
}

/* The ACL zk_acl() gives a node, as the server records it. */
static int
acl_is_ours(const struct zk *z, const struct ACL_vector *v)
{
	if (z->auth == NULL)
		return v->count == 1 &&
		       acl_is(&v->data[0], ZOO_PERM_ALL, "world", "anyone");
	if (v->count != 2)
		return 0;
	for (int i = 0; i < 2; i++)
		if (acl_is(&v->data[i], ZOO_PERM_ALL, "digest", z->digest_id) &&
		    acl_is(&v->data[1 - i], ZOO_PERM_READ, "world", "anyone"))
			return 1;
	return 0;
}

/* The digest user names an ACL grants rights beyond reading to. */
static void
acl_users(const struct ACL_vector *v, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; i < v->count && n < len; i++) {
		const struct ACL *a = &v->data[i];
		size_t ul = strcspn(a->id.id, ":");

		if (strcmp(a->id.scheme, "digest") || a->perms == ZOO_PERM_READ)
			continue;
		n += (size_t)snprintf(buf + n, len - n, "%s%.*s", n ? ", " : "",
				      (int)ul, a->id.id);
	}
	if (buf[0] == '\0')
		snprintf(buf, len, "none");
}

/* 1 and the node's ACL in *v (deallocate_ACL_vector it) and its stat in
 * *st, 0 when there is no such node, -1 with err on another error. */
static int
get_acl(struct zk *z, const char *path, struct ACL_vector *v, struct Stat *st,
	char *err, size_t errlen)
{
	int rc = zoo_get_acl(z->zh, path, v, st);

	if (rc == ZNONODE)
		return 0;
	if (rc != ZOK) {
		snprintf(err, errlen,
			 "zookeeper: cannot read the ACL of %s: %s", path,
			 zerror(rc));
		return -1;
	}
	return 1;
}

int
zk_check_access(struct zk *z, const char *path, char *err, size_t errlen)
{
	struct ACL_vector v;
	struct Stat st;
	char users[256];
	int rc = get_acl(z, path, &v, &st, err, errlen), ok = 0;

	if (rc <= 0)
		return rc;
	for (int i = 0; i < v.count; i++) {
		const struct ACL *a = &v.data[i];

		if (!strcmp(a->id.scheme, "world") &&
		    (a->perms & ZOO_PERM_WRITE))
			ok = 1;
		if (z->auth != NULL &&
		    acl_is(a, ZOO_PERM_ALL, "digest", z->digest_id))
			ok = 1;
	}
	acl_users(&v, users, sizeof(users));
	deallocate_ACL_vector(&v);
	if (ok)
		return 0;
	if (z->auth != NULL)
		snprintf(err, errlen,
			 "zookeeper refused the credentials: %s grants its "
			 "rights to digest user(s) %s, not to zookeeper."
			 "auth_file's %.*s with this password (wrong "
			 "password?)",
			 path, users, (int)strcspn(z->auth, ":"), z->auth);
	else
		snprintf(err, errlen,
			 "zookeeper: %s is protected by an ACL (digest user(s) "
			 "%s): set zookeeper.auth_file",
			 path, users);
	return -1;
}

int
zk_repair_acl(struct zk *z, const char *path, char *err, size_t errlen)
{
	struct ACL_vector v;
	struct Stat st;
	int rc = get_acl(z, path, &v, &st, err, errlen), ours;

	if (rc <= 0)
		return rc;
	ours = acl_is_ours(z, &v);
	deallocate_ACL_vector(&v);
	if (ours)
		return 0;
	rc = zoo_set_acl(z->zh, path, st.aversion, &z->acl);
	if (rc == ZNONODE)
		return 0;
	if (rc != ZOK) {
		snprintf(err, errlen,
			 "zookeeper: cannot set the ACL of %s: %s%s", path,
			 zerror(rc),
			 rc == ZNOAUTH
				 ? (z->auth ? " (zookeeper.auth_file: "
					      "wrong password?)"
					    : " (set zookeeper.auth_file)")
				 : "");
		return -1;
	}
	return 1;
}

struct zk *
zk_create(struct event_base *base, const struct cfg *cfg, zk_event_fn cb,
	  void *arg)
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
	z->hosts = xstrdup(cfg_str(cfg, CFG_ZK_HOSTS));
	z->timeout_ms = (int)cfg_int(cfg, CFG_ZK_SESSION_TIMEOUT_MS);
	zk_load_auth(z, cfg);
	z->cb = cb;
	z->arg = arg;
	pthread_mutex_init(&z->mu, NULL);
	pthread_cond_init(&z->cond, NULL);
	z->events = mailbox_create(base, deliver_cb, drop_cb, z);
	if (zk_open(z) < 0) {
		zk_destroy(z);
		return NULL;
	}
	return z;
}

void
zk_destroy(struct zk *z)
{
	if (z == NULL)
		return;
	if (z->zh != NULL)
		zookeeper_close(z->zh);
	mailbox_destroy(z->events);
	pthread_mutex_destroy(&z->mu);
	pthread_cond_destroy(&z->cond);
	xfree(z->hosts);
	secret_free(z->auth);
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
zk_is_ready(struct zk *z)
{
	int r;

	pthread_mutex_lock(&z->mu);
	r = z->connected ||
	    (z->lost_ms != 0 && !z->expired &&
	     clock_mono_ms() - z->lost_ms < (int64_t)z->timeout_ms * 2 / 3);
	pthread_mutex_unlock(&z->mu);
	return r;
}

int
zk_ensure(struct zk *z, const char *path, const char *data, int flags)
{
	int rc = zoo_exists(z->zh, path, 0, NULL);

	/* Looked up first: creating an existing node fails ZNOAUTH when
	 * the parent's ACL does not let us create. */
	if (rc == ZOK)
		return 0;
	rc = zoo_create(z->zh, path, data, data ? (int)strlen(data) : -1,
			&z->acl, flags, NULL, 0);
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
