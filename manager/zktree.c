#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon.h"
#include "keys.h"
#include "log.h"
#include "manager.h"
#include "xmalloc.h"
#include "zk.h"
#include "zknode.h"

/* Creates every ancestor of path (persistent, empty). */
static int
ensure_parents(struct zk *z, const char *path)
{
	char buf[1024];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (zk_ensure(z, buf, NULL, 0) < 0)
			return -1;
		*p = '/';
	}
	return 0;
}

static int
check_config_node(struct zk *z, const char *path, int nslots, char *err,
		  size_t errlen)
{
	char *data;
	int rc;

	data = zk_get(z, path, NULL, &rc);
	if (data == NULL) {
		snprintf(err, errlen, "cannot read %s: %s", path, zerror(rc));
		return -1;
	}
	rc = cluster_config_verify(data, nslots, path, err, errlen);
	xfree(data);
	return rc;
}

int
zktree_ensure(struct zk *z, const char *root, int nslots, char *err,
	      size_t errlen)
{
	char path[1024], *data;
	int created = 0;

	if (ensure_parents(z, root) < 0 || zk_ensure(z, root, NULL, 0) < 0) {
		snprintf(err, errlen, "cannot create %s", root);
		return -1;
	}
	snprintf(path, sizeof(path), "%s%s", root, ZPATH_CONFIG);
	data = xasprintf("{\"slots\":%d,\"created_at\":%lld}", nslots,
			 (long long)clock_now_ms());
	/* Whoever creates /config first fixes the slot count for good. */
	if (zoo_create(zk_handle(z), path, data, (int)strlen(data),
		       &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0) == ZOK)
		created = 1;
	xfree(data);
	if (check_config_node(z, path, nslots, err, errlen) < 0)
		return -1;
	if (created)
		log_info("cluster created", "root=%s slots=%d", root, nslots);

	snprintf(path, sizeof(path), "%s%s", root, ZPATH_SLOTS);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	for (int i = 0; i < nslots; i++) {
		int rc;

		snprintf(path, sizeof(path), "%s%s%d", root, ZPATH_SLOT_PREFIX,
			 i);
		data = xasprintf("{\"slot\":%d,\"owner\":null,\"requested\":"
				 "null,\"epoch\":0,\"updated_at\":%lld}",
				 i, (long long)clock_now_ms());
		rc = zoo_create(zk_handle(z), path, data, (int)strlen(data),
				&ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		xfree(data);
		if (rc == ZOK && !created)
			log_warn("slot node repaired", "path=%s", path);
		else if (rc != ZOK && rc != ZNODEEXISTS)
			goto fail;
	}
	snprintf(path, sizeof(path), "%s%s", root, ZPATH_WORKERS);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s%s", root, ZPATH_ELECTION);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	log_info("zookeeper tree ready", "root=%s slots=%d", root, nslots);
	return 0;
fail:
	snprintf(err, errlen, "cannot create %s", path);
	return -1;
}
