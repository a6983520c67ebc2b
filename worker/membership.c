#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "metrics.h"
#include "worker.h"
#include "xmalloc.h"
#include "zk.h"

static char *
member_json(const struct worker *w)
{
	char host[256];
	json_t *j;
	char *s;

	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	j = json_pack("{s:s, s:s, s:i, s:I, s:s}", "id", w->id, "host", host,
		      "pid", (int)getpid(), "started_at",
		      (json_int_t)clock_now_ms(), "version", PACKAGE_VERSION);
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}

/* Registers /workers/<id> (ephemeral). Returns -2 when a node with our id
 * belongs to another session: two workers share an id, or our previous
 * incarnation crashed and its session has not expired yet. */
static int
register_node(struct worker *w, char *err, size_t errlen)
{
	char path[512];
	char *data = member_json(w);
	int rc;

	snprintf(path, sizeof(path), "%s%s/%s",
		 cfg_str(w->cfg, CFG_CLUSTER_ROOT), ZPATH_WORKERS, w->id);
	rc = zoo_create(zk_handle(w->zk), path, data, (int)strlen(data),
			&ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
	free(data);
	if (rc == ZNODEEXISTS) {
		struct Stat st;
		const clientid_t *me = zoo_client_id(zk_handle(w->zk));

		if (zoo_exists(zk_handle(w->zk), path, 0, &st) == ZOK &&
		    st.ephemeralOwner == me->client_id)
			return 0;
		snprintf(err, errlen,
			 "worker id '%s' is already registered at %s by a "
			 "live session; give each worker a unique worker.id",
			 w->id, path);
		return -2;
	}
	if (rc == ZNONODE) {
		snprintf(err, errlen,
			 "%s does not exist: start prophet-manager first",
			 path);
		return -1;
	}
	if (rc != ZOK) {
		snprintf(err, errlen, "cannot create %s: %s", path, zerror(rc));
		return -1;
	}
	log_info("registered", "path=%s", path);
	return 0;
}

static void
zk_event_cb(struct zk *z, int type, int state, const char *path, void *arg)
{
	struct worker *w = arg;
	char err[512];

	if (type != ZOO_SESSION_EVENT)
		return;
	metric_set(w->m.zk_up, state == ZOO_CONNECTED_STATE);
	log_info("zookeeper session", "state=%s", zk_state_name(state));
	if (state == ZOO_EXPIRED_SESSION_STATE && !w->stopping) {
		/* The ephemeral node is gone with the session: start over. */
		zk_reopen(z);
	} else if (state == ZOO_CONNECTED_STATE && !w->stopping) {
		if (register_node(w, err, sizeof(err)) < 0)
			log_error("registration failed", "error=\"%s\"", err);
	}
}

int
membership_start(struct worker *w, char *err, size_t errlen)
{
	int64_t deadline;
	int rc, waited = 0;

	w->zk = zk_create(w->base, cfg_str(w->cfg, CFG_ZK_HOSTS),
			  (int)cfg_int(w->cfg, CFG_ZK_SESSION_TIMEOUT_MS),
			  zk_event_cb, w);
	if (w->zk == NULL || zk_wait_connected(w->zk, 30000) < 0) {
		snprintf(err, errlen, "cannot connect to zookeeper at %s",
			 cfg_str(w->cfg, CFG_ZK_HOSTS));
		return -1;
	}
	/* A crashed predecessor with our id keeps its node until its session
	 * expires: wait that long before calling the id a duplicate. */
	deadline = clock_mono_ms() +
		   cfg_int(w->cfg, CFG_ZK_SESSION_TIMEOUT_MS) + 5000;
	while ((rc = register_node(w, err, errlen)) == -2 &&
	       clock_mono_ms() < deadline) {
		if (!waited++)
			log_warn("worker id registered by another session; "
				 "waiting for it to expire",
				 "id=%s", w->id);
		usleep(200 * 1000);
	}
	if (rc < 0)
		return -1;
	/* Until coordination lands every worker scans every slot; the
	 * atomic Redis claim keeps a task from being published twice. */
	for (int i = 0; i < w->nslots; i++)
		w->slots[i].owned = 1;
	metric_set(w->m.slots_owned, w->nslots);
	return 0;
}

void
membership_stop(struct worker *w)
{
	for (int i = 0; i < w->nslots; i++)
		w->slots[i].owned = 0;
	metric_set(w->m.slots_owned, 0);
	zk_destroy(w->zk);
	w->zk = NULL;
}
