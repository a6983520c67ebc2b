#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "cfg.h"
#include "daemon.h"
#include "cover.h"
#include "keys.h"
#include "log.h"
#include "notifier.h"
#include "xmalloc.h"
#include "zk.h"

/*
 * What this notifier consumes, in an ephemeral node
 * <root>/notifiers/<id>-<sequence> (proto/cover.h): the manager counts
 * and warns of callback tasks submitted on a topic no running notifier
 * covers. ZooKeeper is not needed to make callbacks: while it is away
 * the notifier consumes on, and announces itself once it is back.
 */

#define ANNOUNCE_RETRY_S 2

static void announce(struct notifier *n);

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	announce(arg);
}

static void
retry_later(struct notifier *n)
{
	struct timeval tv = {ANNOUNCE_RETRY_S, 0};

	evtimer_add(n->announce_ev, &tv);
}

/* The tree's ACL refuses our identity: once a session, which key to fix
 * (an ACL set right by hand meanwhile lets a retry through). */
static void
refused(struct notifier *n, struct zk *z)
{
	char err[512];

	if (n->refused_session == zk_session_id(z))
		return;
	n->refused_session = zk_session_id(z);
	if (zk_check_access(z, cfg_str(n->cfg, CFG_CLUSTER_ROOT), err,
			    sizeof(err)) == 0)
		snprintf(err, sizeof(err), "zookeeper: %s", zerror(ZNOAUTH));
	log_error("cannot announce the notifier in zookeeper: the managers "
		  "count its topics as covered by no notifier; retrying",
		  "error=\"%s\"", err);
}

static void
created_cb(struct zk *z, int rc, const char *value, void *arg)
{
	struct notifier *n = arg;

	n->announcing = 0;
	if (rc == ZNOAUTH) {
		refused(n, z);
		retry_later(n);
		return;
	}
	if (rc != ZOK) {
		log_warn("cannot announce the notifier in zookeeper; retrying",
			 "error=\"%s\"", zerror(rc));
		retry_later(n);
		return;
	}
	n->announced_session = zk_session_id(z);
	log_info("announced", "path=%s", value);
}

static char *
node_json(struct notifier *n)
{
	json_t *o = json_pack("{s:s, s:s, s:O, s:O, s:O, s:I}", "id", n->id,
			      "group", cfg_str(n->cfg, CFG_NOTIFIER_GROUP),
			      "topics", n->sub_topics, "patterns",
			      n->sub_patterns, "excluded", n->sub_excluded,
			      "at", (json_int_t)clock_now_ms());
	char *s = json_dumps(o, JSON_COMPACT);

	json_decref(o);
	return s;
}

static void
announce(struct notifier *n)
{
	const char *root = cfg_str(n->cfg, CFG_CLUSTER_ROOT);
	char path[1024], *data;

	if (n->stopping || n->announcing || n->zk == NULL ||
	    !zk_is_connected(n->zk) ||
	    n->announced_session == zk_session_id(n->zk))
		return;
	/* Covered only once consuming (secret.c starts it). */
	if (n->consumer == NULL) {
		retry_later(n);
		return;
	}
	/* The manager makes the tree; until one has, there is nobody to
	 * tell. */
	if (zoo_exists(zk_handle(n->zk), root, 0, NULL) != ZOK) {
		retry_later(n);
		return;
	}
	zpath(path, sizeof(path), root, ZPATH_NOTIFIERS);
	if (zk_ensure(n->zk, path, NULL, 0) < 0) {
		retry_later(n);
		return;
	}
	snprintf(path, sizeof(path), "%s%s/%s-", root, ZPATH_NOTIFIERS, n->id);
	data = node_json(n);
	n->announcing = 1;
	if (zk_acreate(n->zk, path, data, ZOO_EPHEMERAL | ZOO_SEQUENCE,
		       created_cb, n) < 0) {
		n->announcing = 0;
		retry_later(n);
	}
	xfree(data);
}

static void
zk_event_cb(struct zk *z, int type, int state, const char *path, void *arg)
{
	struct notifier *n = arg;

	(void)path;
	if (type != ZOO_SESSION_EVENT)
		return;
	log_info("zookeeper session", "state=%s", zk_state_name(state));
	if (state == ZOO_EXPIRED_SESSION_STATE) {
		n->announcing = 0;
		zk_reopen(z);
	} else if (state == ZOO_CONNECTED_STATE) {
		announce(n);
	}
}

void
announce_start(struct notifier *n)
{
	n->announce_ev = evtimer_new(n->base, retry_cb, n);
	n->zk = zk_create(n->base, n->cfg, zk_event_cb, n);
	if (n->zk == NULL)
		log_warn("no zookeeper session: the managers cannot tell which "
			 "topics this notifier covers",
			 "hosts=%s", cfg_str(n->cfg, CFG_ZK_HOSTS));
}

void
announce_stop(struct notifier *n)
{
	/* Closing the session removes the node at once. */
	zk_destroy(n->zk);
	n->zk = NULL;
	if (n->announce_ev != NULL)
		event_free(n->announce_ev);
	n->announce_ev = NULL;
}
