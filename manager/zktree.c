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

/* Repairs path's ACL; counts what it changed. */
static int
repair_one(struct zk *z, const char *path, int *repaired, char *err,
	   size_t errlen)
{
	int r = zk_repair_acl(z, path, err, errlen);

	if (r > 0)
		(*repaired)++;
	return r < 0 ? -1 : 0;
}

/* The ephemeral children of dir (workers, election candidates). */
static int
repair_children(struct zk *z, const char *dir, int *repaired, char *err,
		size_t errlen)
{
	struct String_vector kids = {0, NULL};
	char path[1024];
	int rc = zoo_get_children(zk_handle(z), dir, 0, &kids);

	if (rc == ZNONODE)
		return 0;
	if (rc != ZOK) {
		snprintf(err, errlen, "cannot list %s: %s", dir, zerror(rc));
		return -1;
	}
	for (int i = 0; i < kids.count && rc == ZOK; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, kids.data[i]);
		if (repair_one(z, path, repaired, err, errlen) < 0)
			rc = -1;
	}
	deallocate_String_vector(&kids);
	return rc == ZOK ? 0 : -1;
}

/*
 * Every node of the tree gets the session's ACL (zookeeper.auth_file's
 * identity: all rights, everyone: read; or open without one): a tree made
 * before auth_file was set, or whose ACLs someone changed, is put right.
 */
static int
repair_acls(struct zk *z, const char *root, int nslots, char *err,
	    size_t errlen)
{
	static const char *const fixed[] = {"",
					    ZPATH_CONFIG,
					    ZPATH_SLOTS,
					    ZPATH_WORKERS,
					    ZPATH_ELECTION,
					    ZPATH_MASTER,
					    ZPATH_NOTIFIERS,
					    ZPATH_PAUSED};
	char path[1024];
	int repaired = 0;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", root, fixed[i]);
		if (repair_one(z, path, &repaired, err, errlen) < 0)
			return -1;
	}
	for (int i = 0; i < nslots; i++) {
		zpath_slot(path, sizeof(path), root, i);
		if (repair_one(z, path, &repaired, err, errlen) < 0)
			return -1;
	}
	zpath(path, sizeof(path), root, ZPATH_WORKERS);
	if (repair_children(z, path, &repaired, err, errlen) < 0)
		return -1;
	zpath(path, sizeof(path), root, ZPATH_ELECTION);
	if (repair_children(z, path, &repaired, err, errlen) < 0)
		return -1;
	if (repaired > 0)
		log_warn("zookeeper ACLs repaired", "root=%s nodes=%d", root,
			 repaired);
	return 0;
}

int
zktree_ensure(struct zk *z, const char *root, int nslots, char *err,
	      size_t errlen)
{
	char path[1024], *data;
	int created = 0;

	/* A clear word on credentials before any create fails with them. */
	if (zk_check_access(z, root, err, errlen) < 0)
		return -1;
	if (ensure_parents(z, root) < 0 || zk_ensure(z, root, NULL, 0) < 0) {
		snprintf(err, errlen, "cannot create %s", root);
		return -1;
	}
	zpath(path, sizeof(path), root, ZPATH_CONFIG);
	data = xasprintf("{\"slots\":%d,\"created_at\":%lld}", nslots,
			 (long long)clock_now_ms());
	/* Whoever creates /config first fixes the slot count for good. */
	if (zoo_create(zk_handle(z), path, data, (int)strlen(data), zk_acl(z),
		       0, NULL, 0) == ZOK)
		created = 1;
	xfree(data);
	if (check_config_node(z, path, nslots, err, errlen) < 0)
		return -1;
	if (created)
		log_info("cluster created", "root=%s slots=%d", root, nslots);

	zpath(path, sizeof(path), root, ZPATH_SLOTS);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	for (int i = 0; i < nslots; i++) {
		int rc;

		zpath_slot(path, sizeof(path), root, i);
		data = xasprintf("{\"slot\":%d,\"owner\":null,\"requested\":"
				 "null,\"epoch\":0,\"updated_at\":%lld}",
				 i, (long long)clock_now_ms());
		rc = zoo_exists(zk_handle(z), path, 0, NULL) == ZOK
			     ? ZNODEEXISTS
			     : zoo_create(zk_handle(z), path, data,
					  (int)strlen(data), zk_acl(z), 0, NULL,
					  0);
		xfree(data);
		if (rc == ZOK && !created)
			log_warn("slot node repaired", "path=%s", path);
		else if (rc != ZOK && rc != ZNODEEXISTS)
			goto fail;
	}
	zpath(path, sizeof(path), root, ZPATH_WORKERS);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	zpath(path, sizeof(path), root, ZPATH_ELECTION);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	/* Its data is rewritten at every pause and resume (topics.c). */
	zpath(path, sizeof(path), root, ZPATH_PAUSED);
	if (zk_ensure(z, path, "{\"paused\":[]}", 0) < 0)
		goto fail;
	zpath(path, sizeof(path), root, ZPATH_NOTIFIERS);
	if (zk_ensure(z, path, NULL, 0) < 0)
		goto fail;
	if (repair_acls(z, root, nslots, err, errlen) < 0)
		return -1;
	log_info("zookeeper tree ready", "root=%s slots=%d", root, nslots);
	return 0;
fail:
	snprintf(err, errlen, "cannot create %s", path);
	return -1;
}
